"""The one hot route, `POST /v1/jobs`, called without the generic request stack.

Every job enters through this route. Starlette's stack around it (error middleware, our metrics and
body-limit middlewares, the exception middleware, the router, the endpoint wrapper, a send wrapper
per layer) costs about a tenth of a create's instructions (callgrind). `GatewayApp` calls the
endpoint directly and does what those layers would have done, with the same handlers: the same
error envelope for every exception (`exception_handlers`), the same request counter, the same
body limit. Anything it cannot decide cheaply (no Content-Length, a malformed or too large one)
takes the generic stack, so the edge cases have one implementation.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.api.errors import exception_handlers
from gateway.api.jobs import create_job
from gateway.api.limits import content_length

FAST_PATH = "/v1/jobs"


class GatewayApp(Starlette):
    def __init__(self, *args: Any, max_body_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # "/v1/jobs/" is a 404 in the envelope, not a 307 to "/v1/jobs": Starlette's redirect is
        # built from the Host header (an open redirect behind a proxy, "http://" behind TLS) and a
        # client that follows it sends its POST and Authorization header again
        self.router.redirect_slashes = False
        self.max_body_bytes = max_body_bytes
        self._handlers = exception_handlers()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == FAST_PATH:
            declared = content_length(scope)
            if declared is not None and 0 <= declared <= self.max_body_bytes:
                await self._create(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    async def _create(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self
        request = Request(scope, receive)
        crashed: Exception | None = None
        try:
            response = await create_job(request)
        except Exception as exc:
            response = await self._handle(request, exc)
            if response.status_code >= 500 and response.status_code != 503:
                crashed = exc
        await response(scope, receive, send)
        runtime = getattr(self.state, "runtime", None)
        if runtime is not None:
            runtime.metrics.http_requests.labels(FAST_PATH, str(response.status_code)).inc()
        if crashed is not None:
            # as ServerErrorMiddleware does: answer first (no detail in the body), then re-raise so
            # the server logs the traceback
            raise crashed

    async def _handle(self, request: Request, exc: Exception) -> Response:
        for cls in type(exc).__mro__:
            handler = self._handlers.get(cls)
            if handler is not None:
                response: Response = await handler(request, exc)
                return response
        raise exc  # pragma: no cover - Exception itself has a handler
