"""The server process tunes the garbage collector once started (gateway/gctune.py); tests that build
many apps in one process do not (create_app's default)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.gctune import THRESHOLDS
from tests.integration.api.conftest import serve

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


async def test_the_default_leaves_the_collector_alone(tmp_path: Path, restore_gc: None) -> None:
    before = (gc.get_threshold(), gc.get_freeze_count())
    async with serve(tmp_path):
        assert (gc.get_threshold(), gc.get_freeze_count()) == before


async def test_the_server_freezes_start_up_objects_and_raises_the_threshold(
    tmp_path: Path, restore_gc: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tests.integration.api.conftest as conftest_module
    from gateway import app as app_module

    real = app_module.create_app
    monkeypatch.setattr(conftest_module, "create_app", lambda *a, **k: real(*a, **{**k, "tune_gc": True}))
    gc.unfreeze()
    async with serve(tmp_path) as gw:
        assert gc.get_threshold() == THRESHOLDS
        assert gc.get_freeze_count() > 10_000  # modules, compiled policies, the runtime
        _, key = await gw.new_key()
        async with gw.client(key) as c:  # and it still serves
            assert (await c.post("/v1/jobs", json={"message_input": "hi"})).status_code == 202
