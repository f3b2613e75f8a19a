"""The worker: claim -> filter -> transition, and claim -> sign -> send -> record.

Work reaches a worker two ways. The fast way: a job created (or answered) in this process is leased
to this worker inside the same write that stores it, and handed over in memory (`offer`), so it costs
no claim round-trip. The durable way: every `poll_interval` (and at once when hinted) the worker
claims due rows from the store, which is how it picks up jobs from other processes and jobs whose
worker died (their lease ran out). Every write after a claim is a compare-and-set on the status and
the lease owner, so a worker that lost its lease changes nothing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway import ids, plan
from gateway.delivery.h1 import H1Transport
from gateway.delivery.retry import next_delay
from gateway.delivery.sender import AiohttpTransport, AttemptResult, Transport
from gateway.delivery.signing import webhook_headers
from gateway.jobs import DeliveryState, JobStatus, WebhookEvent
from gateway.store.base import Attempt, Delivery, FilterOutcome, Job, JobChanges, StoreError

if TYPE_CHECKING:
    from gateway.runtime import Runtime
    from gateway.settings import Settings

log = logging.getLogger("gateway.pipeline")

S = JobStatus
_CLAIM_BATCH = 256
_COMPLETED = WebhookEvent.COMPLETED.value
#: A 410 or a refused URL: the job moves (from the status its webhook announced) to failed.
_FAILS_JOB: dict[str, tuple[JobStatus, ...]] = {
    _COMPLETED: (S.DELIVERING, S.FAILED),
    WebhookEvent.AWAITING_RESPONSE.value: (S.AWAITING_RESPONSE, S.FAILED),
}


@dataclass(frozen=True, slots=True)
class _Decision:
    state: DeliveryState
    next_at: float | None
    job_path: tuple[JobStatus, ...] | None  # the job's move, e.g. delivering -> completed
    job_changes: JobChanges


class _Lane:
    """A bounded set of in-flight tasks fed by local hand-offs and by claims from the store."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.local: collections.deque[Any] = collections.deque()
        self.inflight: dict[str, asyncio.Task[None]] = {}
        self.hint = False
        self.woken = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def free(self) -> int:
        return self.limit - len(self.inflight)

    def poke(self, *, hint: bool = False) -> None:
        self.hint = self.hint or hint
        self.woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, seconds: float | None) -> None:
        """Until poked (since `woken` was last cleared) or `seconds` pass. A bare future and
        a timer: this runs about once per job, and asyncio.wait_for costs a task per call."""
        if self.woken:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(seconds, _release, waiter) if seconds is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _transport(settings: Settings) -> Transport:
    if settings.webhook_http_client == "aiohttp":
        return AiohttpTransport.from_settings(settings)
    return H1Transport.from_settings(settings)


