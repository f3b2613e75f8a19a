from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.store.sqlfile import load_migrations
from gateway.store.sqlite import SqliteStore, _split_sql


async def test_migrations_apply_once_and_produce_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    for _ in range(2):  # opening twice must not re-apply anything
        store = SqliteStore(url)
        await store.open()
        await store.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [m.version for m in load_migrations("gateway.store", "sqlite")]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"jobs", "deliveries", "delivery_attempts", "api_keys", "policies", "queue_counts"} <= tables
    triggers = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert "jobs_count_upd" in triggers
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_split_sql_keeps_trigger_bodies_whole() -> None:
    script = """
    -- a comment
    CREATE TABLE a (x INTEGER);
    CREATE TRIGGER t AFTER INSERT ON a BEGIN
        UPDATE a SET x = 1;
        UPDATE a SET x = 2;
    END;
    """
    parts = _split_sql(script)
    assert len(parts) == 2 and parts[1].startswith("CREATE TRIGGER") and parts[1].endswith("END;")


async def test_a_failing_operation_fails_alone_in_its_batch(tmp_path: Path) -> None:
    """Group commit runs many callers' writes in one transaction: one caller's constraint error
    must reach that caller only, and every other write in the batch must still commit."""
    import asyncio
    import time

    import pytest

    from gateway import ids
    from gateway.jobs import Mode
    from gateway.store.base import NewJob

    store = SqliteStore(f"sqlite:///{tmp_path}/b.db")
    await store.open()
    try:
        now = time.time()

        def job(job_id: str) -> NewJob:
            return NewJob(
                job_id, "t", Mode.SEPARATE, "default", "x", None, None, None, None, {}, now, now + 60
            )

        dup = ids.job_id(now)
        others = [ids.job_id(now) for _ in range(20)]
        results = await asyncio.gather(
            *(
                store.create_job(job(i), claim_for=None, lease=1, idempotency_ttl=1)
                for i in [dup, *others, dup]
            ),
            return_exceptions=True,
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        assert len(failures) == 1 and isinstance(failures[0], sqlite3.IntegrityError)
        for job_id in [dup, *others]:
            assert await store.get_job("t", job_id) is not None
        with pytest.raises(sqlite3.IntegrityError):
            await store.create_job(job(dup), claim_for=None, lease=1, idempotency_ttl=1)
    finally:
        await store.close()


async def _loop_stalls_while(awaitable: object, *, tick: float = 0.005) -> tuple[object, float]:
    """Await `awaitable` while a ticker measures the event loop's longest stall."""
    import asyncio
    import time

    worst = 0.0
    done = False

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(tick)
            now = time.perf_counter()
            worst = max(worst, now - last - tick)
            last = now

    task = asyncio.create_task(ticker())
    try:
        result = await awaitable  # type: ignore[misc]
    finally:
        done = True
        await task
    return result, worst


async def test_a_write_waiting_for_another_process_lock_does_not_stall_the_event_loop(tmp_path: Path) -> None:
    """Batches run their statements on the event loop, but the lock is taken (and the commit's
    fsync done) on the writer thread: while another process holds the write lock, the API stays
    responsive and the write goes through once the lock is released."""
    import asyncio
    import time

    from gateway import ids
    from gateway.jobs import Mode
    from gateway.store.base import NewJob

    path = tmp_path / "l.db"
    store = SqliteStore(f"sqlite:///{path}", busy_timeout=5.0)
    await store.open()
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        now = time.time()
        job = NewJob(
            ids.job_id(now), "t", Mode.SEPARATE, "default", "x", None, None, None, None, {}, now, now + 60
        )
        other.execute("BEGIN IMMEDIATE")  # another process's write transaction
        asyncio.get_running_loop().call_later(0.4, other.execute, "COMMIT")
        started = time.perf_counter()
        (created, is_new), stall = await _loop_stalls_while(
            store.create_job(job, claim_for=None, lease=30, idempotency_ttl=60)
        )
        assert time.perf_counter() - started >= 0.35  # it really waited for the lock
        assert is_new and created.id == job.id
        assert stall < 0.1, f"the event loop stalled {stall * 1000:.0f} ms"
        assert await store.get_job("t", job.id) is not None
    finally:
        other.close()
        await store.close()


async def test_the_sweepers_long_writes_run_off_the_event_loop(tmp_path: Path) -> None:
    """Purging a thousand finished jobs is one long operation: it must not stall the event loop
    the way a batch of short writes may (those run on it)."""
    import time

    from gateway import ids
    from gateway.jobs import Mode
    from gateway.store.base import NewJob

    store = SqliteStore(f"sqlite:///{tmp_path}/p.db")
    await store.open()
    try:
        now = time.time() - 3600
        for _ in range(3):
            for i in range(1000):
                job = NewJob(
                    ids.job_id(now + i / 1000),
                    "t",
                    Mode.COMBINED,
                    "default",
                    "x" * 200,
                    "y" * 200,
                    None,
                    None,
                    None,
                    {},
                    now,
                    now + 60,
                )
                await store.create_job(job, claim_for=None, lease=30, idempotency_ttl=60)
            expired, _ = await _loop_stalls_while(store.expire_due(now=time.time(), limit=1000))
            assert len(expired) == 1000  # type: ignore[arg-type]
        assert await store.get_job("t", expired[0]) is not None  # type: ignore[index]
        started = time.perf_counter()
        purged, stall = await _loop_stalls_while(store.purge_finished(before=time.time() + 1, limit=3000))
        took = time.perf_counter() - started
        assert purged == 3000
        # on the event loop the stall would be the whole purge
        assert stall < took / 4, (
            f"the event loop stalled {stall * 1000:.0f} of the purge's {took * 1000:.0f} ms"
        )
    finally:
        await store.close()


def test_none_and_bytes_bind_as_themselves_through_the_registered_adapters() -> None:
    """gateway.store.sqlite registers identity adapters for None and bytes (a binding shortcut):
    they must store NULL and the exact bytes, and leave other types' binding alone."""
    import gateway.store.sqlite  # noqa: F401  (registers the adapters)

    adapters = sqlite3.adapters  # type: ignore[attr-defined]
    assert (type(None), sqlite3.PrepareProtocol) in adapters
    assert (bytes, sqlite3.PrepareProtocol) in adapters
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a, b, c, d)")
    blob = bytes(range(256)) + b"\x00tail"
    conn.execute("INSERT INTO t VALUES (?, ?, ?, ?)", (None, blob, "text", 1.5))
    conn.execute("INSERT INTO t VALUES (:a, :b, :c, :d)", {"a": None, "b": b"", "c": "", "d": 7})
    rows = conn.execute("SELECT a, typeof(a), b, typeof(b), c, d FROM t ORDER BY rowid").fetchall()
    assert rows == [(None, "null", blob, "blob", "text", 1.5), (None, "null", b"", "blob", "", 7)]


