"""Races: many claimers on one SQLite database, and cancel / response / expiry / delivery racing on
one job. Black-box with real processes, then in-process against the store where the interleavings
can be enumerated (one SqliteStore runs concurrent writes in call order, so `gather` over every
permutation covers every serial order; two SqliteStore instances on one file interleave for real).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import ids
from gateway.jobs import DeliveryState, JobStatus, Mode
from gateway.store.base import Attempt, NewDelivery, NewJob
from gateway.store.sqlite import SqliteStore
from tests.acceptance.harness import eventually
from tests.faults.conftest import (
    TERMINAL,
    FaultReceiver,
    Procs,
    all_jobs,
    check_arrivals,
    create_many,
    wait_terminal,
)

S = JobStatus
LEASE = 30.0

# ---- (a) many claimers, black-box ---------------------------------------------------------------


def _filtered_count(metrics_text: str) -> int:
    m = re.search(r'^gateway_filter_seconds_count\{direction="inbound"\} (\S+)$', metrics_text, re.M)
    return int(float(m.group(1))) if m else 0


@pytest.mark.slow
async def test_workers_and_serve_on_one_sqlite_file_run_each_job_once(
    receiver: FaultReceiver, procs: Procs
) -> None:
    """An API without workers (its jobs are claimable by anyone), a `gateway serve` with workers and
    3 `gateway worker`s on one file; 500 jobs, a third of them to a receiver that fails the first
    attempt so their retries are claimed by whichever process is quickest."""
    env = {"GATEWAY_LEASE_SECONDS": "5"}  # contention must not be mistaken for a dead worker
    api = procs.serve("--no-workers", name="api", env=env)
    await api.up()
    serve = procs.serve(name="serve", env=env)
    workers = [procs.worker(name=f"worker-{i}", env=env) for i in range(3)]
    await asyncio.gather(serve.up(), *(w.up() for w in workers))

    def comb(i: int, path: str) -> dict[str, Any]:
        return {"message_input": f"q{i}", "message_output": f"a{i}", "webhook_url": receiver.base + path}

    via_api = [comb(i, "/ok") for i in range(250)] + [comb(i, "/flaky/1") for i in range(100)]
    separate = [{"message_input": f"s{i}", "webhook_url": f"{receiver.base}/ok"} for i in range(50)]
    via_serve = [comb(i, "/flaky/1") for i in range(100)]
    async with api.client() as a, serve.client() as s:
        created = await asyncio.gather(
            create_many(a, via_api + separate, concurrency=16), create_many(s, via_serve, concurrency=16)
        )
        jobs = created[0] + created[1]
        secrets = {j["job_id"]: j["webhook_secret"] for j in jobs}
        sep_ids = {j["job_id"] for j in created[0][len(via_api) :]}
        answered: set[str] = set()

        async def answer_all() -> bool:
            listing = await all_jobs(a)
            ready = [j for j in sep_ids - answered if listing[j]["status"] == "awaiting_response"]
            codes = await asyncio.gather(
                *(a.post(f"/v1/jobs/{j}/response", json={"message_output": "ok"}) for j in ready)
            )
            answered.update(j for j, r in zip(ready, codes, strict=True) if r.status_code == 202)
            return answered == sep_ids

        await eventually(answer_all, within=20, interval=0.2, what="every separate job answered")
        done = await wait_terminal(a, secrets, within=30)
        logs = dict(
            await asyncio.gather(*(_log(a, j) for j in secrets))  # one GET per job, sequentially batched
        )
        filtered_by_serve = _filtered_count((await s.get("/metrics")).text)

    assert Counter(j["status"] for j in done.values()) == {"completed": len(secrets)}
    ids_seen = check_arrivals(receiver, secrets)
    for key, seen in ids_seen.items():
        assert len(seen) == 1, (key, seen)
    for job_id, log in logs.items():
        events = {a["event"] for a in log}
        assert "job.completed" in events
        for event in events:
            attempts = [a for a in log if a["event"] == event]
            assert {a["webhook_id"] for a in attempts} == ids_seen[(job_id, event)]
            assert sorted(a["attempt"] for a in attempts) == list(range(1, len(attempts) + 1)), attempts
            wins = [a for a in attempts if 200 <= (a["status_code"] or 0) < 300]
            assert len(wins) == 1, (job_id, event, attempts)  # the job completed exactly once
    duplicates = sum(n - 1 for n in receiver.answered.values() if n > 1)
    print(f"\ninbound filtered by `gateway serve`: {filtered_by_serve} of {len(secrets)};"
          f" 2xx answered more than once for one webhook-id: {duplicates}")  # fmt: skip
    assert filtered_by_serve < len(secrets), "the worker processes never claimed anything"
    for proc in (serve, *workers):
        assert "Traceback" not in proc.log(), proc.log()[-3000:]


async def _log(client: httpx.AsyncClient, job_id: str) -> tuple[str, list[dict[str, Any]]]:
    r = await client.get(f"/v1/jobs/{job_id}/deliveries")
    assert r.status_code == 200, r.text
    attempts: list[dict[str, Any]] = r.json()["attempts"]
    return job_id, attempts


# ---- (a) many claimers, in-process --------------------------------------------------------------


def _new_job(now: float, *, mode: Mode = Mode.COMBINED, ttl: float = 3600, tenant: str = "t1") -> NewJob:
    return NewJob(
        id=ids.job_id(now),
        tenant_id=tenant,
        mode=mode,
        policy="default",
        input_text="hello",
        output_text="answer" if mode is Mode.COMBINED else None,
        webhook_url="http://receiver.test/hook",
        secret_enc=b"enc",
        signing_key_enc=None,
        metadata={},
        created_at=now,
        expires_at=now + ttl,
    )


async def _create(store: SqliteStore, job: NewJob) -> str:
    created, fresh = await store.create_job(job, claim_for=None, lease=LEASE, idempotency_ttl=60)
    assert fresh
    return created.id


async def _drain_claims(
    claim: Callable[[str], Awaitable[list[Any]]], owners: list[str]
) -> dict[str, list[str]]:
    """Every owner claims in a loop (small batches) until one finds nothing; returns what each got."""
    got: dict[str, list[str]] = {o: [] for o in owners}

    async def loop(owner: str) -> None:
        for _ in range(10_000):
            batch = await claim(owner)
            if not batch:
                return
            got[owner].extend(item.id for item in batch)

    await asyncio.gather(*(loop(o) for o in owners))
    return got


@pytest.mark.parametrize("instances", [1, 2])
async def test_asyncio_claimers_claim_each_job_and_delivery_once(tmp_path: Path, instances: int) -> None:
    url = f"sqlite:///{tmp_path}/claims.db"
    stores = [SqliteStore(url) for _ in range(instances)]
    for store in stores:
        await store.open()
    try:
        now = time.time()
        jobs = [await _create(stores[0], _new_job(now)) for _ in range(400)]
        owners = [f"w{i}" for i in range(16)]

        def claim_jobs(owner: str) -> Awaitable[list[Any]]:
            store = stores[int(owner[1:]) % instances]
            return store.claim_jobs(owner, now=now, lease=LEASE, limit=5)

        got = await _drain_claims(claim_jobs, owners)
        claimed = [j for batch in got.values() for j in batch]
        assert len(claimed) == len(set(claimed)) and set(claimed) == set(jobs)
        assert sum(1 for batch in got.values() if batch) > 1, "one claimer took everything"

        # each owner moves its jobs to delivering with a webhook (only the lease holder can); then the
        # deliveries are raced for the same way
        async def advance(owner: str, job_id: str) -> bool:
            store = stores[int(owner[1:]) % instances]
            hook = NewDelivery(ids.webhook_id(), "job.completed", "http://r.test/", b"{}", now + 3600)
            path = [S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING]
            stale = await store.transition(job_id, path, now=now, owner="nobody")  # not the holder
            ok = await store.transition(job_id, path, now=now, owner=owner, deliveries=[hook])
            return ok and not stale

        results = await asyncio.gather(*(advance(o, j) for o, batch in got.items() for j in batch))
        assert all(results)

        def claim_deliveries(owner: str) -> Awaitable[list[Any]]:
            store = stores[int(owner[1:]) % instances]
            return store.claim_deliveries(owner, now=now, lease=LEASE, limit=5)

        dgot = await _drain_claims(claim_deliveries, owners)
        dclaimed = [d for batch in dgot.values() for d in batch]
        assert len(dclaimed) == len(set(dclaimed)) == len(jobs)
    finally:
        for store in stores:
            await store.close()


# ---- (b) cancel / response / expiry / delivery on one job, in-process -----------------------------

Op = str  # "cancel" | "respond" | "expire" | "deliver"
OPS: tuple[Op, ...] = ("cancel", "respond", "expire", "deliver")


def _model(start: JobStatus, order: tuple[Op, ...]) -> tuple[dict[Op, bool], JobStatus]:
    """What the contract says each op returns, and the final status, when they run in `order`.
    `deliver` is the lease holder recording its webhook's success: it is recorded either way (the
    attempt happened), and completes the job only if the job is still `delivering`."""
    status = start
    out: dict[Op, bool] = {}
    for op in order:
        if op == "cancel":
            out[op] = status not in TERMINAL
            status = S.CANCELLED if out[op] else status
        elif op == "respond":
            out[op] = status is S.AWAITING_RESPONSE
            status = S.PROCESSING_OUTBOUND if out[op] else status
        elif op == "expire":
            out[op] = status not in TERMINAL
            status = S.EXPIRED if out[op] else status
        else:
            out[op] = True
            status = S.COMPLETED if status is S.DELIVERING else status
    return out, status


async def _setup(store: SqliteStore, start: JobStatus, now: float) -> tuple[str, str]:
    """A job in `start` (awaiting_response or delivering) whose webhook is leased to worker `w`."""
    mode = Mode.SEPARATE if start is S.AWAITING_RESPONSE else Mode.COMBINED
    job_id = await _create(store, _new_job(now, mode=mode, ttl=100))
    event = "job.awaiting_response" if start is S.AWAITING_RESPONSE else "job.completed"
    hook = NewDelivery(ids.webhook_id(), event, "http://r.test/", b"{}", now + 100)
    path = [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE]
    if start is S.DELIVERING:
        path = [S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING]
    assert await store.transition(job_id, path, now=now, deliveries=[hook], claim_for="w", lease=LEASE)
    return job_id, hook.id


def _runner(
    stores: list[SqliteStore], job_id: str, hook_id: str, start: JobStatus, now: float
) -> Callable[[Op, int], Awaitable[bool]]:
    """Each op as the API, the sweeper or the worker calls it. The sweeper runs after expires_at;
    the API calls arrive just before it."""
    event = "job.awaiting_response" if start is S.AWAITING_RESPONSE else "job.completed"
    final = [S.DELIVERING, S.COMPLETED] if start is S.DELIVERING else None

    async def run(op: Op, i: int) -> bool:
        store = stores[i % len(stores)]
        if op == "cancel":
            return (await store.cancel_job("t1", job_id, now=now + 99)).ok
        if op == "respond":
            r = await store.submit_response("t1", job_id, "out", now=now + 99, claim_for=None, lease=LEASE)
            return r.ok
        if op == "expire":
            return job_id in await store.expire_due(now=now + 101, limit=1000)
        attempt = Attempt(hook_id, job_id, event, 1, now + 99, 5.0, 200, None, "", None)
        return await store.record_attempt(
            attempt, owner="w", state=DeliveryState.SUCCEEDED, now=now + 99, job_path=final
        )

    return run


@pytest.mark.parametrize("start", [S.AWAITING_RESPONSE, S.DELIVERING])
async def test_every_order_of_cancel_response_expiry_and_delivery_has_one_winner(
    tmp_path: Path, start: JobStatus
) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/order.db")
    await store.open()
    try:
        for k, order in enumerate(itertools.permutations(OPS)):
            # each job expires before the previous one: the sweeper call touches only this job
            now = time.time() - 1000 * (k + 1)
            job_id, hook_id = await _setup(store, start, now)
            run = _runner([store], job_id, hook_id, start, now)
            results = await asyncio.gather(*(run(op, 0) for op in order))
            expected, final = _model(start, order)
            job = await store.get_job("t1", job_id)
            assert job is not None
            assert (dict(zip(order, results, strict=True)), job.status) == (expected, final), order
            winners = [op for op in ("cancel", "expire") if expected[op]]
            assert len(winners) + (final is S.COMPLETED) <= 1
    finally:
        await store.close()


@pytest.mark.parametrize("start", [S.AWAITING_RESPONSE, S.DELIVERING])
async def test_racing_on_two_store_instances_matches_some_serial_order(
    tmp_path: Path, start: JobStatus
) -> None:
    url = f"sqlite:///{tmp_path}/two.db"
    stores = [SqliteStore(url), SqliteStore(url)]
    for store in stores:
        await store.open()
    outcomes: Counter[JobStatus] = Counter()
    try:
        possible = {
            (tuple(sorted(_model(start, order)[0].items())), _model(start, order)[1])
            for order in itertools.permutations(OPS)
        }
        rng = random.Random(7)
        for k in range(40):
            now = time.time() - 1000 * (k + 1)
            job_id, hook_id = await _setup(stores[0], start, now)
            run = _runner(stores, job_id, hook_id, start, now)
            order = rng.sample(OPS, len(OPS))
            results = await asyncio.gather(*(run(op, i) for i, op in enumerate(order)))
            job = await stores[1].get_job("t1", job_id)
            assert job is not None and job.status in TERMINAL | {S.PROCESSING_OUTBOUND}
            got = (tuple(sorted(zip(order, results, strict=True))), job.status)
            assert got in possible, got
            outcomes[job.status] += 1
    finally:
        for store in stores:
            await store.close()
    print(f"\nfinal statuses over 40 races from {start.value}: {dict(outcomes)}")


async def test_a_job_past_expires_at_cannot_be_cancelled_in_store(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/late.db")
    await store.open()
    try:
        now = time.time() - 10
        job_id, _ = await _setup(store, S.AWAITING_RESPONSE, now)  # expires at now + 100
        late = now + 101
        assert not (await store.submit_response("t1", job_id, "x", now=late, claim_for=None, lease=1)).ok
        cancel = await store.cancel_job("t1", job_id, now=late)
        assert not cancel.ok
        assert cancel.job is not None and cancel.job.status in (S.EXPIRED, S.AWAITING_RESPONSE)
    finally:
        await store.close()


# ---- (b) black-box ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_delete_and_response_racing_expiry_and_delivery_end_in_one_consistent_status(
    receiver: FaultReceiver, procs: Procs
) -> None:
    """80 separate-mode jobs that expire after 1 s. For each, once it awaits a response, POST the
    response and DELETE it, the DELETE from 50 ms before to 600 ms after the response, the pair
    fired at a different moment of the job's life (some past expires_at); webhooks take 0.2 s, so a
    DELETE also lands while the final webhook is in flight. Every job ends in exactly one terminal
    status, and every answer the API gave is consistent with it."""
    server = procs.serve(env={"GATEWAY_SWEEP_INTERVAL_SECONDS": "0.2"})
    await server.up()
    rng = random.Random(11)
    async with server.client() as c:
        hook = f"{receiver.base}/sleep/0.2"
        bodies = [{"message_input": f"s{i}", "webhook_url": hook, "expires_in_seconds": 1} for i in range(80)]
        created = await create_many(c, bodies)
        t0 = time.monotonic()
        answers: dict[str, dict[str, httpx.Response]] = {}

        async def race(job: dict[str, Any], at: float, gap: float) -> None:
            job_id = job["job_id"]
            await eventually(
                lambda: _status_in(c, job_id, {"awaiting_response", *TERMINAL}), within=5, interval=0.02
            )
            # deliberately timed (not waiting for a state): the point is WHEN the requests land
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))

            async def later(coro: Awaitable[httpx.Response], delay: float) -> httpx.Response:
                await asyncio.sleep(max(0.0, delay))
                return await coro

            respond, delete = await asyncio.gather(
                later(c.post(f"/v1/jobs/{job_id}/response", json={"message_output": "ok"}), -gap),
                later(c.delete(f"/v1/jobs/{job_id}"), gap),
            )
            answers[job_id] = {"respond": respond, "delete": delete}

        await asyncio.gather(
            *(race(j, at=rng.uniform(0.0, 1.2), gap=rng.uniform(-0.05, 0.6)) for j in created)
        )
        done = await wait_terminal(c, [j["job_id"] for j in created], within=10)

    finals = Counter(j["status"] for j in done.values())
    print(f"\nfinal statuses: {dict(finals)}")
    hooks_completed = {p["job_id"] for p, _ in receiver.arrivals() if p["event"] == "job.completed"}
    ended_during_final_webhook = 0
    for job_id, got in answers.items():
        final = done[job_id]["status"]
        respond, delete = got["respond"], got["delete"]
        assert final in {"completed", "cancelled", "expired"}, (job_id, final)
        assert respond.status_code in (202, 409), respond.text
        assert delete.status_code in (200, 409), delete.text
        for r in (respond, delete):
            if r.status_code == 409:
                assert set(r.json()) == {"error"}
                assert r.json()["error"]["code"] in {"invalid_state", "job_expired", "conflict"}
        # a DELETE answered 200 cancelled the job, and only then is a job cancelled
        assert (delete.status_code == 200) == (final == "cancelled"), (job_id, final, delete.text)
        if delete.status_code == 200:
            assert delete.json()["status"] == "cancelled"
        if delete.status_code == 409:
            err = delete.json()["error"]
            if err["code"] == "job_expired":
                assert final == "expired"
            if err["code"] == "invalid_state":
                assert err["details"][0]["status"] == final
        if respond.status_code == 202:
            assert respond.json()["status"] in {"processing_outbound", "delivering", "completed"}
        else:
            code = respond.json()["error"]["code"]
            # once /response says job_expired, no DELETE can cancel it any more
            assert code != "job_expired" or final == "expired"
            assert code != "invalid_state" or final in {"cancelled", "expired"}
        # completed only through an accepted response, a webhook that arrived, no successful DELETE
        if final == "completed":
            assert respond.status_code == 202 and job_id in hooks_completed
        elif job_id in hooks_completed:  # cancelled or expired while the final webhook was in flight
            assert final in {"cancelled", "expired"} and respond.status_code == 202
            ended_during_final_webhook += 1
    print(f"cancelled or expired while job.completed was in flight: {ended_during_final_webhook}")
    assert finals["completed"] and finals["cancelled"], "the race never went both ways: retune timings"


async def _status_in(client: httpx.AsyncClient, job_id: str, statuses: set[str]) -> bool:
    r = await client.get(f"/v1/jobs/{job_id}")
    return r.json()["status"] in statuses


async def test_delete_after_expires_at_answers_job_expired_like_response_does(procs: Procs) -> None:
    # the sweeper runs once at start, then not for an hour: the job stays unswept past expires_at
    server = procs.serve(env={"GATEWAY_SWEEP_INTERVAL_SECONDS": "3600"})
    await server.up()
    async with server.client() as c:
        [job] = await create_many(c, [{"message_input": "hello", "expires_in_seconds": 1}])
        job_id = job["job_id"]
        await eventually(lambda: _status_in(c, job_id, {"awaiting_response"}), within=5)
        await eventually(lambda: _past(job["expires_at"]), within=5, what="expires_at passed")
        r = await c.post(f"/v1/jobs/{job_id}/response", json={"message_output": "late"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "job_expired"
        d = await c.delete(f"/v1/jobs/{job_id}")
        final = (await c.get(f"/v1/jobs/{job_id}")).json()["status"]
    assert (d.status_code, final) != (200, "cancelled"), "cancelled a job the API had just called expired"
    assert d.status_code == 409 and d.json()["error"]["code"] == "job_expired", d.text


async def _past(rfc3339: str) -> bool:
    from datetime import datetime

    return time.time() > datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() + 0.05
