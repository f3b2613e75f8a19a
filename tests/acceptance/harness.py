"""Black-box harness: a real `gateway serve` process and a real webhook receiver.

No mocks of our own code: the server is started as users start it, the receiver is a plain aiohttp
app that records what arrives and verifies signatures with the published `standardwebhooks` package.

A `Server` uses its own SQLite file under `root` unless it is given `database_url` (and, for
PostgreSQL, `database_schema`), or is built inside `postgres_by_default(url)`: then it gets a fresh
schema of its own in that database, dropped when the block ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

REPO = Path(__file__).resolve().parents[2]
# Where tests find PostgreSQL (the same variable and default as tests/integration/store).
POSTGRES_URL = os.environ.get("GATEWAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _run_async(make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine to completion in a thread of its own: callers may be inside a running loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, make()).result()


def postgres_problem(url: str = POSTGRES_URL) -> str | None:
    """Why the PostgreSQL at `url` cannot be used, or None when it answers."""
    import asyncpg

    async def connect() -> None:
        conn = await asyncpg.connect(url, timeout=3)
        await conn.close()

    try:
        _run_async(connect)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def new_schema_name(prefix: str = "acc") -> str:
    """A schema name no other test uses; the gateway creates the schema when it starts."""
    return f"{prefix}_{secrets.token_hex(6)}"


def drop_schemas(url: str, names: list[str]) -> None:
    """DROP SCHEMA ... CASCADE for each name (missing ones are fine)."""
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(url, timeout=5)
        try:
            await conn.execute("SET lock_timeout = '10s'")
            for name in names:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await conn.close()

    if names:
        _run_async(drop)


_default_postgres: tuple[str, list[str]] | None = None  # (url, schemas handed out) while active


@contextlib.contextmanager
def postgres_by_default(url: str) -> Iterator[list[str]]:
    """While active, every `Server` built without a `database_url` runs on PostgreSQL at `url`, each
    in a fresh schema of its own; the schemas (yielded as a list) are dropped when the block ends."""
    global _default_postgres
    previous = _default_postgres
    schemas: list[str] = []
    _default_postgres = (url, schemas)
    try:
        yield schemas
    finally:
        _default_postgres = previous
        drop_schemas(url, schemas)


def process_alive(pid: int) -> bool:
    """Running, not a zombie: a process that has exited counts as gone before it is reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """Behaviour by path: /ok, /status/<code>, /flaky/<n> (500 n times per webhook-id, then 200),
    /retry-after/<seconds> (429 once per webhook-id with Retry-After, then 200), /hang, /redirect."""

    port: int = 0
    requests: list[Received] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _seen: dict[str, int] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Received(request.path, dict(request.headers), body, time.time()))
        parts = request.path.strip("/").split("/")
        wid = request.headers.get("webhook-id", "")
        count = self._seen[wid] = self._seen.get(wid, 0) + 1
        kind = parts[0] if parts else ""
        if kind == "status":
            return web.Response(status=int(parts[1]), text="status")
        if kind == "flaky":
            return web.Response(status=500 if count <= int(parts[1]) else 200, text="flaky")
        if kind == "retry-after":
            if count == 1:
                return web.Response(status=429, headers={"Retry-After": parts[1]}, text="slow down")
            return web.Response(status=200)
        if kind == "hang":
            await asyncio.sleep(60)
            return web.Response(status=200)
        if kind == "redirect":
            return web.Response(status=302, headers={"Location": f"{self.base}/ok"})
        return web.Response(status=200, text="ok")

    def for_job(self, job_id: str) -> list[Received]:
        import orjson

        return [r for r in self.requests if orjson.loads(r.body).get("job_id") == job_id]


@dataclass
class Server:
    """`gateway serve` in a subprocess with its own database under `root` (SQLite), or on
    `database_url` (e.g. PostgreSQL, in `database_schema` when given)."""

    root: Path
    env_overrides: Mapping[str, str] = field(default_factory=dict)
    api_key: str = "gwk_test_bootstrap_key_0123456789abcdef"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    database_url: str | None = None  # None: sqlite:///{root}/gateway.db
    database_schema: str | None = None  # GATEWAY_DATABASE_SCHEMA (PostgreSQL only)
    serve_args: Sequence[str] = ()  # more `gateway serve` arguments, e.g. ("--no-workers",)

    def __post_init__(self) -> None:
        if self.database_url is None and _default_postgres is not None:
            url, schemas = _default_postgres
            self.database_url = url
            if self.database_schema is None:
                self.database_schema = new_schema_name()
                schemas.append(self.database_schema)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env.update(
            {
                "GATEWAY_DATABASE_URL": self.database_url or f"sqlite:///{self.root}/gateway.db",
                "GATEWAY_VAR_DIR": str(self.root),
                "GATEWAY_POLICY_DIR": str(REPO / "config" / "policies"),
                "GATEWAY_BOOTSTRAP_API_KEY": self.api_key,
                "GATEWAY_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
                "GATEWAY_WEBHOOK_RETRY_SCHEDULE": "0.3,0.6,0.9",
                "GATEWAY_WEBHOOK_TIMEOUT_SECONDS": "2",
                "GATEWAY_SWEEP_INTERVAL_SECONDS": "0.5",
                "GATEWAY_POLL_INTERVAL_SECONDS": "0.2",
                "GATEWAY_LEASE_SECONDS": "3",
                "GATEWAY_CONFIG_FILE": str(self.root / "none.toml"),
            }
        )
        if self.database_schema is not None:
            env["GATEWAY_DATABASE_SCHEMA"] = self.database_schema
        env.update(self.env_overrides)
        return env

    def start(self, timeout: float = 20.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        self.log_path = self.root / f"server-{self.port}.log"
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--port", str(self.port), *self.serve_args],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server did not become ready:\n{self.log_path.read_text()}")

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def client(self, key: str | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base, headers={"Authorization": f"Bearer {key or self.api_key}"}, timeout=10
        )


async def eventually(
    check: Callable[[], Awaitable[Any]], *, within: float = 10.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll `check` until it returns a truthy value; fail with the last value after `within` s."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}: last={last!r}")
        await asyncio.sleep(interval)


async def wait_status(
    client: httpx.AsyncClient, job_id: str, statuses: set[str], within: float = 10.0
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        r = await client.get(f"/v1/jobs/{job_id}")
        job: dict[str, Any] = r.json()
        return job if job.get("status") in statuses else None

    result: dict[str, Any] = await eventually(check, within=within, what=f"{job_id} in {statuses}")
    return result
