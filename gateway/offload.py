"""Where rule-engine work runs: the threads, for work too big for the event loop (scans of large
texts, policy compiles); the filter process (`gateway.filterproc`), for a job's texts when it is
running; the event loop itself otherwise.

One pool per process, its threads started before the process serves: starting a thread while
others hold the GIL made the event loop wait for it (`ThreadPoolExecutor` starts threads on
demand and waits until each runs), and anyio's thread helper imports its backend on first use,
on the loop. As many threads as CPUs: RE2 releases the GIL, so two scans use two cores, while
more threads would only queue for the GIL in front of the event loop between their C calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from gateway import plan
from gateway.filterproc import FilterProcess, FilterUnavailable

if TYPE_CHECKING:
    from gateway.metrics import Metrics
    from rules import CompiledPolicy

T = TypeVar("T")

#: Texts longer than this (characters) are scanned on the pool; shorter ones on the event loop,
#: where a scan costs less than the hop to a thread and back.
LARGE_TEXT = 64 * 1024


class Offload:
    def __init__(self, threads: int | None = None, filter_process: FilterProcess | None = None) -> None:
        self.threads = max(1, threads if threads is not None else (os.cpu_count() or 1))
        self.filter_process = filter_process
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="engine")
        self._started = False

    def start(self) -> None:
        """Start every thread now (each waits on a barrier until all are running)."""
        if self._started:
            return
        barrier = threading.Barrier(self.threads)
        for future in [self._pool.submit(barrier.wait) for _ in range(self.threads)]:
            future.result()
        self._started = True

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def scan(self, text: str | None, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, a scan of `text`: on the pool if the text is large, else right here."""
        if text is not None and len(text) > LARGE_TEXT:
            return await self.run(fn, *args)
        return fn(*args)

    async def scan_texts(
        self, policy: CompiledPolicy | None, texts: Sequence[tuple[str | None, str]], metrics: Metrics
    ) -> list[dict[str, Any]]:
        """Verdicts for `texts` ((text, direction) pairs, see `plan.texts_to_scan`) in order,
        stopping after the first blocked one (`plan.scan_chain`): in the filter process when it can
        take them, else here (or on the threads, when a text is large). The same verdicts either
        way."""
        helper = self.filter_process
        small = [(text, d) for text, d in texts if text is not None and len(text) <= LARGE_TEXT]
        results = None
        if helper is not None and policy is not None and len(small) == len(texts):
            # not running, too far behind, or died meanwhile: scanned below instead
            with contextlib.suppress(FilterUnavailable):
                results = await helper.scan(policy, small)
        if results is None:
            longest = max((text for text, _ in texts if text is not None), key=len, default=None)
            results = await self.scan(longest, plan.scan_chain, policy, texts)
        verdicts = []
        for (verdict, seconds), (_, direction) in zip(results, texts, strict=False):
            if seconds:  # 0.0: failed closed before the engine ran (no policy, no text)
                metrics.filter_seconds.labels(direction).observe(seconds)
            verdicts.append(verdict)
        return verdicts

    def close(self) -> None:
        """Stop the threads once the work they hold is done (queued work still runs)."""
        self._pool.shutdown(wait=True)
