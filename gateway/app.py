"""Builds the Starlette app from Settings; the lifespan opens the store and starts the runtime."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette

from gateway.clock import Clock
from gateway.crypto import SecretBox, load_secret_key
from gateway.filterproc import FilterProcess
from gateway.gctune import tune_for_serving
from gateway.metrics import Metrics
from gateway.offload import Offload
from gateway.policies import PolicyRegistry
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store import open_store

log = logging.getLogger("gateway")


async def build_runtime(settings: Settings, *, clock: Clock | None = None) -> Runtime:
    """Open the store (running migrations) and everything that hangs off it; no workers yet."""
    store = open_store(settings)
    await store.open()
    key = load_secret_key(
        settings.secret_key.get_secret_value() if settings.secret_key else None, settings.var_dir
    )
    offload = Offload(filter_process=FilterProcess() if settings.use_filter_process else None)
    offload.start()
    runtime = Runtime(
        settings=settings,
        store=store,
        clock=clock or Clock(),
        box=SecretBox(key),
        policies=PolicyRegistry(store, settings.policy_dir, offload),
        metrics=Metrics(),
        offload=offload,
    )
    await runtime.policies.warm()
    if offload.filter_process is not None:
        offload.filter_process.preload = list(runtime.policies.file_policies.values())
        await offload.filter_process.start()
    runtime.started_at = runtime.clock.now()
    return runtime


def create_app(
    settings: Settings | None = None,
    *,
    workers: bool = True,
    clock: Clock | None = None,
    tune_gc: bool = False,
) -> Starlette:
    """The API; with `workers`, the pipeline and the sweeper run in the same process. `tune_gc` (for
    the server process, not for tests that build many apps) applies `gateway.gctune` once started."""
    from gateway.api import exception_handlers, middleware, routes
    from gateway.api.fast import GatewayApp

    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime = await build_runtime(settings, clock=clock)
        app.state.runtime = runtime
        await runtime.ensure_bootstrap_key()
        if workers:
            await runtime.start_workers()
        if tune_gc:
            await runtime.policies.get("default", "default")  # compiled now, frozen with the rest
            tune_for_serving()
        try:
            yield
        finally:
            await runtime.shutdown()

    app = GatewayApp(
        routes=routes(),
        middleware=middleware(settings),
        exception_handlers=exception_handlers(),
        lifespan=lifespan,
        max_body_bytes=settings.max_body_bytes,
    )
    return app
