"""Fault tests: real `gateway serve` / `gateway worker` processes killed, stopped, raced and starved.

Built on the black-box harness (tests/acceptance/harness.py). What this adds:

- `FaultReceiver`: the harness receiver plus slow and hanging paths (`/slow`, `/sleep/<s>`,
  `/sleep-first/<s>`), recording every arrival before it answers.
- `Proc`: a `gateway serve [args]` or `gateway worker` subprocess whose start and stop run in a
  thread, so the receiver (on the test's event loop) keeps answering while a process starts or stops.
- `procs`: a fixture that builds them on one database and kills whatever is still running at teardown.
- helpers to list every job of the tenant, wait until a set of jobs is terminal, and check every
  arrival against the published Standard Webhooks verifier.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from tests.acceptance.harness import Received, Receiver, Server, eventually

TERMINAL = frozenset({"inbound_blocked", "outbound_blocked", "completed", "failed", "expired", "cancelled"})
# One key for every process of a test: secrets sealed by a killed process open in its successor.
SECRET_KEY = "fault-tests-server-key-that-is-long-enough-0123456789"
# Fast, loopback-friendly settings; a test overrides what it is about.
FAST_ENV: dict[str, str] = {
    "GATEWAY_SECRET_KEY": SECRET_KEY,
    "GATEWAY_LEASE_SECONDS": "2",
    "GATEWAY_POLL_INTERVAL_SECONDS": "0.1",
    "GATEWAY_SWEEP_INTERVAL_SECONDS": "0.5",
    "GATEWAY_WEBHOOK_RETRY_SCHEDULE": "0.2,0.4,0.6,0.8",
    "GATEWAY_WEBHOOK_TIMEOUT_SECONDS": "5",
}


@dataclass
class FaultReceiver(Receiver):
    """The harness receiver plus: `/slow` (answers 200 after 0.3-1.0 s, the delay fixed per webhook-id),
    `/sleep/<s>` (200 after s seconds, every time), `/sleep-first/<s>` (the first arrival of a
    webhook-id waits s seconds, later ones answer at once), `/gate/<s>` (200 once `gate` is set, or
    after s seconds)."""

    answered: dict[str, int] = field(default_factory=dict)  # webhook-id -> 2xx answers sent
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        parts = request.path.strip("/").split("/")
        kind = parts[0] if parts else ""
        if kind not in ("slow", "sleep", "sleep-first", "gate"):
            response = await super()._handle(request)
            self._count(request, response.status)
            return response
        body = await request.read()
        self.requests.append(Received(request.path, dict(request.headers), body, time.time()))
        wid = request.headers.get("webhook-id", "")
        count = self._seen[wid] = self._seen.get(wid, 0) + 1
        if kind == "gate":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gate.wait(), timeout=float(parts[1]))
        elif kind == "slow":
            await asyncio.sleep(0.3 + 0.7 * int(hashlib.sha256(wid.encode()).hexdigest()[:4], 16) / 0xFFFF)
        elif kind == "sleep" or count == 1:
            await asyncio.sleep(float(parts[1]))
        self._count(request, 200)
        return web.Response(status=200, text="ok")

    def _count(self, request: web.Request, status: int) -> None:
        if 200 <= status < 300:
            wid = request.headers.get("webhook-id", "")
            self.answered[wid] = self.answered.get(wid, 0) + 1

    def arrivals(self) -> list[tuple[dict[str, Any], Received]]:
        return [(orjson.loads(r.body), r) for r in self.requests]


@dataclass
class Proc(Server):
    """`gateway serve` (with `args`, e.g. `--no-workers`) or, with `worker=True`, `gateway worker`.

    A worker has no port: it is ready when it logs that it runs. `start`/`stop` block; use the
    async `up`/`down`/`kill` in tests so the receiver on the event loop keeps answering meanwhile.
    """

    args: Sequence[str] = ()
    worker: bool = False
    name: str = "gateway"

    def start(self, timeout: float = 20.0) -> None:
        if not self.worker:
            self._start_serve(timeout)
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path = self.root / f"{self.name}.log"
        mark = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "worker", *self.args],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_path.read_text()}")
            if b" running on " in self.log_path.read_bytes()[mark:]:
                return
            time.sleep(0.05)
        raise RuntimeError(f"worker did not start:\n{self.log_path.read_text()}")

    def _start_serve(self, timeout: float) -> None:
        self.serve_args = tuple(self.args)
        super().start(timeout)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    async def up(self) -> Proc:
        await asyncio.to_thread(self.start)
        return self

    async def kill(self) -> int | None:
        """SIGKILL: no shutdown code runs, leases stay where they were."""
        return await asyncio.to_thread(self.stop, signal.SIGKILL)

    async def down(self) -> int | None:
        """SIGTERM and wait for the exit (killed after 20 s)."""
        return await asyncio.to_thread(self.stop, signal.SIGTERM)

    async def terminate(self, grace: float, sig: int = signal.SIGTERM) -> tuple[int | None, float]:
        """`sig` (SIGTERM by default), then wait up to `grace` seconds for the process to exit by
        itself (it is killed, and the returned code is None, if it does not). Returns (exit code,
        seconds it took)."""
        assert self.proc is not None
        proc = self.proc
        started = time.monotonic()
        proc.send_signal(sig)
        try:
            await asyncio.to_thread(proc.wait, grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)
            self.proc = None
            return None, time.monotonic() - started
        self.proc = None
        return proc.returncode, time.monotonic() - started


@dataclass
class Procs:
    """Every gateway process of one test, all on the database under `root`."""

    root: Path
    env: dict[str, str]
    started: list[Proc] = field(default_factory=list)

    def serve(self, *args: str, name: str = "serve", env: Mapping[str, str] | None = None) -> Proc:
        proc = Proc(root=self.root, env_overrides={**self.env, **(env or {})}, args=args, name=name)
        self.started.append(proc)
        return proc

    def worker(self, *args: str, name: str = "worker", env: Mapping[str, str] | None = None) -> Proc:
        proc = Proc(
            root=self.root, env_overrides={**self.env, **(env or {})}, args=args, worker=True, name=name
        )
        self.started.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.started:
            with contextlib.suppress(Exception):
                proc.stop(signal.SIGKILL)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    root = tmp_path / "gw"
    # SQLite, explicitly: these tests lock and starve the file, whatever backend the harness defaults to
    group = Procs(root=root, env={"GATEWAY_DATABASE_URL": f"sqlite:///{root}/gateway.db", **FAST_ENV})
    try:
        yield group
    finally:
        group.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[FaultReceiver]:
    rcv = FaultReceiver()
    await rcv.start()
    try:
        yield rcv
    finally:
        rcv.gate.set()
        await rcv.stop()


# ---- API helpers -------------------------------------------------------------------------------


async def create_many(
    client: httpx.AsyncClient, bodies: Sequence[Mapping[str, Any]], *, concurrency: int = 32
) -> list[dict[str, Any]]:
    """POST every body (at most `concurrency` at once); every one must be a 202. Returns the answers
    in the order of `bodies`."""
    gate = asyncio.Semaphore(concurrency)

    async def one(body: Mapping[str, Any]) -> dict[str, Any]:
        async with gate:
            r = await client.post("/v1/jobs", json=dict(body))
        assert r.status_code == 202, r.text
        created: dict[str, Any] = r.json()
        return created

    return list(await asyncio.gather(*(one(b) for b in bodies)))


async def all_jobs(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    """Every job of the client's tenant, by id (pages of 200)."""
    out: dict[str, dict[str, Any]] = {}
    cursor: str | None = None
    for _ in range(10_000):
        params: dict[str, Any] = {"limit": 200}
        if cursor:
            params["cursor"] = cursor
        r = await client.get("/v1/jobs", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        out.update({j["job_id"]: j for j in page["jobs"]})
        cursor = page["next_cursor"]
        if not cursor:
            return out
    raise AssertionError("too many pages")


async def wait_terminal(
    client: httpx.AsyncClient, job_ids: Iterable[str], *, within: float
) -> dict[str, dict[str, Any]]:
    """Wait until every job in `job_ids` is terminal; returns them. On timeout, the failure names
    how many are stuck and in which statuses."""
    wanted = set(job_ids)

    async def check() -> dict[str, dict[str, Any]] | None:
        jobs = await all_jobs(client)
        missing = wanted - jobs.keys()
        assert not missing, f"{len(missing)} accepted jobs are gone, e.g. {sorted(missing)[:3]}"
        if all(jobs[j]["status"] in TERMINAL for j in wanted):
            return {j: jobs[j] for j in wanted}
        return None

    try:
        result: dict[str, dict[str, Any]] = await eventually(
            check, within=within, interval=0.2, what="every job terminal"
        )
    except AssertionError:
        jobs = await all_jobs(client)
        stuck: dict[str, int] = {}
        for j in wanted:
            status = jobs[j]["status"]
            if status not in TERMINAL:
                stuck[status] = stuck.get(status, 0) + 1
        raise AssertionError(f"jobs stuck after {within}s: {stuck}") from None
    return result


def check_arrivals(receiver: FaultReceiver, secrets: Mapping[str, str]) -> dict[tuple[str, str], set[str]]:
    """Every arrival verifies with the published verifier and its job's secret, and every arrival of
    one webhook-id carries the same bytes (retries, and re-sends after a crash or a stop, resend the
    stored body). Returns the webhook-ids seen per (job, event)."""
    ids: dict[tuple[str, str], set[str]] = {}
    bodies: dict[str, bytes] = {}
    for payload, received in receiver.arrivals():
        job_id = payload["job_id"]
        assert job_id in secrets, f"a webhook for a job nobody created: {job_id}"
        verified = Webhook(secrets[job_id]).verify(received.body, received.headers)
        assert verified["job_id"] == job_id
        wid = received.headers["webhook-id"]
        assert bodies.setdefault(wid, received.body) == received.body, f"{wid} re-sent with another body"
        ids.setdefault((job_id, payload["event"]), set()).add(wid)
    return ids
