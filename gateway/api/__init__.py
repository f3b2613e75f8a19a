"""The HTTP API (CONTRACT §2): routes, middleware and error handlers for `gateway.app.create_app`.

One `Route` per path with a method table, rather than one route per (path, method), so a wrong
method gets a 405 whose `Allow` header names every method the path takes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.api import filter as filter_api
from gateway.api import health, jobs, openapi, policies
from gateway.api.errors import ApiError, exception_handlers
from gateway.api.instrument import RequestMetricsMiddleware
from gateway.api.limits import BodyLimitMiddleware
from gateway.settings import Settings

__all__ = ["ApiError", "exception_handlers", "middleware", "routes"]

Endpoint = Callable[[Request], Awaitable[Response]]

# path -> {method: endpoint}; openapi.py describes exactly these (a test holds them together).
ROUTES: dict[str, dict[str, Endpoint]] = {
    "/v1/jobs": {"POST": jobs.create_job, "GET": jobs.list_jobs},
    "/v1/jobs/{job_id}": {"GET": jobs.get_job, "DELETE": jobs.cancel_job},
    "/v1/jobs/{job_id}/response": {"POST": jobs.submit_response},
    "/v1/jobs/{job_id}/deliveries": {"GET": jobs.list_deliveries},
    "/v1/filter": {"POST": filter_api.filter_text},
    "/v1/policies": {"GET": policies.list_policies},
    "/v1/policies/{name}": {
        "GET": policies.get_policy,
        "PUT": policies.put_policy,
        "DELETE": policies.delete_policy,
    },
    "/healthz": {"GET": health.healthz},
    "/readyz": {"GET": health.readyz},
    "/api/v1/health/queues": {"GET": health.queues},
    "/metrics": {"GET": health.metrics},
    "/openapi.json": {"GET": openapi.openapi_json},
}


def _dispatch(table: Mapping[str, Endpoint]) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await table[method](request)

    return endpoint


def routes() -> list[BaseRoute]:
    out: list[BaseRoute] = []
    for path, table in ROUTES.items():
        endpoint = next(iter(table.values())) if len(table) == 1 else _dispatch(table)
        out.append(Route(path, endpoint, methods=list(table)))
    return out


def middleware(settings: Settings) -> list[Middleware]:
    """Outermost first: metrics see every response, including the body limit's 413s."""
    return [
        Middleware(RequestMetricsMiddleware),
        Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes),
    ]
