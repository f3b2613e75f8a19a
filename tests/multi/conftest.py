"""Several gateway instances on one PostgreSQL database (GATEWAY_TEST_POSTGRES_URL), each test in a
fresh schema of its own, dropped afterwards. Skipped, with the reason, only when PostgreSQL cannot be
reached."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.acceptance.harness import POSTGRES_URL, drop_schemas, new_schema_name, postgres_problem


@pytest.fixture(scope="session")
def postgres_url() -> str:
    problem = postgres_problem(POSTGRES_URL)
    if problem is not None:
        pytest.skip(f"PostgreSQL at GATEWAY_TEST_POSTGRES_URL is unreachable ({problem})")
    return POSTGRES_URL


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    """A schema name no other test uses: the instances create it when they start."""
    name = new_schema_name("multi")
    try:
        yield name
    finally:
        drop_schemas(postgres_url, [name])
