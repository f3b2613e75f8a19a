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
