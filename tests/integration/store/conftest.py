"""The `store` fixture runs every conformance test on each backend: SQLite in a temporary file, and
PostgreSQL in a schema of its own (created for the test, dropped after it), so tests never see each
other's rows and need no cleanup between them. PostgreSQL tests are skipped, with the reason, only when
the server at GATEWAY_TEST_POSTGRES_URL cannot be reached (probed once per session)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from gateway.store.base import Store
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import SqliteStore

POSTGRES_URL = os.environ.get("GATEWAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _probe(url: str) -> str | None:
    """Why PostgreSQL cannot be used, or None. It runs in a thread of its own: the fixture asking is
    usually inside the test's running event loop, which cannot run another."""

    async def connect() -> None:
        conn = await asyncpg.connect(url, timeout=3)
        await conn.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        try:
            pool.submit(asyncio.run, connect()).result()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def postgres_url() -> str:
    problem = _probe(POSTGRES_URL)
    if problem is not None:
        pytest.skip(f"PostgreSQL at GATEWAY_TEST_POSTGRES_URL is unreachable ({problem})")
    return POSTGRES_URL


@contextlib.asynccontextmanager
async def fresh_schema(url: str) -> AsyncIterator[str]:
    """A new, empty schema for one test; dropped (with everything in it) afterwards."""
    name = "test_" + secrets.token_hex(8)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'CREATE SCHEMA "{name}"')
    finally:
        await conn.close()
    try:
        yield name
    finally:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await conn.close()


def postgres_store(url: str, schema: str, *, application_name: str = "gateway-test") -> PostgresStore:
    """A store sized for tests: few idle connections, enough for the concurrency tests; a dropped
    LISTEN connection is re-established within a fraction of a second."""
    return PostgresStore(
        url,
        schema=schema,
        min_size=1,
        max_size=10,
        reconnect_backoff=(0.05, 0.5),
        application_name=application_name,
    )


@pytest.fixture
async def pg_schema(postgres_url: str) -> AsyncIterator[str]:
    async with fresh_schema(postgres_url) as name:
        yield name


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with contextlib.AsyncExitStack() as stack:
        s: Store
        if request.param == "sqlite":
            s = SqliteStore(f"sqlite:///{tmp_path}/store.db")
        elif request.param == "postgres":
            url: str = request.getfixturevalue("postgres_url")
            schema = await stack.enter_async_context(fresh_schema(url))
            s = postgres_store(url, schema)
        else:  # pragma: no cover - backends are added as they land
            raise AssertionError(request.param)
        await s.open()
        stack.push_async_callback(s.close)
        yield s
