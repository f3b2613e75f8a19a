"""The delivery worker's timing rules with a real store and a recording transport: a retry is
sent when it falls due (not at the next poll), and nothing is sent after `expires_at`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from gateway import ids
from gateway.app import build_runtime
from gateway.crypto import new_webhook_secret
from gateway.delivery.sender import AttemptResult
from gateway.jobs import JobStatus, Mode
from gateway.pipeline import Pipeline
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.base import NewDelivery, NewJob

S = JobStatus


class Recording:
    """A transport that answers every post with `status` and remembers when each came."""

    def __init__(self, status: int = 500, expect: int = 0) -> None:
        self.status = status
        self.sent: list[tuple[float, str]] = []
        self.expect = expect
        self.enough = asyncio.Event()  # set once `expect` posts came

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult:
        self.sent.append((time.monotonic(), headers["webhook-id"]))
        if len(self.sent) >= self.expect:
            self.enough.set()
        ok = 200 <= self.status < 300
        outcome = "success" if ok else "gone" if self.status == 410 else "retry"
        return AttemptResult(self.status, None if ok else f"http_{self.status}", 1.0, None, "", outcome)

    async def close(self) -> None:
        pass


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/g.db",
        var_dir=tmp_path,
        webhook_allow_private_networks=True,
        # a retry longer than a poll interval: waiting for the next poll made it up to a whole
        # interval late, far outside any jitter
        poll_interval_seconds=1.0,
        webhook_retry_schedule=(1.5, 1.5),
        webhook_retry_jitter=0.0,
    )
    rt = await build_runtime(settings)
    try:
        yield rt
    finally:
        await rt.shutdown()


async def _job_with_webhook(rt: Runtime, *, ttl: float, event: str = "job.completed") -> tuple[str, str]:
    now = rt.clock.now()
    job_id = ids.job_id(now)
    job = NewJob(
        id=job_id,
        tenant_id="t1",
        mode=Mode.COMBINED,
        policy="default",
        input_text="in",
        output_text="out",
        webhook_url="http://127.0.0.1:9/hook",
        secret_enc=rt.box.encrypt(new_webhook_secret().encode(), job_id.encode()),
        signing_key_enc=None,
        metadata={},
        created_at=now,
        expires_at=now + ttl,
        idem_key=None,
        idem_hash=None,
    )
    created, _ = await rt.store.create_job(job, claim_for=None, lease=30, idempotency_ttl=60)
    hook = NewDelivery(ids.webhook_id(now), event, job.webhook_url or "", b"{}", job.expires_at)
    path = [S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING]
    assert await rt.store.transition(created.id, path, now=now, deliveries=[hook])
    return created.id, hook.id


async def test_a_retry_goes_out_when_due_not_at_the_next_poll(runtime: Runtime) -> None:
    transport = Recording(500, expect=3)
    pipeline = Pipeline(runtime, transport)
    await _job_with_webhook(runtime, ttl=60)
    await pipeline.start()
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(transport.enough.wait(), 8)
    finally:
        await pipeline.stop(grace=1)
    times = [at for at, _ in transport.sent]
    assert len(times) == 3, times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(1.45 < gap < 1.9 for gap in gaps), gaps  # 1.5 s each (no jitter), not 2


async def test_a_webhook_due_after_expires_at_is_not_sent_and_the_job_expires(runtime: Runtime) -> None:
    """Claimed only after expires_at (its worker was down): no attempt, the job reads expired."""
    transport = Recording(200)
    pipeline = Pipeline(runtime, transport)
    job_id, _ = await _job_with_webhook(runtime, ttl=0.3)
    await asyncio.sleep(0.4)
    [delivery] = await runtime.store.claim_deliveries(
        pipeline.owner, now=runtime.clock.now(), lease=30, limit=10
    )
    await pipeline._deliver(delivery)
    assert transport.sent == []
    job = await runtime.store.get_job("t1", job_id)
    assert job is not None and job.status is S.EXPIRED and job.error_code == "job_expired"
    assert await runtime.store.list_attempts("t1", job_id) == []
