"""One conformance suite: every Store implementation must pass all of it."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from gateway import ids
from gateway.jobs import DeliveryState, JobStatus, Mode
from gateway.store.base import Attempt, FilterOutcome, JobChanges, NewDelivery, NewJob, Store

S = JobStatus
LEASE = 30.0


def new_job(
    tenant: str = "t1",
    *,
    now: float | None = None,
    mode: Mode = Mode.SEPARATE,
    webhook: str | None = "http://receiver.test/hook",
    ttl: float = 3600,
    idem: tuple[str, str] | None = None,
) -> NewJob:
    now = time.time() if now is None else now
    return NewJob(
        id=ids.job_id(now),
        tenant_id=tenant,
        mode=mode,
        policy="default",
        input_text="hello",
        output_text="answer" if mode is Mode.COMBINED else None,
        webhook_url=webhook,
        secret_enc=b"enc",
        signing_key_enc=None,
        metadata={"k": "v"},
        created_at=now,
        expires_at=now + ttl,
        idem_key=idem[0] if idem else None,
        idem_hash=idem[1] if idem else None,
    )


async def create(store: Store, job: NewJob | None = None, claim_for: str | None = None) -> str:
    job = job or new_job()
    created, fresh = await store.create_job(job, claim_for=claim_for, lease=LEASE, idempotency_ttl=86400)
    assert fresh
    return created.id


async def awaiting_with_notice(store: Store, now: float, ttl: float = 3600) -> tuple[str, NewDelivery]:
    """A new separate-mode job moved to awaiting_response with its pending
    `job.awaiting_response` webhook (deadline: the job's expires_at); (job id, webhook)."""
    job_id = await create(store, new_job(now=now, ttl=ttl))
    notice = NewDelivery(ids.webhook_id(), "job.awaiting_response", "http://r.test/", b"{}", now + ttl)
    assert await store.transition(
        job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now, deliveries=[notice]
    )
    return job_id, notice


async def test_create_get_and_tenant_isolation(store: Store) -> None:
    job_id = await create(store)
    job = await store.get_job("t1", job_id)
    assert job is not None
    assert job.status is S.PROCESSING_INBOUND
    assert job.metadata == {"k": "v"}
    assert job.delivery is not None and job.delivery.attempts == 0
    assert await store.get_job("t2", job_id) is None
    assert await store.list_jobs("t2", status=None, limit=10, before_id=None) == []
    assert await store.list_attempts("t2", job_id) == []


async def test_idempotency_key_returns_first_job_within_ttl(store: Store) -> None:
    now = time.time()
    first, fresh = await store.create_job(
        new_job(now=now, idem=("k1", "h1")), claim_for=None, lease=LEASE, idempotency_ttl=100
    )
    assert fresh
    again, fresh2 = await store.create_job(
        new_job(now=now + 1, idem=("k1", "h2")), claim_for=None, lease=LEASE, idempotency_ttl=100
    )
    assert not fresh2 and again.id == first.id and again.idem_hash == "h1"
    other_tenant, fresh3 = await store.create_job(
        new_job("t2", now=now + 1, idem=("k1", "h1")), claim_for=None, lease=LEASE, idempotency_ttl=100
    )
    assert fresh3 and other_tenant.id != first.id
    later, fresh4 = await store.create_job(
        new_job(now=now + 101, idem=("k1", "h1")), claim_for=None, lease=LEASE, idempotency_ttl=100
    )
    assert fresh4 and later.id != first.id


async def test_concurrent_idempotent_creates_make_one_job(store: Store) -> None:
    now = time.time()
    results = await asyncio.gather(
        *(
            store.create_job(
                new_job(now=now, idem=("same", "h")), claim_for=None, lease=LEASE, idempotency_ttl=60
            )
            for _ in range(20)
        )
    )
    assert sum(1 for _, fresh in results if fresh) == 1
    assert len({job.id for job, _ in results}) == 1


async def test_racing_claimers_claim_each_job_once(store: Store) -> None:
    created = {await create(store) for _ in range(60)}
    now = time.time()
    batches = await asyncio.gather(
        *(store.claim_jobs(f"w{i}", now=now, lease=LEASE, limit=7) for i in range(12))
    )
    claimed = [job.id for batch in batches for job in batch]
    assert len(claimed) == len(set(claimed))
    rest = await store.claim_jobs("late", now=now, lease=LEASE, limit=100)
    assert set(claimed) | {j.id for j in rest} == created
    assert not set(claimed) & {j.id for j in rest}


async def test_lease_expiry_makes_job_claimable_again(store: Store) -> None:
    job_id = await create(store, claim_for="dead-worker")
    now = time.time()
    assert await store.claim_jobs("w2", now=now, lease=LEASE, limit=10) == []
    [again] = await store.claim_jobs("w2", now=now + LEASE + 1, lease=LEASE, limit=10)
    assert again.id == job_id and again.lease_owner == "w2"
    # the dead worker's late write is refused: it no longer owns the job
    assert not await store.transition(
        job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now, owner="dead-worker"
    )
    assert await store.transition(job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now, owner="w2")


async def test_renew_and_release_leases(store: Store) -> None:
    job_id = await create(store, claim_for="w1")
    now = time.time()
    await store.renew_leases("w1", [job_id], [], until=now + 500)
    assert await store.claim_jobs("w2", now=now + LEASE + 1, lease=LEASE, limit=10) == []
    await store.release_leases("w1", [job_id], [], now=now)
    [claimed] = await store.claim_jobs("w2", now=now, lease=LEASE, limit=10)
    assert claimed.id == job_id


async def test_transition_is_compare_and_set(store: Store) -> None:
    job_id = await create(store)
    now = time.time()
    assert not await store.transition(job_id, [S.PROCESSING_OUTBOUND, S.DELIVERING], now=now)
    assert await store.transition(
        job_id,
        [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE],
        now=now,
        changes=JobChanges(inbound={"verdict": "allowed", "message": "hi", "matches": []}, clear_input=True),
    )
    job = await store.get_job("t1", job_id)
    assert job is not None and job.status is S.AWAITING_RESPONSE and job.input_text is None
    assert job.inbound == {"verdict": "allowed", "message": "hi", "matches": []}
    # the same CAS a second time loses
    assert not await store.transition(job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now)


async def test_terminal_status_never_changes(store: Store) -> None:
    job_id = await create(store)
    now = time.time()
    assert await store.transition(job_id, [S.PROCESSING_INBOUND, S.INBOUND_BLOCKED], now=now)
    for target in (S.EXPIRED, S.CANCELLED):
        assert not await store.transition(job_id, [S.PROCESSING_INBOUND, target], now=now)
    cancel = await store.cancel_job("t1", job_id, now=now)
    assert not cancel.ok and cancel.job is not None and cancel.job.status is S.INBOUND_BLOCKED
    assert await store.expire_due(now=now + 10**6, limit=10) == []
    job = await store.get_job("t1", job_id)
    assert job is not None and job.status is S.INBOUND_BLOCKED and job.finished_at is not None


async def test_submit_response_only_while_awaiting_and_unexpired(store: Store) -> None:
    now = time.time()
    job_id = await create(store, new_job(now=now, ttl=100))
    early = await store.submit_response("t1", job_id, "out", now=now, claim_for=None, lease=LEASE)
    assert not early.ok and early.job is not None and early.job.status is S.PROCESSING_INBOUND
    assert await store.transition(job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now)
    wrong_tenant = await store.submit_response("t2", job_id, "out", now=now, claim_for=None, lease=LEASE)
    assert not wrong_tenant.ok and wrong_tenant.job is None
    ok = await store.submit_response("t1", job_id, "out", now=now, claim_for="w1", lease=LEASE)
    assert ok.ok and ok.job is not None and ok.job.status is S.PROCESSING_OUTBOUND
    assert ok.job.output_text == "out" and ok.job.lease_owner == "w1"
    again = await store.submit_response("t1", job_id, "out2", now=now, claim_for=None, lease=LEASE)
    assert not again.ok


async def test_a_response_to_a_job_past_expires_at_expires_it(store: Store) -> None:
    """Not swept yet, but overdue: the response is refused and the job is expired there and then
    (its GET agrees with the 409 job_expired at once), its pending webhooks stopped, on every store."""
    now = time.time()
    job_id, _ = await awaiting_with_notice(store, now, ttl=100)
    too_late = await store.submit_response("t1", job_id, "out", now=now + 101, claim_for=None, lease=LEASE)
    assert not too_late.ok and too_late.job is not None
    assert too_late.job.status is S.EXPIRED and too_late.job.error_code == "job_expired"
    assert too_late.job.output_text is None  # the refused answer is not kept
    job = await store.get_job("t1", job_id)
    assert job is not None and job.status is S.EXPIRED and job.finished_at is not None
    assert await store.claim_deliveries("w", now=now + 101, lease=LEASE, limit=10) == []
    assert await store.expire_due(now=now + 102, limit=10) == []
    other = await store.submit_response("t2", job_id, "out", now=now + 101, claim_for=None, lease=LEASE)
    assert other.job is None


async def test_a_response_stops_the_retries_of_its_awaiting_response_notice(store: Store) -> None:
    """The notice was failing and retrying when the backend answered (it polled the job): the
    retry must not reach the receiver after the job moved on, perhaps after job.completed."""
    now = time.time()
    job_id, _ = await awaiting_with_notice(store, now)
    _, other_notice = await awaiting_with_notice(store, now)
    claimed = await store.claim_deliveries("w1", now=now, lease=LEASE, limit=10)
    for d in claimed:  # both failed once, retry in 5 s
        failed = Attempt(d.id, d.job_id, d.event, 1, now, 1.0, 500, "http_500", "", now + 5)
        assert await store.record_attempt(failed, owner="w1", state=DeliveryState.PENDING, now=now)
    answered = await store.submit_response("t1", job_id, "out", now=now + 1, claim_for=None, lease=LEASE)
    assert answered.ok and answered.job is not None and answered.job.delivery is not None
    assert answered.job.delivery.next_attempt_at is None  # what the 202 shows: no retry to come
    due = await store.claim_deliveries("w1", now=now + 6, lease=LEASE, limit=10)
    assert [d.id for d in due] == [other_notice.id]  # only the unanswered job's notice retries
    job = await store.get_job("t1", job_id)
    assert job is not None and job.delivery is not None and job.delivery.next_attempt_at is None


async def test_a_410_to_the_awaiting_response_notice_fails_the_job(store: Store) -> None:
    now = time.time()
    job_id, _ = await awaiting_with_notice(store, now)
    [d] = await store.claim_deliveries("w1", now=now, lease=LEASE, limit=10)
    gone = Attempt(d.id, job_id, d.event, 1, now, 1.0, 410, "http_410", "", None)
    changes = JobChanges(error_code="webhook_gone", error_message="gone")
    assert await store.record_attempt(
        gone,
        owner="w1",
        state=DeliveryState.FAILED,
        now=now,
        job_path=[S.AWAITING_RESPONSE, S.FAILED],
        job_changes=changes,
    )
    job = await store.get_job("t1", job_id)
    assert job is not None and job.status is S.FAILED and job.error_code == "webhook_gone"
    late = await store.submit_response("t1", job_id, "out", now=now + 1, claim_for=None, lease=LEASE)
    assert not late.ok


async def test_an_overdue_webhook_is_dropped_and_its_job_expires(store: Store) -> None:
    """A retry that came due before expires_at but was claimed after it (its worker was down):
    not sent; an unfinished job expires with it, a finished job's notice alone ends failed."""
    now = time.time()
    waiting, _ = await awaiting_with_notice(store, now, ttl=100)
    blocked = await create(store, new_job(now=now, ttl=100))
    blocked_notice = NewDelivery(ids.webhook_id(), "job.inbound_blocked", "http://r.test/", b"{}", now + 100)
    assert await store.transition(
        blocked, [S.PROCESSING_INBOUND, S.INBOUND_BLOCKED], now=now, deliveries=[blocked_notice]
    )
    claimed = {d.job_id: d for d in await store.claim_deliveries("w1", now=now + 101, lease=LEASE, limit=10)}
    assert set(claimed) == {waiting, blocked}
    for d in claimed.values():  # another worker cannot drop what w1 holds
        assert not await store.drop_overdue_delivery(d.id, d.job_id, "t1", owner="w2", now=now + 101) or (
            d.job_id == waiting  # (an unfinished overdue job expires whoever asks, as a sweep would)
        )
    assert await store.drop_overdue_delivery(claimed[blocked].id, blocked, "t1", owner="w1", now=now + 101)
    job = await store.get_job("t1", waiting)
    assert job is not None and job.status is S.EXPIRED and job.error_code == "job_expired"
    assert job.delivery is not None and job.delivery.next_attempt_at is None
    job = await store.get_job("t1", blocked)
    assert job is not None and job.status is S.INBOUND_BLOCKED
    assert job.delivery is not None and job.delivery.next_attempt_at is None
    assert await store.claim_deliveries("w1", now=now + 500, lease=LEASE, limit=10) == []
    assert await store.list_attempts("t1", waiting) == [] and await store.list_attempts("t1", blocked) == []


async def test_cancel_stops_pending_deliveries(store: Store) -> None:
    now = time.time()
    job_id, _ = await awaiting_with_notice(store, now)
    result = await store.cancel_job("t1", job_id, now=now)
    assert result.ok and result.job is not None and result.job.status is S.CANCELLED
    assert result.job.error_code == "cancelled"
    assert await store.claim_deliveries("w", now=now + 1, lease=LEASE, limit=10) == []


async def test_delivery_retry_then_success_completes_job(store: Store) -> None:
    now = time.time()
    job_id = await create(store, new_job(now=now, mode=Mode.COMBINED))
    hook = NewDelivery(ids.webhook_id(), "job.completed", "http://r.test/", b'{"a":1}', now + 3600)
    assert await store.transition(
        job_id, [S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING], now=now, deliveries=[hook]
    )
    [d] = await store.claim_deliveries("w1", now=now, lease=LEASE, limit=10)
    assert d.id == hook.id and d.body == b'{"a":1}' and d.secret_enc == b"enc" and d.attempts == 0
    assert await store.claim_deliveries("w2", now=now, lease=LEASE, limit=10) == []
    first = Attempt(d.id, job_id, d.event, 1, now, 12.5, 500, "http_500", "oops", now + 5)
    assert await store.record_attempt(first, owner="w1", state=DeliveryState.PENDING, now=now)
    stats = await store.queue_stats()
    assert stats.retrying == 1 and stats.queues["delivering"].depth == 1
    job = await store.get_job("t1", job_id)
    assert job is not None and job.delivery is not None
    assert job.delivery.attempts == 1 and job.delivery.last_status_code == 500
    assert job.delivery.last_error == "http_500"
    assert job.delivery.next_attempt_at == now + 5
    assert await store.claim_deliveries("w2", now=now + 1, lease=LEASE, limit=10) == []
    [d2] = await store.claim_deliveries("w2", now=now + 6, lease=LEASE, limit=10)
    assert d2.id == d.id and d2.attempts == 1
    # the first worker's lease is gone: its write is refused
    stale = Attempt(d.id, job_id, d.event, 2, now, 1.0, 200, None, "", None)
    assert not await store.record_attempt(stale, owner="w1", state=DeliveryState.SUCCEEDED, now=now)
    second = Attempt(d.id, job_id, d.event, 2, now + 6, 3.0, 204, None, "", None)
    assert await store.record_attempt(
        second, owner="w2", state=DeliveryState.SUCCEEDED, now=now + 6, job_path=[S.DELIVERING, S.COMPLETED]
    )
    job = await store.get_job("t1", job_id)
    assert job is not None and job.status is S.COMPLETED
    attempts = await store.list_attempts("t1", job_id)
    assert [(a.attempt, a.status_code, a.error) for a in attempts] == [(1, 500, "http_500"), (2, 204, None)]
    assert attempts[0].response_excerpt == "oops"
    assert {a.delivery_id for a in attempts} == {hook.id}
    stats = await store.queue_stats()
    assert stats.retrying == 0 and stats.queues["delivering"].depth == 0


async def test_expire_due_only_overdue_non_terminal(store: Store) -> None:
    now = time.time()
    overdue = await create(store, new_job(now=now, ttl=10))
    fresh = await create(store, new_job(now=now, ttl=1000))
    done = await create(store, new_job(now=now, ttl=10))
    assert await store.transition(done, [S.PROCESSING_INBOUND, S.INBOUND_BLOCKED], now=now)
    assert await store.expire_due(now=now + 11, limit=100) == [overdue]
    job = await store.get_job("t1", overdue)
    assert job is not None and job.status is S.EXPIRED and job.error_code == "job_expired"
    fresh_job = await store.get_job("t1", fresh)
    assert fresh_job is not None and fresh_job.status is S.PROCESSING_INBOUND
    # an expired job is no longer claimable
    assert {j.id for j in await store.claim_jobs("w", now=now + 11, lease=LEASE, limit=10)} == {fresh}


async def test_purge_deletes_only_finished_past_retention(store: Store) -> None:
    now = time.time()
    old = await create(store, new_job(now=now))
    live = await create(store, new_job(now=now))
    assert await store.transition(old, [S.PROCESSING_INBOUND, S.INBOUND_BLOCKED], now=now)
    assert await store.purge_finished(before=now - 1, limit=10) == 0
    assert await store.purge_finished(before=now + 1, limit=10) == 1
    assert await store.get_job("t1", old) is None
    assert await store.get_job("t1", live) is not None


async def test_queue_stats_track_statuses(store: Store) -> None:
    now = time.time()
    a = await create(store, new_job(now=now - 50))
    await create(store, new_job(now=now))
    assert await store.transition(a, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now - 40)
    stats = await store.queue_stats()
    assert stats.queues["processing_inbound"].depth == 1
    assert stats.queues["awaiting_response"].depth == 1
    assert stats.queues["awaiting_response"].oldest_since == now - 40
    assert stats.queues["processing_outbound"].depth == 0
    assert stats.queues["processing_outbound"].oldest_since is None


async def test_list_jobs_newest_first_with_cursor_and_status(store: Store) -> None:
    base = time.time()
    made = [await create(store, new_job(now=base + i)) for i in range(7)]
    await store.transition(made[2], [S.PROCESSING_INBOUND, S.INBOUND_BLOCKED], now=base)
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.list_jobs("t1", status=None, limit=3, before_id=cursor)
        seen += [j.id for j in page]
        if len(page) < 3:
            break
        cursor = page[-1].id
    assert seen == list(reversed(made))
    blocked = await store.list_jobs("t1", status=S.INBOUND_BLOCKED, limit=10, before_id=None)
    assert [j.id for j in blocked] == [made[2]]


async def test_api_keys_and_policies(store: Store) -> None:
    now = time.time()
    assert await store.count_api_keys() == 0
    await store.add_api_key("t1", "hash-1", now)
    assert await store.tenant_for_key("hash-1") == "t1"
    assert await store.tenant_for_key("nope") is None
    assert await store.count_api_keys() == 1
    await store.add_api_key("t1", "hash-2", now)
    assert await store.revoke_api_key("hash-2", now + 1) is True
    assert await store.tenant_for_key("hash-2") is None
    assert await store.tenant_for_key("hash-1") == "t1"  # only that key
    assert await store.revoke_api_key("hash-2", now + 2) is False  # revoked already
    assert await store.revoke_api_key("nope", now) is False
    await store.put_policy("t1", "strict", {"inbound": {"packs": ["pii"]}}, now)
    await store.put_policy("t1", "strict", {"inbound": {"packs": ["secrets"]}}, now + 1)
    rec = await store.get_policy("t1", "strict")
    assert rec is not None and rec.source == {"inbound": {"packs": ["secrets"]}} and rec.updated_at == now + 1
    assert await store.get_policy("t2", "strict") is None
    assert [p.name for p in await store.list_policies("t1")] == ["strict"]
    assert await store.delete_policy("t1", "strict")
    assert not await store.delete_policy("t1", "strict")


async def test_json_comes_back_exactly_as_stored(store: Store) -> None:
    """Key order and number types survive the round trip (metadata is echoed in every webhook)."""
    metadata = {"zeta": 1, "alpha": 1.0, "big": 1e20, "nested": {"b": [1, 2.5], "a": None}}
    job_id = await create(store, dataclasses.replace(new_job(), metadata=metadata))
    got = await store.get_job("t1", job_id)
    assert got is not None and got.metadata == metadata
    assert list(got.metadata) == list(metadata) and list(got.metadata["nested"]) == ["b", "a"]
    assert isinstance(got.metadata["alpha"], float) and isinstance(got.metadata["big"], float)


async def test_receiver_text_with_nul_is_recorded(store: Store) -> None:
    """A receiver's answer may hold any byte; logging the attempt must not fail on it."""
    now = time.time()
    job_id, _ = await awaiting_with_notice(store, now)
    [d] = await store.claim_deliveries("w1", now=now, lease=LEASE, limit=10)
    attempt = Attempt(d.id, job_id, d.event, 1, now, 1.0, 500, "bad\x00error", "body\x00here", now + 5)
    assert await store.record_attempt(attempt, owner="w1", state=DeliveryState.PENDING, now=now)
    [logged] = await store.list_attempts("t1", job_id)
    assert logged.status_code == 500 and logged.response_excerpt is not None
    assert logged.response_excerpt.startswith("body") and logged.response_excerpt.endswith("here")


async def test_a_job_past_expires_at_is_expired_not_cancelled(store: Store) -> None:
    """Not swept yet, but overdue: cancel answers like /response does (expired), on every store."""
    now = time.time()
    job_id, _ = await awaiting_with_notice(store, now, ttl=10)
    result = await store.cancel_job("t1", job_id, now=now + 11)
    assert not result.ok and result.job is not None
    assert result.job.status is S.EXPIRED and result.job.error_code == "job_expired"
    assert await store.claim_deliveries("w", now=now + 11, lease=LEASE, limit=10) == []
    assert await store.expire_due(now=now + 12, limit=10) == []


def _filtered(path: list[JobStatus], *, deliveries: tuple[NewDelivery, ...] = ()) -> FilterOutcome:
    inbound = {"verdict": "redacted", "message": "[EMAIL]", "matches": []}
    changes = JobChanges(clear_input=True, inbound=inbound)
    if S.PROCESSING_OUTBOUND in path:
        changes = dataclasses.replace(
            changes, clear_output=True, outbound={"verdict": "allowed", "message": "ok", "matches": []}
        )
    return FilterOutcome(tuple(path), changes, deliveries)


async def test_create_filtered_stores_the_job_past_filtering_with_its_webhook(store: Store) -> None:
    now = time.time()
    job = new_job(now=now, mode=Mode.COMBINED)
    hook = NewDelivery(ids.webhook_id(), "job.completed", "http://r.test/", b'{"b":2}', job.expires_at)
    outcome = _filtered([S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING], deliveries=(hook,))
    created, fresh = await store.create_job(
        job, claim_for="w1", lease=LEASE, idempotency_ttl=60, filtered=outcome
    )
    assert fresh and created.status is S.DELIVERING and created.lease_owner is None
    stored = await store.get_job("t1", job.id)
    assert stored is not None and stored.status is S.DELIVERING
    assert stored.input_text is None and stored.output_text is None  # filtered: the raw text is gone
    assert stored.inbound == outcome.changes.inbound and stored.outbound == outcome.changes.outbound
    assert stored.finished_at is None
    assert stored.delivery is not None and stored.delivery.attempts == 0
    assert created.inbound == stored.inbound and created.outbound == stored.outbound
    # not a job any worker claims: it is past filtering
    assert await store.claim_jobs("w2", now=now + 100, lease=LEASE, limit=10) == []
    # its webhook is leased to w1, who sends it at once; it comes back to others only after the lease
    assert await store.claim_deliveries("w2", now=now + 1, lease=LEASE, limit=10) == []
    [d] = await store.claim_deliveries("w2", now=now + LEASE + 1, lease=LEASE, limit=10)
    assert d.id == hook.id and d.body == b'{"b":2}' and d.job_status is S.DELIVERING
    stats = await store.queue_stats()
    assert stats.queues["delivering"].depth == 1 and stats.queues["processing_inbound"].depth == 0
    done = Attempt(d.id, job.id, d.event, 1, now, 2.0, 200, None, "", None)
    assert await store.record_attempt(
        done, owner="w2", state=DeliveryState.SUCCEEDED, now=now, job_path=[S.DELIVERING, S.COMPLETED]
    )
    final = await store.get_job("t1", job.id)
    assert final is not None and final.status is S.COMPLETED


async def test_create_filtered_unclaimed_webhook_is_due_at_once(store: Store) -> None:
    now = time.time()
    job = new_job(now=now)
    hook = NewDelivery(ids.webhook_id(), "job.awaiting_response", "http://r.test/", b"{}", job.expires_at)
    outcome = _filtered([S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], deliveries=(hook,))
    await store.create_job(job, claim_for=None, lease=LEASE, idempotency_ttl=60, filtered=outcome)
    [d] = await store.claim_deliveries("w", now=now, lease=LEASE, limit=10)
    assert d.id == hook.id and d.job_status is S.AWAITING_RESPONSE
    stored = await store.get_job("t1", job.id)
    assert stored is not None and stored.status is S.AWAITING_RESPONSE and stored.input_text is None
    # the answer then goes the worker's way, from awaiting_response
    answered = await store.submit_response("t1", job.id, "later", now=now, claim_for=None, lease=LEASE)
    assert answered.ok and answered.job is not None and answered.job.status is S.PROCESSING_OUTBOUND


async def test_create_filtered_terminal_job(store: Store) -> None:
    now = time.time()
    poll_only = new_job(now=now, mode=Mode.COMBINED, webhook=None)
    path = [S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING, S.COMPLETED]
    created, _ = await store.create_job(
        poll_only, claim_for=None, lease=LEASE, idempotency_ttl=60, filtered=_filtered(path)
    )
    assert created.status is S.COMPLETED and created.finished_at == now
    stored = await store.get_job("t1", poll_only.id)
    assert stored is not None and stored.status is S.COMPLETED and stored.finished_at == now
    assert stored.delivery is None
    # a finished job is never expired, and is purged after retention like any other
    assert await store.expire_due(now=now + 7200, limit=10) == []
    assert await store.purge_finished(before=now + 1, limit=10) == 1


async def test_create_filtered_idempotent_replay_queues_nothing(store: Store) -> None:
    now = time.time()
    first = new_job(now=now, idem=("key", "h"))
    hook = NewDelivery(ids.webhook_id(), "job.awaiting_response", "http://r.test/", b"{}", first.expires_at)
    outcome = _filtered([S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], deliveries=(hook,))
    await store.create_job(first, claim_for=None, lease=LEASE, idempotency_ttl=60, filtered=outcome)
    again = new_job(now=now + 1, idem=("key", "h"))
    hook2 = NewDelivery(ids.webhook_id(), "job.awaiting_response", "http://r.test/", b"{}", again.expires_at)
    replay, fresh = await store.create_job(
        again,
        claim_for=None,
        lease=LEASE,
        idempotency_ttl=60,
        filtered=_filtered([S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], deliveries=(hook2,)),
    )
    assert not fresh and replay.id == first.id
    claimed = await store.claim_deliveries("w", now=now + 2, lease=LEASE, limit=10)
    assert [d.id for d in claimed] == [hook.id]


async def test_create_filtered_refuses_a_path_not_from_processing_inbound(store: Store) -> None:
    bad = FilterOutcome((S.AWAITING_RESPONSE, S.PROCESSING_OUTBOUND), JobChanges())
    with pytest.raises(ValueError):
        await store.create_job(new_job(), claim_for=None, lease=LEASE, idempotency_ttl=60, filtered=bad)
    illegal = FilterOutcome((S.PROCESSING_INBOUND, S.COMPLETED), JobChanges())
    with pytest.raises(ValueError):
        await store.create_job(new_job(), claim_for=None, lease=LEASE, idempotency_ttl=60, filtered=illegal)
