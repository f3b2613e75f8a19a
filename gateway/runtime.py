"""What one process shares between the API, the pipeline and the sweeper."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.clock import Clock
from gateway.crypto import SecretBox, hash_api_key
from gateway.jobs import TERMINAL
from gateway.metrics import Metrics
from gateway.offload import Offload
from gateway.policies import PolicyRegistry
from gateway.settings import Settings
from gateway.store.base import FilterOutcome, Job, Store

if TYPE_CHECKING:
    from gateway.pipeline import Pipeline
    from gateway.sweeper import Sweeper

log = logging.getLogger("gateway")


@dataclass
class Runtime:
    settings: Settings
    store: Store
    clock: Clock
    box: SecretBox
    policies: PolicyRegistry
    metrics: Metrics
    offload: Offload
    pipeline: Pipeline | None = None
    sweeper: Sweeper | None = None
    started_at: float = field(default=0.0)

    @property
    def local_owner(self) -> str | None:
        """The worker id to lease new work to at once, when this process runs workers."""
        return self.pipeline.owner if self.pipeline is not None and self.pipeline.accepting else None

    def job_ready(self, job: Job) -> None:
        """A job was created or got its response: hand it to the local workers (it is leased to
        them), or do nothing and let whichever worker claims it first run it."""
        if self.pipeline is not None:
            self.pipeline.offer(job)

    def job_filtered(self, job: Job, outcome: FilterOutcome, *, claimed_by: str | None, now: float) -> None:
        """A job's filtering was stored (by the create request or by a worker), its webhooks queued
        in the same write and leased to `claimed_by` if that is our worker: count it if it finished,
        and send those webhooks."""
        if outcome.path[-1] in TERMINAL:
            self.metrics.jobs_finished.labels(outcome.path[-1].value).inc()
        if self.pipeline is not None and claimed_by == self.pipeline.owner and outcome.deliveries:
            self.pipeline.send_leased(job, outcome, now=now)

    async def ensure_bootstrap_key(self) -> None:
        key = self.settings.bootstrap_api_key
        if key is None:
            return
        digest = hash_api_key(key.get_secret_value())
        if await self.store.tenant_for_key(digest) is not None:
            return
        try:
            await self.store.add_api_key("default", digest, self.clock.now())
        except Exception:
            # Another instance starting at the same moment inserted it first (unique key_hash).
            if await self.store.tenant_for_key(digest) is None:
                raise

    async def start_workers(self) -> None:
        from gateway.pipeline import Pipeline
        from gateway.sweeper import Sweeper

        self.pipeline = Pipeline(self)
        self.sweeper = Sweeper(self)
        await self.pipeline.start()
        await self.sweeper.start()

    async def shutdown(self) -> None:
        """Stop taking work, finish or release what is in flight, then close the store."""
        if self.sweeper is not None:
            await self.sweeper.stop()
        if self.pipeline is not None:
            await self.pipeline.stop()
        await self.store.close()
        if self.offload.filter_process is not None:
            await self.offload.filter_process.close()
        self.offload.close()
