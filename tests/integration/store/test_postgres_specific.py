"""What only PostgreSQL has to prove: several instances (each its own pool) on one database.

Migrations run once however many instances start together; claims and sweeps racing across instances
touch each row once; writers never deadlock; queue counters stay exact; NOTIFY wakes the other
instances and the LISTEN connection comes back after it is killed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from gateway import ids
from gateway.jobs import DeliveryState, JobStatus, Mode
from gateway.store.base import Attempt, NewDelivery, QueueStat, StoreError
from gateway.store.postgres import PostgresStore, Q
from gateway.store.sqlfile import load_migrations
from tests.integration.store.conftest import postgres_store
from tests.integration.store.test_conformance import LEASE, create, new_job

pytestmark = pytest.mark.postgres

S = JobStatus
WAIT = 10.0  # seconds: the most any test waits for a notification before it fails


@pytest.fixture
async def two(postgres_url: str, pg_schema: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two instances, each with its own pool, sharing one schema."""
    a = postgres_store(postgres_url, pg_schema)
    b = postgres_store(postgres_url, pg_schema)
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


@pytest.fixture
async def sql(postgres_url: str, pg_schema: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection to the test's schema, to look at the tables directly."""
    conn = await asyncpg.connect(postgres_url, server_settings={"search_path": f'"{pg_schema}"'})
    try:
        yield conn
    finally:
        await conn.close()


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def hook(now: float, event: str = "job.awaiting_response") -> NewDelivery:
    return NewDelivery(ids.webhook_id(now), event, "http://r.test/", b"{}", now + 3600)


# ---- migrations ----------------------------------------------------------------------------


async def test_migrations_apply_once_and_produce_the_schema(
    postgres_url: str, pg_schema: str, sql: asyncpg.Connection
) -> None:
    for _ in range(2):  # opening twice must not re-apply anything
        store = postgres_store(postgres_url, pg_schema)
        await store.open()
        await store.close()
    versions = [r[0] for r in await sql.fetch("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [m.version for m in load_migrations("gateway.store", "postgres")]
    tables = {
        r[0]
        for r in await sql.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", pg_schema
        )
    }
    assert {"jobs", "deliveries", "delivery_attempts", "api_keys", "policies", "queue_counts"} <= tables
    indexes = {
        r[0] for r in await sql.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = $1", pg_schema)
    }
    assert {"jobs_idem", "jobs_status_since", "jobs_runnable", "jobs_expiry", "deliveries_due"} <= indexes
    triggers = {
        r[0]: (r[1], r[2])
        for r in await sql.fetch(
            "SELECT t.tgname, t.tgdeferrable, t.tginitdeferred FROM pg_trigger t"
            " JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND NOT t.tgisinternal",
            pg_schema,
        )
    }
    assert set(triggers) == {
        "jobs_count_ins",
        "jobs_count_upd",
        "jobs_count_del",
        "deliveries_retrying_ins",
        "deliveries_retrying_upd",
        "deliveries_retrying_del",
    }
    assert all(deferred == (True, True) for deferred in triggers.values())  # counters are touched at COMMIT
    assert await sql.fetchval("SELECT count(*) FROM queue_counts") == 32


async def test_instances_starting_at_once_migrate_exactly_once(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    schema = "test_" + secrets.token_hex(8)  # not created: the stores create it, under the lock too
    stores = [postgres_store(postgres_url, schema) for _ in range(4)]
    caplog.set_level(logging.INFO, logger="gateway.store.postgres")
    try:
        await asyncio.gather(*(s.open() for s in stores))
        applied = [r.getMessage() for r in caplog.records if r.getMessage().startswith("applied")]
        assert len(applied) == len(load_migrations("gateway.store", "postgres"))
        job_id = await create(stores[0])
        assert (await stores[3].get_job("t1", job_id)) is not None
    finally:
        await asyncio.gather(*(s.close() for s in stores))
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


# ---- racing instances ----------------------------------------------------------------------


async def test_racing_claimers_on_two_instances_claim_each_job_once(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    created = {await create(a if i % 2 else b) for i in range(150)}
    now = time.time()
    batches = await asyncio.gather(
        *(
            s.claim_jobs(f"{name}{i}", now=now, lease=LEASE, limit=7)
            for i in range(10)
            for name, s in (("a", a), ("b", b))
        )
    )
    claimed = [job.id for batch in batches for job in batch]
    assert len(claimed) == len(set(claimed))
    rest = await b.claim_jobs("late", now=now, lease=LEASE, limit=1000)
    assert not set(claimed) & {j.id for j in rest}
    assert set(claimed) | {j.id for j in rest} == created


async def test_racing_delivery_claimers_on_two_instances_claim_each_once(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    now = time.time()
    hooks = set()
    for _ in range(60):
        job_id = await create(a)
        d = hook(now)
        assert await b.transition(
            job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now, deliveries=[d]
        )
        hooks.add(d.id)
    batches = await asyncio.gather(
        *(
            s.claim_deliveries(f"{n}{i}", now=now, lease=LEASE, limit=5)
            for i in range(8)
            for n, s in (("a", a), ("b", b))
        )
    )
    claimed = [d.id for batch in batches for d in batch]
    assert len(claimed) == len(set(claimed))
    rest = await a.claim_deliveries("late", now=now, lease=LEASE, limit=1000)
    assert set(claimed) | {d.id for d in rest} == hooks
    assert not set(claimed) & {d.id for d in rest}


async def test_expire_due_racing_on_two_instances_expires_each_job_once(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    now = time.time()
    overdue = set()
    for i in range(120):
        job_id = await create(a, new_job(now=now - 100, ttl=50))
        if i % 3 == 0:  # some with a pending webhook, which the expiry must stop
            assert await a.transition(
                job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now - 90, deliveries=[hook(now)]
            )
        overdue.add(job_id)
    live = await create(a, new_job(now=now, ttl=1000))
    expired: list[str] = []
    while True:
        rounds = await asyncio.gather(*(s.expire_due(now=now, limit=9) for _ in range(5) for s in (a, b)))
        batch = [job_id for ids_ in rounds for job_id in ids_]
        if not batch:
            break
        expired += batch
    assert len(expired) == len(set(expired))
    assert set(expired) == overdue
    job = await b.get_job("t1", live)
    assert job is not None and job.status is S.PROCESSING_INBOUND
    assert await a.claim_deliveries("w", now=now + 1, lease=LEASE, limit=1000) == []
    stats = await b.queue_stats()
    assert stats.queues["processing_inbound"].depth == 1 and stats.queues["awaiting_response"].depth == 0


async def test_writers_racing_on_the_same_jobs_never_deadlock(
    two: tuple[PostgresStore, PostgresStore], sql: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Per job at once: the final webhook's success (delivery, then job), a cancel and an expiry (job,
    then its webhooks), lease renewals (webhooks, in id order). Each job takes exactly one path."""
    a, b = two
    now = time.time()
    jobs: dict[str, str] = {}
    for _ in range(40):
        job_id = await create(a, new_job(now=now - 100, ttl=100, mode=Mode.COMBINED))
        d = hook(now, "job.completed")
        assert await a.transition(
            job_id,
            [S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING],
            now=now - 1,
            deliveries=[d],
            claim_for="sender",
            lease=LEASE,
        )
        jobs[job_id] = d.id
    caplog.set_level(logging.WARNING, logger="gateway.store.postgres")

    async def succeed(job_id: str, delivery_id: str) -> bool:
        done = Attempt(delivery_id, job_id, "job.completed", 1, now, 2.0, 204, None, "", None)
        return await a.record_attempt(
            done, owner="sender", state=DeliveryState.SUCCEEDED, now=now, job_path=[S.DELIVERING, S.COMPLETED]
        )

    async def renew_all() -> None:
        await b.renew_leases("sender", [], sorted(jobs.values(), reverse=True), until=now + 60)

    work: list[Awaitable[object]] = [succeed(j, d) for j, d in jobs.items()]
    work += [b.cancel_job("t1", j, now=now) for j in list(jobs)[::2]]
    work += [s.expire_due(now=now, limit=7) for s in (a, b) for _ in range(3)]
    work += [renew_all() for _ in range(4)]
    await asyncio.gather(*work)
    while await a.expire_due(now=now, limit=100):
        pass

    assert not [r for r in caplog.records if "rolled back" in r.getMessage()]
    for job_id, delivery_id in jobs.items():
        job = await a.get_job("t1", job_id)
        assert job is not None
        state = await sql.fetchval("SELECT state FROM deliveries WHERE id = $1", delivery_id)
        if job.status is S.COMPLETED:
            assert state == "succeeded"
        else:
            assert job.status in (S.CANCELLED, S.EXPIRED) and state == "cancelled", (job.status, state)


# ---- counters ------------------------------------------------------------------------------


async def test_queue_counters_stay_exact_under_concurrent_instances(
    two: tuple[PostgresStore, PostgresStore], sql: asyncpg.Connection
) -> None:
    a, b = two
    now = time.time()
    made = [
        await create(a if i % 2 else b, new_job(now=now - 10, ttl=5 if i % 5 == 0 else 3600))
        for i in range(80)
    ]

    async def walk(i: int, job_id: str) -> None:
        s = a if i % 2 else b
        if i % 4 == 0:
            await s.cancel_job("t1", job_id, now=now)
            return
        await s.transition(
            job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now, deliveries=[hook(now)]
        )
        if i % 4 == 1:
            await s.submit_response("t1", job_id, "out", now=now, claim_for=None, lease=LEASE)

    await asyncio.gather(*(walk(i, j) for i, j in enumerate(made)), a.expire_due(now=now, limit=50))
    claimed = await b.claim_deliveries("w", now=now, lease=LEASE, limit=1000)
    await asyncio.gather(
        *(
            (a if i % 2 else b).record_attempt(
                Attempt(d.id, d.job_id, d.event, 1, now, 1.0, 500, "http_500", "", now + 5),
                owner="w",
                state=DeliveryState.PENDING if i % 3 else DeliveryState.FAILED,
                now=now,
            )
            for i, d in enumerate(claimed)
        )
    )
    await a.purge_finished(before=now + 1, limit=7)

    stats = await a.queue_stats()
    counts = dict(await sql.fetch("SELECT status, count(*) FROM jobs GROUP BY status"))
    for name, stat in stats.queues.items():
        assert stat.depth == counts.get(name, 0), name
        oldest = await sql.fetchval("SELECT min(status_since) FROM jobs WHERE status = $1", name)
        assert stat.oldest_since == oldest
    retrying = await sql.fetchval("SELECT count(*) FROM deliveries WHERE state = 'pending' AND attempts > 0")
    assert stats.retrying == retrying > 0


async def test_queue_stats_never_scan_the_jobs_table(
    two: tuple[PostgresStore, PostgresStore], sql: asyncpg.Connection
) -> None:
    """Depths come from the counter slots, the oldest from one index probe per queue: the plan holds
    no sequential scan of jobs, so the answer costs the same at any depth."""
    a, _ = two
    # bulk rows straight into the table (the store's own paths are covered above); counters set to match
    await sql.execute("ALTER TABLE jobs DISABLE TRIGGER USER")
    await sql.execute(
        "INSERT INTO jobs (id, tenant_id, status, mode, policy, created_at, updated_at, status_since,"
        " expires_at) SELECT 'job_' || lpad(g::text, 26, '0'), 't1',"
        " (ARRAY['completed', 'processing_inbound', 'delivering', 'awaiting_response'])[1 + g % 4],"
        " 'separate', 'default', g, g, g, g + 3600 FROM generate_series(1, 40000) g"
    )
    await sql.execute("ALTER TABLE jobs ENABLE TRIGGER USER")
    await sql.execute(
        "UPDATE queue_counts SET processing_inbound = 10000, delivering = 10000, awaiting_response = 10000"
        " WHERE slot = 0"
    )
    await sql.execute("ANALYZE jobs")
    plan = json.loads(await sql.fetchval("EXPLAIN (FORMAT JSON) " + Q["queue_stats"]))
    assert [rel for rel in _seq_scanned(plan) if rel != "queue_counts"] == []
    started = time.perf_counter()
    stats = await a.queue_stats()
    assert time.perf_counter() - started < 0.5  # generous: it is a few milliseconds
    assert stats.queues["processing_inbound"].depth == 10000
    assert stats.queues["processing_inbound"].oldest_since == 1.0
    assert stats.queues["delivering"].oldest_since == 2.0
    assert stats.queues["processing_outbound"] == QueueStat(depth=0, oldest_since=None)


def _seq_scanned(plan: Any) -> list[str]:
    """The relations a JSON EXPLAIN reads with a sequential scan."""
    if isinstance(plan, list):
        return [rel for node in plan for rel in _seq_scanned(node)]
    if not isinstance(plan, dict):
        return []
    found = [str(plan.get("Relation Name"))] if plan.get("Node Type") == "Seq Scan" else []
    return found + [rel for value in plan.values() for rel in _seq_scanned(value)]


# ---- LISTEN / NOTIFY -----------------------------------------------------------------------


async def test_notify_wakes_the_other_instance_and_survives_a_killed_listener(
    two: tuple[PostgresStore, PostgresStore], postgres_url: str
) -> None:
    a, b = two
    heard: list[str] = []
    b.on_work(heard.append)
    await wait_for(lambda: b.listener_pid is not None, "B to LISTEN")

    await create(a)  # nobody local claimed it: B must hear of it
    await wait_for(lambda: "jobs" in heard, "B's callback after A created an unclaimed job")

    victim = b.listener_pid
    admin = await asyncpg.connect(postgres_url)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", victim)
    finally:
        await admin.close()
    heard.clear()
    # after reconnecting, B calls back once for each kind: notifications sent meanwhile were lost
    await wait_for(lambda: {"jobs", "deliveries"} <= set(heard), "B to reconnect and call back")
    assert b.listener_pid not in (None, victim)

    heard.clear()
    await create(a)
    await wait_for(lambda: "jobs" in heard, "B's callback after the reconnect")


async def test_notify_only_for_work_no_local_worker_took(
    two: tuple[PostgresStore, PostgresStore], postgres_url: str
) -> None:
    """Writes that leave work due for anyone NOTIFY; writes that hand it to a local worker do not.
    A marker NOTIFY after each write bounds what that write sent: PostgreSQL delivers
    notifications in commit order."""
    a, _ = two
    heard: list[str] = []
    conn = await asyncpg.connect(postgres_url)
    await conn.add_listener(a.channel, lambda *args: heard.append(args[3]))

    async def sent_by(write: Callable[[], Awaitable[object]]) -> list[str]:
        heard.clear()
        await write()
        marker = secrets.token_hex(4)
        await conn.execute("SELECT pg_notify($1, $2)", a.channel, marker)
        await wait_for(lambda: marker in heard, "the marker")
        return heard[: heard.index(marker)]

    try:
        now = time.time()
        mine = job_id = ""

        async def create_claimed() -> None:
            nonlocal mine
            mine = await create(a, claim_for="w1")

        async def create_unclaimed() -> None:
            nonlocal job_id
            job_id = await create(a)

        assert await sent_by(create_claimed) == []
        assert await sent_by(create_unclaimed) == ["jobs"]
        assert (
            await sent_by(
                lambda: a.transition(
                    mine,
                    [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE],
                    now=now,
                    owner="w1",
                    deliveries=[hook(now)],
                    claim_for="w1",
                    lease=LEASE,
                )
            )
            == []
        )
        assert (
            await sent_by(lambda: a.submit_response("t1", mine, "out", now=now, claim_for="w1", lease=LEASE))
            == []
        )
        assert await sent_by(lambda: a.release_leases("w1", [mine], [], now=now)) == ["jobs"]
        assert await sent_by(
            lambda: a.transition(
                job_id, [S.PROCESSING_INBOUND, S.AWAITING_RESPONSE], now=now, deliveries=[hook(now)]
            )
        ) == ["deliveries"]
        [d] = await a.claim_deliveries("w2", now=now, lease=LEASE, limit=10)
        assert await sent_by(lambda: a.release_leases("w2", [], [d.id], now=now)) == ["deliveries"]
        assert await sent_by(
            lambda: a.submit_response("t1", job_id, "out", now=now, claim_for=None, lease=LEASE)
        ) == ["jobs"]
    finally:
        await conn.close()


# ---- failures ------------------------------------------------------------------------------


async def test_unreachable_database_is_a_store_error() -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/test", min_size=1, command_timeout=2.0)
    with pytest.raises(StoreError):
        await store.open()
    with pytest.raises(StoreError):
        await store.ping()


async def test_reads_survive_the_pool_losing_its_connections(postgres_url: str, pg_schema: str) -> None:
    name = "gateway-test-" + secrets.token_hex(4)
    store = postgres_store(postgres_url, pg_schema, application_name=name)
    await store.open()
    try:
        await store.add_api_key("t1", "h1", time.time())
        admin = await asyncpg.connect(postgres_url)
        try:
            killed = await admin.fetchval(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = $1) k",
                name,
            )
        finally:
            await admin.close()
        assert killed >= 1
        assert await store.tenant_for_key("h1") == "t1"
        await store.ping()
    finally:
        await store.close()


async def test_constraint_violations_stay_exceptions(two: tuple[PostgresStore, PostgresStore]) -> None:
    """A duplicate id is a bug in the caller, not an outage: it must not turn into a 503."""
    a, b = two
    job = new_job()
    await a.create_job(job, claim_for=None, lease=LEASE, idempotency_ttl=60)
    with pytest.raises(asyncpg.UniqueViolationError):
        await b.create_job(job, claim_for=None, lease=LEASE, idempotency_ttl=60)


# ---- the pool ------------------------------------------------------------------------------


async def test_an_operation_is_its_statements_alone_no_session_reset(
    postgres_url: str, pg_schema: str
) -> None:
    """Handing a connection back to the pool costs no round trip: asyncpg's default reset (advisory
    unlock, CLOSE ALL, UNLISTEN, RESET ALL) ran after every operation and was a sixth of the store's
    time under load; this store leaves no session state for it to undo."""
    store = PostgresStore(postgres_url, schema=pg_schema, min_size=1, max_size=1)
    await store.open()
    seen: list[str] = []
    try:
        (holder,) = store._pool._holders  # the pool's one connection, watched from outside the store
        holder._con.add_query_logger(lambda record: seen.append(record.query))
        await store.create_job(new_job(), claim_for=None, lease=LEASE, idempotency_ttl=60)
        await store.ping()
    finally:
        await store.close()
    assert len(seen) == 2, seen
    assert not any("RESET" in q or "UNLISTEN" in q for q in seen), seen


async def test_a_transaction_left_open_does_not_reach_the_next_operation(
    postgres_url: str, pg_schema: str
) -> None:
    """Without the default reset query, asyncpg still rolls back what an operation left open."""
    store = PostgresStore(postgres_url, schema=pg_schema, min_size=1, max_size=1)
    await store.open()
    try:

        async def abandon(conn: Any) -> None:
            await conn.execute("BEGIN")
            await conn.execute("CREATE TABLE abandoned (x int)")
            raise RuntimeError("the operation failed halfway")

        with pytest.raises(RuntimeError):
            await store._run(abandon)

        async def in_transaction(conn: Any) -> bool:
            return bool(conn.is_in_transaction())

        assert await store._run(in_transaction) is False  # the same (only) connection, nothing left open
        exists = await store._run(lambda c: c.fetchval("SELECT to_regclass('abandoned') IS NOT NULL"))
        assert exists is False  # and what it did was rolled back
    finally:
        await store.close()
