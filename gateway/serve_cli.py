"""`gateway serve` (API + workers + sweeper) and `gateway worker` (workers + sweeper only)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import time
from typing import Any

from gateway.crypto import hash_api_key, new_api_key
from gateway.gctune import tune_for_serving
from gateway.settings import Settings

log = logging.getLogger("gateway")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default 8080)")
    parser.add_argument("--no-workers", action="store_true", help="serve the API only")


def configure_worker(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concurrency", type=int, default=None, help="jobs filtered at once")


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def _first_run_key(settings: Settings) -> str | None:
    """On a database with no API key at all, make one for tenant `default` and return it (once)."""
    from gateway.store import open_store

    store = open_store(settings)
    await store.open()
    try:
        if settings.bootstrap_api_key is not None or await store.count_api_keys() > 0:
            return None
        key = new_api_key()
        await store.add_api_key("default", hash_api_key(key), time.time())
        return key
    finally:
        await store.close()


def proxy_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for `GATEWAY_TRUSTED_PROXIES`: the client address (used by the budget of
    invalid API keys) comes from X-Forwarded-For only when the peer is one of these proxies. With
    none, the peer is the client and the header is ignored."""
    if not settings.trusted_proxies:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": list(settings.trusted_proxies)}


def _banner(settings: Settings, host: str, port: int, key: str | None) -> str:
    base = f"http://{host}:{port}"
    lines = [
        "",
        "  LLM webhook gateway",
        f"  listening on   {base}",
        f"  database       {settings.database_url}",
        f"  policies       {settings.policy_dir}",
    ]
    if key:
        lines += [
            f"  API key        {key}",
            "                 (shown once: it is stored only as a hash. More keys:",
            "                  gateway keys create --tenant NAME)",
        ]
    elif settings.bootstrap_api_key is not None:
        lines.append("  API key        GATEWAY_BOOTSTRAP_API_KEY (tenant 'default')")
    else:
        lines.append("  API key        create one with: gateway keys create --tenant default")
    shown = key or "$GATEWAY_API_KEY"
    lines += [
        "",
        "  try it:",
        f"    curl -s {base}/v1/jobs -H 'Authorization: Bearer {shown}' \\",
        "      -H 'Content-Type: application/json' \\",
        '      -d \'{"message_input": "Email me at jane@example.com", "message_output": "Sure!"}\'',
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import create_app

    _logging()
    settings = Settings()
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    key = asyncio.run(_first_run_key(settings))
    print(_banner(settings, host, port, key), flush=True)
    app = create_app(settings, workers=not args.no_workers, tune_gc=True)
    from gateway.http_protocol import bounded

    config = uvicorn.Config(
        app,
        http=bounded(settings.max_header_bytes),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=15,
        server_header=False,
        **proxy_options(settings),
    )
    # uvicorn re-raises the signal it caught once its graceful shutdown is done; with the default
    # handlers that would end the process as "killed by SIGTERM" (-15) after a clean stop, and
    # print a KeyboardInterrupt traceback after Ctrl-C. The stop is done by then: nothing to add.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    uvicorn.Server(config).run()
    return 0


async def _worker_main(settings: Settings) -> None:
    from gateway.app import build_runtime

    runtime = await build_runtime(settings)
    await runtime.start_workers()
    tune_for_serving()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    log.info(
        "worker %s running on %s", runtime.pipeline.owner if runtime.pipeline else "?", settings.database_url
    )
    await stop.wait()
    log.info("worker stopping: finishing or releasing in-flight work")
    await runtime.shutdown()


def run_worker(args: argparse.Namespace) -> int:
    _logging()
    overrides = {"worker_concurrency": args.concurrency} if args.concurrency else {}
    settings = Settings(**overrides)
    try:
        # the event loop `serve` gets from uvicorn: uvloop where it is installed (it is a dependency)
        try:
            import uvloop
        except ImportError:  # pragma: no cover
            asyncio.run(_worker_main(settings))
        else:
            uvloop.run(_worker_main(settings))
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    return 0
