"""Delivery under slow, hostile and failing receivers, seen from outside (CONTRACT.md §4).

Two real `gateway serve` processes, one per timing profile, and real receivers on 127.0.0.1:
* `patient`: a 10 s attempt timeout and a single "5" s retry, so a hanging receiver stays hanging
  for the whole test and a retry never comes before a short `expires_at`;
* `strict`: a 1 s attempt timeout and fast retries (0.3, 0.6, 0.9 s), so timeouts, garbage
  answers and `Retry-After` caps play out in a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from tests.acceptance.harness import Received, Receiver, Server, eventually, free_port, wait_status

TERMINAL = {"inbound_blocked", "outbound_blocked", "completed", "failed", "expired", "cancelled"}
ONE_MB = 1024 * 1024


# ---- servers --------------------------------------------------------------------------------


def _serve(root: Path, **env: str) -> Iterator[Server]:
    with Server(root=root, env_overrides=env) as srv:
        yield srv


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _serve(
        tmp_path_factory.mktemp("patient"),
        GATEWAY_WEBHOOK_TIMEOUT_SECONDS="10",
        GATEWAY_WEBHOOK_RETRY_SCHEDULE="5",
    )


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _serve(
        tmp_path_factory.mktemp("strict"),
        GATEWAY_WEBHOOK_TIMEOUT_SECONDS="1",
        GATEWAY_WEBHOOK_RETRY_SCHEDULE="0.3,0.6,0.9",
        GATEWAY_WEBHOOK_MAX_RETRY_AFTER_SECONDS="3",
    )


# ---- receivers ------------------------------------------------------------------------------


@dataclass
class HostileReceiver(Receiver):
    """The harness receiver plus: /hang (until `release` is set), /slow/<seconds>, /big500 (a 1 MB
    error page), /retry-after-date/<seconds> (429 once per webhook-id with an HTTP-date
    `Retry-After`, then 200) and /always-429/<seconds> (429 with `Retry-After` every time).
    `inflight` counts requests that arrived and have not been answered yet."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    inflight: int = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        parts = request.path.strip("/").split("/")
        kind = parts[0]
        if kind not in {"hang", "slow", "big500", "retry-after-date", "always-429"}:
            return await super()._handle(request)
        body = await request.read()
        self.requests.append(Received(request.path, dict(request.headers), body, time.time()))
        wid = request.headers.get("webhook-id", "")
        count = self._seen[wid] = self._seen.get(wid, 0) + 1
        self.inflight += 1
        try:
            if kind == "hang":
                await self.release.wait()
            elif kind == "slow":
                await asyncio.sleep(float(parts[1]))
            elif kind == "big500":
                return web.Response(status=500, body=b"E" * ONE_MB, content_type="text/plain")
            elif kind == "retry-after-date" and count == 1:
                when = formatdate(time.time() + float(parts[1]), usegmt=True)
                return web.Response(status=429, headers={"Retry-After": when}, text="slow down")
            elif kind == "always-429":
                return web.Response(status=429, headers={"Retry-After": parts[1]}, text="slow down")
            return web.Response(status=200, text="ok")
        finally:
            self.inflight -= 1


@pytest.fixture
async def receivers() -> AsyncIterator[Callable[[], Awaitable[HostileReceiver]]]:
    made: list[HostileReceiver] = []

    async def make() -> HostileReceiver:
        rcv = HostileReceiver()
        await rcv.start()
        made.append(rcv)
        return rcv

    try:
        yield make
    finally:
        for rcv in made:
            rcv.release.set()
        for rcv in made:
            await rcv.stop()


@dataclass
class RawReceiver:
    """A bare TCP listener that reads the request head and then misbehaves: `close` hangs up
    without a word, `garbage` answers bytes that are not HTTP."""

    mode: str
    port: int = 0
    connections: int = 0
    _server: asyncio.Server | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.port = free_port()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(Exception):
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            if self.mode == "garbage":
                writer.write(b"\x00\x17\xffSSH-2.0-definitely-not-http\r\n\r\n")
                await writer.drain()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


# ---- helpers --------------------------------------------------------------------------------


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job: dict[str, Any] = r.json()
    return job


async def combined(client: httpx.AsyncClient, url: str, **extra: Any) -> dict[str, Any]:
    """A combined-mode job: it goes straight to delivering its one `job.completed` webhook."""
    return await create(client, message_input="hi", message_output="hello", webhook_url=url, **extra)


