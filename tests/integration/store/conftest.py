from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.store.base import Store
from gateway.store.sqlite import SqliteStore

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store
    if request.param == "sqlite":
        s = SqliteStore(f"sqlite:///{tmp_path}/store.db")
    else:  # pragma: no cover - backends are added as they land
        raise AssertionError(request.param)
    await s.open()
    try:
        yield s
    finally:
        await s.close()
