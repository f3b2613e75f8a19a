from __future__ import annotations

import sqlite3
from pathlib import Path

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
