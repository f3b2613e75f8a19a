"""The offload threads: started before the process serves, work runs there and not on the loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.offload import LARGE_TEXT, Offload


def _engine_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.name.startswith("engine") and t.ident is not None}


def test_start_runs_every_thread_before_any_work() -> None:
    before = _engine_threads()
    offload = Offload(threads=3)
    try:
        offload.start()
        started = _engine_threads() - before
        assert len(started) == 3
        offload.start()  # idempotent
        assert len(_engine_threads() - before) == 3
    finally:
        offload.close()
    assert not (_engine_threads() - before)  # close() ends them


def test_work_runs_on_the_pool_and_its_result_or_error_comes_back() -> None:
    offload = Offload(threads=2)
    offload.start()

    async def main() -> tuple[int, int, int]:
        loop_thread = threading.get_ident()
        where = await offload.run(threading.get_ident)
        total = await offload.run(sum, [1, 2, 3])
        return loop_thread, where, total

    try:
        loop_thread, where, total = asyncio.run(main())
        assert where != loop_thread and where in _engine_threads()
        assert total == 6
        with pytest.raises(ZeroDivisionError):
            asyncio.run(offload.run(divmod, 1, 0))
    finally:
        offload.close()


def test_two_slow_calls_run_at_once() -> None:
    """As many threads as asked: two calls that each wait for the other both finish."""
    offload = Offload(threads=2)
    offload.start()
    barrier = threading.Barrier(2, timeout=5)

    async def main() -> list[int]:
        return list(await asyncio.gather(offload.run(barrier.wait), offload.run(barrier.wait)))

    try:
        assert sorted(asyncio.run(main())) == [0, 1]
    finally:
        offload.close()


def test_scan_takes_large_texts_to_the_pool_and_keeps_small_ones_on_the_loop() -> None:
    offload = Offload(threads=1)
    offload.start()

    def where(_text: str | None) -> int:
        return threading.get_ident()

    async def main() -> tuple[int, list[int]]:
        texts = ["x" * LARGE_TEXT, None, "x" * (LARGE_TEXT + 1)]
        return threading.get_ident(), [await offload.scan(t, where, t) for t in texts]

    try:
        loop_thread, (small, missing, large) = asyncio.run(main())
        assert small == loop_thread and missing == loop_thread
        assert large != loop_thread and large in _engine_threads()
    finally:
        offload.close()
