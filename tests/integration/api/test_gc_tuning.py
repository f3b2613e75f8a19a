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


async def test_requests_leave_no_garbage_for_the_cycle_collector(tmp_path: Path) -> None:
    """Reference cycles are freed only by the cycle collector, whose passes stop the event loop:
    at a few hundred requests a second one cycle per request made 40-90 ms pauses, straight into
    the create latency's p99. What a request leaves must be freed by reference counting."""
    requests = 200
    async with serve(tmp_path) as gw:
        _, key = await gw.new_key()
        async with gw.client(key) as c:
            job = (await c.post("/v1/jobs", json={"message_input": "warm up"})).json()
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage, not freed
            try:
                for i in range(requests // 2):
                    assert (await c.post("/v1/jobs", json={"message_input": f"hi {i}"})).status_code == 202
                    assert (await c.get(f"/v1/jobs/{job['job_id']}")).status_code == 200
                gc.collect()
                left = list(gc.garbage)
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
    # (the client, httpx, leaves cycles of its own: only the server's objects are counted)
    server_side = {type(o).__qualname__ for o in left if type(o).__module__.split(".")[0] in _SERVER}
    assert server_side == set()


_SERVER = ("gateway", "rules", "uvicorn", "starlette", "httptools")