async def attempts(client: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/jobs/{job_id}/deliveries")
    assert r.status_code == 200, r.text
    log: list[dict[str, Any]] = r.json()["attempts"]
    return log


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


async def hooks_for(receiver: Receiver, job_id: str, n: int = 1, within: float = 10.0) -> list[Received]:
    async def check() -> list[Received] | None:
        got = receiver.for_job(job_id)
        return got if len(got) >= n else None

    result: list[Received] = await eventually(check, within=within, interval=0.02, what=f"{n} hooks")
    return result


# ---- no head-of-line blocking ---------------------------------------------------------------


async def _hang_40_then_healthy(
    server: Server, hanging: HostileReceiver, healthy: HostileReceiver
) -> tuple[float, int]:
    """40 webhooks stuck in /hang, then one to `healthy`/ok: (seconds to arrival, still hanging)."""
    async with server.client() as c:
        stuck = await asyncio.gather(*(combined(c, f"{hanging.base}/hang") for _ in range(40)))

        async def all_hanging() -> bool:
            return hanging.inflight == 40

        await eventually(all_hanging, within=10, what="40 webhooks hanging")
        created = time.time()
        job = await combined(c, f"{healthy.base}/ok")
        [hook] = await hooks_for(healthy, job["job_id"], within=5)
        still_hanging = hanging.inflight
        done = await wait_status(c, job["job_id"], TERMINAL)
        assert done["status"] == "completed"
        stuck_now = await c.get(f"/v1/jobs/{stuck[0]['job_id']}")
        assert stuck_now.json()["status"] not in TERMINAL  # still waiting on the hanging receiver

        # Let the hanging receiver answer: the 40 were held, never dropped, and now complete.
        hanging.release.set()
        for s in stuck:
            finished = await wait_status(c, s["job_id"], TERMINAL, within=10)
            assert finished["status"] == "completed", finished
            assert finished["delivery"]["attempts"] == 1
        return hook.at - created, still_hanging


async def test_hanging_receiver_does_not_block_another_destination(
    patient: Server, receivers: Callable[[], Awaitable[HostileReceiver]]
) -> None:
    hanging, healthy = await receivers(), await receivers()
    assert hanging.port != healthy.port
    took, still_hanging = await _hang_40_then_healthy(patient, hanging, healthy)
    assert took < 3, f"healthy webhook took {took:.2f} s behind 40 hanging ones"
    assert still_hanging == 40


async def test_hanging_path_does_not_block_another_path_of_the_same_host(
    patient: Server, receivers: Callable[[], Awaitable[HostileReceiver]]
) -> None:
    """Same host:port, so the same per-destination pool: 40 < GATEWAY_WEBHOOK_MAX_PER_HOST (64)."""
    receiver = await receivers()
    took, still_hanging = await _hang_40_then_healthy(patient, receiver, receiver)
    assert took < 3, f"healthy webhook took {took:.2f} s behind 40 hanging ones on the same host"
    assert still_hanging == 40


async def test_slow_receiver_does_not_delay_a_fast_one(
    patient: Server, receivers: Callable[[], Awaitable[HostileReceiver]]
) -> None:
    slow, fast = await receivers(), await receivers()
    async with patient.client() as c:
        slow_jobs = await asyncio.gather(*(combined(c, f"{slow.base}/slow/1.5") for _ in range(5)))

        async def all_waiting() -> bool:
            return slow.inflight == 5

        await eventually(all_waiting, within=5, what="5 slow webhooks in flight")
        created = time.time()
        job = await combined(c, f"{fast.base}/ok")
        [hook] = await hooks_for(fast, job["job_id"])
        assert hook.at - created < 1.0
        assert slow.inflight == 5, "the fast webhook should arrive while the slow ones are pending"
        for s in slow_jobs:
            done = await wait_status(c, s["job_id"], TERMINAL)
            assert done["status"] == "completed"  # 1.5 s is slow but within the 10 s timeout
            [entry] = await attempts(c, s["job_id"])
            assert entry["status_code"] == 200 and entry["duration_ms"] >= 1400


# ---- what the receiver answers --------------------------------------------------------------


async def test_huge_error_body_is_not_kept_or_echoed(
    patient: Server, receivers: Callable[[], Awaitable[HostileReceiver]]
) -> None:
    """A 500 with a 1 MB page. `GET .../deliveries` has no excerpt field (the contract lists none),
    so what is checkable from outside: the attempt is logged as a 500 with a short error, and no
    API answer carries the page."""
    receiver = await receivers()
    async with patient.client() as c:
        # expires before the 5 s retry, so exactly one attempt is made
        job = await combined(c, f"{receiver.base}/big500", expires_in_seconds=3)
        done = await wait_status(c, job["job_id"], TERMINAL)
        assert done["status"] == "failed" and done["error"]["code"] == "webhook_failed"
        [entry] = await attempts(c, job["job_id"])
        assert entry["status_code"] == 500 and entry["error"] == "http_500"
        assert done["delivery"]["last_status_code"] == 500
        for path in (f"/v1/jobs/{job['job_id']}", f"/v1/jobs/{job['job_id']}/deliveries"):
            r = await c.get(path)
            assert len(r.content) < 8192 and "EEEEEEEE" not in r.text
        assert len(receiver.for_job(job["job_id"])) == 1


async def test_retries_never_run_past_expires_at(
    patient: Server, receivers: Callable[[], Awaitable[HostileReceiver]]
) -> None:
    """expires_in_seconds=2: a schedule retry (5 s) would pass it, so none is made; a 1 s
    `Retry-After` is honoured once (it fits) and then also stops at expires_at."""
    receiver = await receivers()
    async with patient.client() as c:
        failing, throttled = await asyncio.gather(
            combined(c, f"{receiver.base}/status/500", expires_in_seconds=2),
            combined(c, f"{receiver.base}/always-429/1", expires_in_seconds=2),
        )
        for job in (failing, throttled):
            done = await wait_status(c, job["job_id"], TERMINAL, within=6)
            assert done["status"] in {"failed", "expired"}, done
            assert done["delivery"]["next_attempt_at"] is None
        # Wait past expires_at (+ a sweep) and check nothing arrived after it.
        expires_at = max(epoch(failing["expires_at"]), epoch(throttled["expires_at"]))
        await asyncio.sleep(max(0.0, expires_at + 1.5 - time.time()))
        for job, expected_attempts in ((failing, 1), (throttled, 2)):
            deadline = epoch(job["expires_at"])
            hooks = receiver.for_job(job["job_id"])
            assert len(hooks) == expected_attempts, [h.at - deadline for h in hooks]
            assert all(h.at < deadline for h in hooks)
            log = await attempts(c, job["job_id"])
            assert len(log) == expected_attempts
            assert all(epoch(a["started_at"]) < deadline for a in log)
            assert log[-1]["next_attempt_at"] is None
            final = (await c.get(f"/v1/jobs/{job['job_id']}")).json()
            assert final["status"] in {"failed", "expired"}


async def test_retry_after_http_date_is_honoured_and_capped(
    strict: Server, receivers: Callable[[], Awaitable[HostileReceiver]]
) -> None:
    """Retry-After as an HTTP-date ~2.5 s ahead is waited for (the schedule says 0.3 s); 3600 s or a
    date a day ahead is cut to GATEWAY_WEBHOOK_MAX_RETRY_AFTER_SECONDS (3 s here)."""
    receiver = await receivers()
    async with strict.client() as c:
        dated, huge_seconds, huge_date = await asyncio.gather(
            combined(c, f"{receiver.base}/retry-after-date/2.5"),
            combined(c, f"{receiver.base}/retry-after/3600"),
            combined(c, f"{receiver.base}/retry-after-date/86400"),
        )
        gaps: dict[str, float] = {}
        for name, job in (("dated", dated), ("huge_seconds", huge_seconds), ("huge_date", huge_date)):
            done = await wait_status(c, job["job_id"], TERMINAL, within=10)
            assert done["status"] == "completed", done
            first, second = receiver.for_job(job["job_id"])
            gaps[name] = second.at - first.at
            log = await attempts(c, job["job_id"])
            assert [a["status_code"] for a in log] == [429, 200]
            planned = epoch(log[0]["next_attempt_at"]) - epoch(log[0]["started_at"])
            assert planned <= 3.0 + 0.1, (name, planned)
        # HTTP-dates have whole seconds, so "now + 2.5 s" means a delay of 1.5 to 2.5 s
        assert 1.3 <= gaps["dated"] <= 3.0, gaps
        assert 2.8 <= gaps["huge_seconds"] <= 4.5, gaps
        assert 2.8 <= gaps["huge_date"] <= 4.5, gaps


@pytest.mark.parametrize("mode", ["close", "garbage"])
async def test_connection_dropped_or_garbage_is_retried_then_fails(strict: Server, mode: str) -> None:
    receiver = RawReceiver(mode)
    await receiver.start()
    try:
        async with strict.client() as c:
            job = await combined(c, f"{receiver.base}/hook")
            done = await wait_status(c, job["job_id"], TERMINAL, within=10)
            assert done["status"] == "failed" and done["error"]["code"] == "webhook_failed"
            log = await attempts(c, job["job_id"])
            assert [a["attempt"] for a in log] == [1, 2, 3, 4]  # first try + the 3-step schedule
            assert len({a["webhook_id"] for a in log}) == 1
            expected = {"close": "closed the connection", "garbage": "protocol_error"}[mode]
            for a in log:
                assert a["status_code"] is None and expected in a["error"], a
            assert all(a["next_attempt_at"] for a in log[:-1]) and log[-1]["next_attempt_at"] is None
            assert done["delivery"]["last_error"] == log[-1]["error"]
            assert receiver.connections == 4, "one connection per logged attempt, no hidden retries"
    finally:
        await receiver.stop()


async def test_timeout_is_logged_and_retried_with_the_same_webhook_id(
    strict: Server, receivers: Callable[[], Awaitable[HostileReceiver]]
) -> None:
    receiver = await receivers()
    async with strict.client() as c:
        job = await combined(c, f"{receiver.base}/hang")
        done = await wait_status(c, job["job_id"], TERMINAL, within=15)
        assert done["status"] == "failed" and done["error"]["code"] == "webhook_failed"
        log = await attempts(c, job["job_id"])
        assert len(log) == 4
        for a in log:
            assert a["status_code"] is None and "timeout" in a["error"], a
            assert 900 <= a["duration_ms"] < 2500, a
        hooks = receiver.for_job(job["job_id"])
        assert len(hooks) == 4
        assert len({h.headers["webhook-id"] for h in hooks}) == 1
        assert {h.headers["webhook-id"] for h in hooks} == {log[0]["webhook_id"]}
        assert len({h.body for h in hooks}) == 1


# ---- the job as its receiver sees it while a webhook is in flight ------------------------------


async def test_job_reads_delivering_while_its_final_webhook_is_in_flight(
    patient: Server, receivers: Callable[[], Awaitable[HostileReceiver]]
) -> None:
    """CONTRACT §1: `delivering` is "the final webhook is being delivered". A receiver (or a poller)
    that looks the job up while the webhook is being delivered must see that, and the filter result."""
    receiver = await receivers()
    async with patient.client() as c:
        job = await combined(c, f"{receiver.base}/hang")
        await hooks_for(receiver, job["job_id"])
        try:
            seen = (await c.get(f"/v1/jobs/{job['job_id']}")).json()
            assert seen["status"] == "delivering", seen["status"]
            assert seen["inbound"] is not None and seen["outbound"] is not None
        finally:
            receiver.release.set()
            await wait_status(c, job["job_id"], TERMINAL)


@dataclass
class AnsweringReceiver(Receiver):
    """A backend's receiver that answers `job.awaiting_response` by submitting the LLM's response
    to the gateway at once, inside its handler, and records the gateway's answer."""

    gateway: Server | None = None
    submitted: list[int] = field(default_factory=list)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Received(request.path, dict(request.headers), body, time.time()))
        payload = orjson.loads(body)
        if payload["event"] == "job.awaiting_response" and self.gateway is not None:
            async with self.gateway.client() as c:
                r = await c.post(f"/v1/jobs/{payload['job_id']}/response", json={"message_output": "42"})
            self.submitted.append(r.status_code)
        return web.Response(status=200)


async def test_receiver_can_submit_the_response_when_told_the_job_awaits_it(patient: Server) -> None:
    """`job.awaiting_response` says the job takes `POST .../response` now; a receiver that does so
    from its handler must get a 202, not a 409 `invalid_state` naming processing_inbound."""
    receiver = AnsweringReceiver(gateway=patient)
    await receiver.start()
    try:
        async with patient.client() as c:
            job = await create(c, message_input="What is 6 x 7?", webhook_url=f"{receiver.base}/hook")
            await hooks_for(receiver, job["job_id"])
            await eventually(lambda: _true(receiver.submitted), what="the receiver's submit")
            assert receiver.submitted == [202]
            done = await wait_status(c, job["job_id"], TERMINAL)
            assert done["status"] == "completed"
    finally:
        await receiver.stop()


async def _true(value: Any) -> Any:
    return value
