"""Liveness, readiness, queue health and Prometheus metrics.

`/healthz` and `/readyz` answer without auth (orchestrators probe them); `/healthz` touches
nothing, `/readyz` reads the database. Queue health comes from `store.queue_stats()`, which is
constant-time whatever the depth, so monitors can poll it often.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from gateway.api.auth import authenticate, runtime_of
from gateway.api.errors import ApiError
from gateway.api.responses import JSONResponse
from gateway.clock import rfc3339
from gateway.runtime import Runtime
from gateway.store.base import QueueStats

QUEUES = ("processing_inbound", "processing_outbound", "awaiting_response", "delivering")
# A job waiting for the client's LLM answer is not the gateway falling behind.
WATCHED_QUEUES = ("processing_inbound", "processing_outbound", "delivering")


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    try:
        await runtime_of(request).store.ping()
    except Exception as exc:
        raise ApiError(
            503, "unavailable", "the database is not reachable", headers={"Retry-After": "1"}
        ) from exc
    return JSONResponse({"status": "ready"})


def _ages(stats: QueueStats, now: float) -> dict[str, tuple[int, float]]:
    out = {}
    for name in QUEUES:
        stat = stats.queues.get(name)
        depth = stat.depth if stat is not None else 0
        since = stat.oldest_since if stat is not None else None
        age = 0.0 if since is None or depth == 0 else round(max(0.0, now - since), 3)
        out[name] = (depth, age)
    return out


async def queues(request: Request) -> Response:
    await authenticate(request)
    runtime = runtime_of(request)
    stats = await runtime.store.queue_stats()
    now = runtime.clock.now()
    ages = _ages(stats, now)
    limit = runtime.settings.queue_degraded_age_seconds
    degraded = any(ages[name][1] > limit for name in WATCHED_QUEUES)
    body: dict[str, Any] = {
        "status": "degraded" if degraded else "ok",
        "queues": {name: {"depth": depth, "oldest_age_seconds": age} for name, (depth, age) in ages.items()},
        "checked_at": rfc3339(now),
    }
    body["queues"]["delivering"]["retrying"] = stats.retrying
    return JSONResponse(body)


async def _refresh_gauges(runtime: Runtime) -> None:
    stats = await runtime.store.queue_stats()
    for name, (depth, age) in _ages(stats, runtime.clock.now()).items():
        runtime.metrics.queue_depth.labels(name).set(depth)
        runtime.metrics.queue_oldest.labels(name).set(age)


async def metrics(request: Request) -> Response:
    runtime = runtime_of(request)
    if runtime.settings.metrics_require_auth:
        await authenticate(request)
    await _refresh_gauges(runtime)
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
