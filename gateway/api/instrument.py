"""Counts every request in `gateway_http_requests` by route template and status.

Labelled by the template (`/v1/jobs/{job_id}`), never the concrete path, so the number of series
stays bounded whatever ids clients send. Pure ASGI so it sees responses produced by any layer
below it (413s from the body limit, Starlette's own 404/405) and counts an unhandled exception
as the 500 it becomes.
"""

from __future__ import annotations

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_UNMATCHED = "unmatched"


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            runtime = getattr(scope["app"].state, "runtime", None)
            if runtime is not None:
                runtime.metrics.http_requests.labels(_template(scope), str(status)).inc()


def _template(scope: Scope) -> str:
    route = scope.get("route")
    if route is None:
        # Answered before routing (e.g. 413 on Content-Length): find the route it was meant for.
        for candidate in scope["app"].routes:
            match, _ = candidate.matches(scope)
            if match != Match.NONE:
                route = candidate
                break
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else _UNMATCHED
