"""Expiry and retention. Safe to run in every process at once: each change is a compare-and-set."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from gateway.store.base import StoreError

if TYPE_CHECKING:
    from gateway.runtime import Runtime

log = logging.getLogger("gateway.sweeper")
_BATCH = 1000


class Sweeper:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sweeper")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def sweep_once(self) -> tuple[int, int]:
        """Expire every overdue job and purge every job past retention; returns (expired, purged)."""
        rt = self.rt
        expired = purged = 0
        while True:
            ids = await rt.store.expire_due(now=rt.clock.now(), limit=_BATCH)
            expired += len(ids)
            if ids:
                rt.metrics.jobs_finished.labels("expired").inc(len(ids))
            if len(ids) < _BATCH:
                break
        before = rt.clock.now() - rt.settings.job_retention_seconds
        while True:
            n = await rt.store.purge_finished(before=before, limit=_BATCH)
            purged += n
            if n < _BATCH:
                break
        return expired, purged

    async def _run(self) -> None:
        interval = self.rt.settings.sweep_interval_seconds
        while not self._stop.is_set():
            try:
                await self.sweep_once()
            except StoreError as exc:
                log.warning("sweep failed: %s", exc)
            except Exception:
                log.exception("sweep crashed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=interval)
