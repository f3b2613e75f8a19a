"""A real gateway per test module: `create_app` served by uvicorn on 127.0.0.1 (port 0), driven
over real HTTP with httpx. Workers are off, so jobs wait in `processing_inbound`; tests that need a
later status drive the store the way a worker would.

The server is shared by a module (starting one compiles the file policies); every test gets a
fresh tenant, so tests never see each other's jobs. Tests that need other settings start their own
server with `serve(...)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette

from gateway.app import create_app
from gateway.crypto import hash_api_key, new_api_key
from gateway.http_protocol import bounded
from gateway.runtime import Runtime
from gateway.serve_cli import proxy_options
from gateway.settings import REPO_ROOT, Settings
from gateway.store.base import Store

BOOTSTRAP_KEY = "gwk_bootstrap_test_key_0123456789abcdefghijklmnopq"
STARTUP_TIMEOUT = 10.0


@dataclass
class Gateway:
    app: Starlette
    base_url: str

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.app.state.runtime
        return runtime

    @property
    def store(self) -> Store:
        return self.runtime.store

    def client(self, key: str | None = None, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        """An HTTP client for this server; with `key`, authenticated as that key."""
        all_headers = dict(headers or {})
        if key is not None:
            all_headers["Authorization"] = f"Bearer {key}"
        return httpx.AsyncClient(base_url=self.base_url, headers=all_headers, timeout=10.0)

    async def new_key(self, tenant: str | None = None) -> tuple[str, str]:
        """A new API key for `tenant` (a fresh, unique tenant by default): (tenant, key)."""
        tenant = tenant or f"t_{secrets.token_hex(6)}"
        key = new_api_key()
        await self.store.add_api_key(tenant, hash_api_key(key), self.runtime.clock.now())
        return tenant, key


def settings_for(root: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": f"sqlite:///{root}/g.db",
        "var_dir": root,
        "bootstrap_api_key": BOOTSTRAP_KEY,
        "policy_dir": REPO_ROOT / "config" / "policies",
        "webhook_allow_private_networks": False,
        "max_body_bytes": 256 * 1024,
        "sqlite_synchronous": "OFF",
        # These tests drive jobs through the status machine by hand (no workers run here): keep new
        # jobs in processing_inbound. Filtering at create has its own tests (test_inline_filter.py).
        "inline_filter_max_chars": 0,
    }
    values.update(overrides)
    return Settings(**values)


@contextlib.asynccontextmanager
async def serve(root: Path, **overrides: Any) -> AsyncIterator[Gateway]:
    """Run the app under uvicorn in this event loop (lifespan included) until the block exits."""
    settings = settings_for(root, **overrides)
    app = create_app(settings, workers=False)
    options = proxy_options(settings)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        lifespan="on",
        log_config=None,
        access_log=False,
        http=bounded(settings.max_header_bytes),  # the HTTP protocol `gateway serve` runs
        **options,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = asyncio.get_running_loop().time() + STARTUP_TIMEOUT
    while not server.started:
        if task.done():
            task.result()  # surfaces a startup exception
            raise RuntimeError("uvicorn exited during startup (see the log)")
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("uvicorn did not start")
        await asyncio.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Gateway(app=app, base_url=f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        await task


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    async with serve(tmp_path_factory.mktemp("gateway")) as gateway:
        yield gateway


@dataclass
class Tenant:
    name: str
    key: str
    http: httpx.AsyncClient


@pytest_asyncio.fixture(loop_scope="module")
async def tenant(gw: Gateway) -> AsyncIterator[Tenant]:
    name, key = await gw.new_key()
    async with gw.client(key) as http:
        yield Tenant(name, key, http)


@pytest_asyncio.fixture(loop_scope="module")
async def other(gw: Gateway) -> AsyncIterator[Tenant]:
    name, key = await gw.new_key()
    async with gw.client(key) as http:
        yield Tenant(name, key, http)


@pytest_asyncio.fixture(loop_scope="module")
async def anon(gw: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with gw.client() as http:
        yield http


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The response is the one error envelope with this status and code; returns the error."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["details"], list)
    assert "Traceback" not in response.text
    return error