def test_begin_at_once_never_waits_and_keeps_the_busy_timeout(tmp_path: Path) -> None:
    """The event loop tries the write lock without waiting; whatever happens, the connection's
    busy timeout (which the writer thread's waits rely on) is what it was."""
    import time

    from gateway.store.sqlite import _begin_at_once, _connect

    path = str(tmp_path / "b.db")
    conn = _connect(path, "FULL", 5.0)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
        started = time.perf_counter()
        assert _begin_at_once(conn, 5000) is False
        assert time.perf_counter() - started < 0.5  # not the 5 s busy timeout
        assert not conn.in_transaction
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        other.execute("COMMIT")
        assert _begin_at_once(conn, 5000) is True
        assert conn.in_transaction
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        conn.execute("ROLLBACK")
    finally:
        other.close()
        conn.close()


async def test_writes_carrying_large_texts_run_on_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Short writes run their statements on the event loop; a job with 100k-character messages
    is copied into pages on the writer thread instead, so other clients' requests do not wait on
    it (`tests/hostile/test_huge_input.py` measures that from outside)."""
    import threading
    import time

    import gateway.store.sqlite as sqlite_store
    from gateway import ids
    from gateway.jobs import Mode
    from gateway.store.base import NewJob

    ran_on: list[str] = []
    real = sqlite_store._run_ops

    def spy(conn: sqlite3.Connection, fns: list) -> list | None:  # type: ignore[type-arg]
        ran_on.append(threading.current_thread().name)
        return real(conn, fns)

    monkeypatch.setattr(sqlite_store, "_run_ops", spy)
    store = SqliteStore(f"sqlite:///{tmp_path}/big.db")
    await store.open()
    try:
        now = time.time()
        for i, text in enumerate(("short", "lorem ipsum dolor sit amet " * 4000)):
            job = NewJob(
                ids.job_id(now + i), "t", Mode.COMBINED, "default", text, text,
                None, None, None, {}, now, now + 60,
            )  # fmt: skip
            await store.create_job(job, claim_for=None, lease=30, idempotency_ttl=60)
            assert (await store.get_job("t", job.id)) is not None
    finally:
        await store.close()
    assert ran_on[0] == threading.main_thread().name
    assert ran_on[1].startswith("sqlite-writer")