class Pipeline:
    def __init__(self, runtime: Runtime, transport: Transport | None = None) -> None:
        self.rt = runtime
        self.settings = runtime.settings
        self.owner = ids.worker_id()
        self.accepting = False
        self.transport: Transport = transport or _transport(runtime.settings)
        self._jobs = _Lane("jobs", self.settings.worker_concurrency)
        self._deliveries = _Lane("deliveries", self.settings.webhook_max_concurrency)
        self._loops: list[asyncio.Task[None]] = []
        self._timers: set[asyncio.TimerHandle] = set()
        self._rng = random.Random()

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self.accepting = True
        self.rt.store.on_work(self._on_work)
        self._loops = [
            asyncio.create_task(self._run_lane(self._jobs, self._claim_jobs, self._process_job), name="jobs"),
            asyncio.create_task(
                self._run_lane(self._deliveries, self._claim_deliveries, self._deliver),
                name="deliveries",
            ),
            asyncio.create_task(self._heartbeat(), name="heartbeat"),
        ]

    async def stop(self, grace: float = 10.0) -> None:
        """Stop claiming; let in-flight work finish within `grace`; release the rest to other workers."""
        self.accepting = False
        for timer in self._timers:
            timer.cancel()
        for lane in (self._jobs, self._deliveries):
            lane.poke()
        pending = [t for lane in (self._jobs, self._deliveries) for t in lane.inflight.values()]
        if pending:
            await asyncio.wait(pending, timeout=grace)
        leftover_jobs = [*self._jobs.inflight, *(j.id for j in self._jobs.local)]
        leftover_deliveries = [*self._deliveries.inflight, *(d.id for d in self._deliveries.local)]
        for lane in (self._jobs, self._deliveries):
            for task in lane.inflight.values():
                task.cancel()
        for loop_task in self._loops:
            loop_task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        with contextlib.suppress(StoreError):
            await self.rt.store.release_leases(
                self.owner, leftover_jobs, leftover_deliveries, now=self.rt.clock.now()
            )
        await self.transport.close()

    def _on_work(self, kind: str) -> None:
        """Another process made work due (a store notification): claim it now, not at the next poll."""
        lane = self._jobs if kind == "jobs" else self._deliveries
        lane.poke(hint=True)

    def offer(self, job: Job) -> None:
        """A job was just created or answered. If it is leased to us, run it; else hint a claim."""
        if not self.accepting:
            return
        if job.lease_owner == self.owner:
            self._jobs.local.append(job)
            self._jobs.poke()
        else:
            self._jobs.poke(hint=True)

    # ---- the lane loop --------------------------------------------------------------------

    async def _run_lane(
        self,
        lane: _Lane,
        claim: Callable[[int], Coroutine[Any, Any, list[Any]]],
        work: Callable[[Any], Coroutine[Any, Any, None]],
    ) -> None:
        poll = self.settings.poll_interval_seconds
        next_claim = 0.0
        while self.accepting:
            lane.woken = False
            while lane.local and lane.free > 0:
                self._spawn(lane, lane.local.popleft(), work)
            now = time.monotonic()
            if lane.free > 0 and (lane.hint or now >= next_claim):
                lane.hint = False
                limit = min(lane.free, _CLAIM_BATCH)
                try:
                    items = await claim(limit)
                except StoreError as exc:
                    log.warning("%s claim failed: %s", lane.name, exc)
                    items = []
                    next_claim = time.monotonic() + poll
                else:
                    next_claim = time.monotonic() + (0.0 if len(items) == limit else poll)
                for item in items:
                    self._spawn(lane, item, work)
                continue
            if lane.local and lane.free > 0:
                continue
            timeout = max(0.0, next_claim - time.monotonic()) if lane.free > 0 else None
            await lane.wait(timeout)

    def _spawn(
        self, lane: _Lane, item: Job | Delivery, work: Callable[[Any], Coroutine[Any, Any, None]]
    ) -> None:
        if item.id in lane.inflight:
            return
        task = asyncio.create_task(work(item))
        lane.inflight[item.id] = task

        def done(t: asyncio.Task[None], key: str = item.id) -> None:
            lane.inflight.pop(key, None)
            lane.poke()
            exc = None if t.cancelled() else t.exception()
            if isinstance(exc, StoreError):  # the database is unavailable: the lease brings it back
                log.warning("%s %s: %s (will be retried when its lease runs out)", lane.name, key, exc)
            elif exc is not None:
                log.error("%s %s crashed", lane.name, key, exc_info=exc)

        task.add_done_callback(done)

    async def _heartbeat(self) -> None:
        """Renew the leases of in-flight work so a slow step is not taken over while still alive."""
        lease = self.settings.lease_seconds
        while self.accepting:
            await asyncio.sleep(lease / 3)
            job_ids = [*self._jobs.inflight, *(j.id for j in self._jobs.local)]
            delivery_ids = [*self._deliveries.inflight, *(d.id for d in self._deliveries.local)]
            with contextlib.suppress(StoreError):
                await self.rt.store.renew_leases(
                    self.owner, job_ids, delivery_ids, until=self.rt.clock.now() + lease
                )

    # ---- filtering ------------------------------------------------------------------------

    async def _claim_jobs(self, limit: int) -> list[Job]:
        return await self.rt.store.claim_jobs(
            self.owner, now=self.rt.clock.now(), lease=self.settings.lease_seconds, limit=limit
        )

    async def _process_job(self, job: Job) -> None:
        rt = self.rt
        if job.status not in (S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND):
            return
        policy = await rt.policies.get(job.tenant_id, job.policy)
        texts = plan.texts_to_scan(job.status, job.mode, job.input_text, job.output_text)
        verdicts = await rt.offload.scan_texts(policy, texts, rt.metrics)
        inbound, outbound = plan.split_verdicts(job.status, verdicts, job.inbound)

        # Store first, then send: a receiver that calls back from its handler (reads the job,
        # posts the response to `job.awaiting_response`) must see the status its webhook announces.
        now = rt.clock.now()
        outcome = plan.plan(job, job.status, inbound=inbound, outbound=outbound, now=now)
        claim = self.owner if outcome.deliveries and self.accepting else None
        ok = await rt.store.transition(
            job.id,
            outcome.path,
            now=now,
            owner=self.owner,
            changes=outcome.changes,
            deliveries=outcome.deliveries,
            claim_for=claim,
            lease=self.settings.lease_seconds,
        )
        if not ok:
            return  # cancelled, expired, or taken over after our lease ran out: someone else decides
        rt.job_filtered(job, outcome, claimed_by=claim, now=now)

    def send_leased(self, job: Job, outcome: FilterOutcome, *, now: float) -> None:
        """`outcome.deliveries` were stored leased to this worker in the write that stored `job`
        filtered (by `_process_job` or by the create request): send them now, no claim round-trip."""
        if not self.accepting:
            return  # stopping: their leases run out and another worker (or our restart) sends them
        final = outcome.path[-1]
        lane = self._deliveries
        for new in outcome.deliveries:
            delivery = Delivery(
                id=new.id,
                job_id=job.id,
                tenant_id=job.tenant_id,
                event=new.event,
                url=new.url,
                body=new.body,
                state=DeliveryState.PENDING,
                attempts=0,
                deadline=new.deadline,
                created_at=now,
                secret_enc=job.secret_enc,
                signing_key_enc=job.signing_key_enc,
                job_status=final,
            )
            if lane.free > 0 and not lane.local:
                self._spawn(lane, delivery, self._deliver)  # at once: no trip through the lane loop
            else:
                lane.local.append(delivery)  # over the concurrency limit: it waits its turn, in order
                lane.poke()

    # ---- delivery -------------------------------------------------------------------------

    async def _claim_deliveries(self, limit: int) -> list[Delivery]:
        return await self.rt.store.claim_deliveries(
            self.owner, now=self.rt.clock.now(), lease=self.settings.lease_seconds, limit=limit
        )

    def _headers(
        self, job_id: str, msg_id: str, secret_enc: bytes | None, key_enc: bytes | None, body: bytes
    ) -> dict[str, str]:
        aad = job_id.encode()
        if secret_enc is None:
            raise ValueError("job has no webhook secret")
        secret = self.rt.box.decrypt(secret_enc, aad).decode()
        signing_key = self.rt.box.decrypt(key_enc, aad).decode() if key_enc else None
        return webhook_headers(msg_id, int(self.rt.clock.now()), body, secret, signing_key)

    async def _send(
        self, job_id: str, msg_id: str, url: str, body: bytes, secret_enc: bytes | None, key_enc: bytes | None
    ) -> AttemptResult:
        try:
            headers = self._headers(job_id, msg_id, secret_enc, key_enc, body)
        except Exception:
            log.exception("cannot sign webhook %s", msg_id)
            return AttemptResult(
                status_code=None,
                error="signing_failed",
                duration_ms=0.0,
                retry_after=None,
                response_excerpt="",
                outcome="refused",
            )
        result = await self.transport.post(url, headers, body)
        self.rt.metrics.webhook_attempts.labels(result.outcome).inc()
        self.rt.metrics.webhook_seconds.observe(result.duration_ms / 1000)
        return result

    def _decide(self, result: AttemptResult, attempt_no: int, deadline: float, event: str) -> _Decision:
        """What an attempt's result means: the delivery's next state, when to retry, and where the
        job goes: the final `job.completed` webhook completes or fails it; a 410 or a refusal of
        the `job.awaiting_response` one fails it too (its final webhook, to the same URL, could
        only end the same way), while that notice's retries running out leave it waiting (the
        backend can still read the job and answer)."""
        now = self.rt.clock.now()
        final_event = event == _COMPLETED
        if result.outcome == "success":
            return _Decision(
                DeliveryState.SUCCEEDED,
                None,
                (S.DELIVERING, S.COMPLETED) if final_event else None,
                JobChanges(),
            )
        if result.outcome in ("gone", "refused"):
            gone = result.outcome == "gone"
            if gone:
                code = "webhook_gone"
            elif result.error == "signing_failed":  # e.g. instances that do not share GATEWAY_SECRET_KEY
                code = "webhook_signing_failed"
            else:
                code = "webhook_url_forbidden"
            changes = JobChanges(
                error_code=code,
                error_message="the receiver answered 410 Gone: delivery stopped"
                if gone
                else f"the webhook URL was refused ({result.error})",
            )
            path = _FAILS_JOB.get(event)
            return _Decision(DeliveryState.FAILED, None, path, changes)
        delay = next_delay(
            attempt_no, self.settings.webhook_retry_schedule, self.settings.webhook_retry_jitter, self._rng
        )
        if delay is not None and result.retry_after is not None:
            delay = min(max(result.retry_after, 0.0), self.settings.webhook_max_retry_after_seconds)
        if delay is not None and now + delay < deadline:
            return _Decision(DeliveryState.PENDING, now + delay, None, JobChanges())
        why = "every retry was used" if delay is None else "the next retry would pass expires_at"
        changes = JobChanges(
            error_code="webhook_failed",
            error_message=f"delivery failed after {attempt_no} attempts ({why});"
            f" last error: {result.error or result.status_code}",
        )
        return _Decision(
            DeliveryState.FAILED, None, (S.DELIVERING, S.FAILED) if final_event else None, changes
        )

    async def _deliver(self, d: Delivery) -> None:
        rt = self.rt
        started = rt.clock.now()
        if started >= d.deadline:
            # Never past expires_at (CONTRACT §4): a webhook that comes due too late (its worker
            # was down, the queue was long) is not sent, and its job expires as the sweeper would
            # have it, instead of failing on an attempt that should not have been made.
            await rt.store.drop_overdue_delivery(d.id, d.job_id, d.tenant_id, owner=self.owner, now=started)
            return
        result = await self._send(d.job_id, d.id, d.url, d.body, d.secret_enc, d.signing_key_enc)
        attempt_no = d.attempts + 1
        decision = self._decide(result, attempt_no, d.deadline, d.event)
        attempt = Attempt(
            delivery_id=d.id,
            job_id=d.job_id,
            event=d.event,
            attempt=attempt_no,
            started_at=started,
            duration_ms=result.duration_ms,
            status_code=result.status_code,
            error=result.error,
            response_excerpt=result.response_excerpt,
            next_attempt_at=decision.next_at,
        )
        job_path = decision.job_path
        ok = await rt.store.record_attempt(
            attempt,
            owner=self.owner,
            state=decision.state,
            now=rt.clock.now(),
            job_path=job_path,
            job_changes=decision.job_changes,
        )
        if ok and job_path is not None:
            rt.metrics.jobs_finished.labels(job_path[-1].value).inc()
        if ok and decision.next_at is not None and self.accepting:
            self._wake_deliveries_at(decision.next_at)

    def _wake_deliveries_at(self, when: float) -> None:
        """Hint a claim right when a retry falls due. Waiting for the next poll would make it up to
        a poll interval late, which with a short schedule is more than its jitter allows."""
        delay = when - self.rt.clock.now()
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            self._deliveries.poke(hint=True)

        handle = loop.call_later(max(0.0, delay) + 0.001, fire)
        self._timers.add(handle)
