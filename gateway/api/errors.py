"""Every error leaves the API in one envelope: `{"error": {"code", "message", "details"}}`.

Handlers here cover our own `ApiError`, Starlette's routing errors (404, 405), a database that
cannot answer (503 with `Retry-After`, so clients and load balancers back off instead of failing
hard) and anything unexpected (500 `internal`, with no traceback in the body: the exception is
re-raised by Starlette's ServerErrorMiddleware after our response, so the server logs it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.api.responses import JSONResponse
from gateway.store.base import StoreError

log = logging.getLogger("gateway.api")

Details = Sequence[Mapping[str, Any]]

# Codes for errors Starlette raises itself (routing, methods) and for statuses we reach by status.
_CODE_FOR_STATUS: dict[int, str] = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_argument",
    429: "rate_limited",
    500: "internal",
    503: "unavailable",
}


class ApiError(Exception):
    """An error the API answers with on purpose: raise it anywhere below a handler."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Details = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = [dict(d) for d in details]
        self.headers = dict(headers or {})


def not_found(message: str = "no such resource") -> ApiError:
    return ApiError(404, "not_found", message)


def invalid(message: str, details: Details = (), *, status: int = 422) -> ApiError:
    """A request that is well-formed JSON but not what the route accepts (422), or malformed (400)."""
    return ApiError(status, "invalid_argument", message, details)


def field_problem(field: str, problem: str, **extra: Any) -> dict[str, Any]:
    return {"field": field, "problem": problem, **extra}


def envelope(code: str, message: str, details: Details = ()) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": [dict(d) for d in details]}}


def error_response(
    status: int, code: str, message: str, details: Details = (), headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(envelope(code, message, details), status_code=status, headers=dict(headers or {}))


def response_for(exc: ApiError) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return response_for(exc)


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    code = _CODE_FOR_STATUS.get(status, "invalid_argument" if status < 500 else "internal")
    if status == 404:
        message = f"no route for {request.url.path}"
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail) or code.replace("_", " ")
    return error_response(status, code, message, headers=exc.headers)


async def _store_error(request: Request, exc: Exception) -> Response:
    log.warning("store unavailable during %s %s: %s", request.method, request.url.path, exc)
    return error_response(
        503, "unavailable", "the database is unavailable; retry shortly", headers={"Retry-After": "1"}
    )


async def _client_disconnect(request: Request, exc: Exception) -> Response:
    # The client went away while we read its body: nobody will read this answer, but it must not
    # turn into a 500 and a logged traceback.
    return error_response(400, "invalid_argument", "the client disconnected before sending the whole body")


async def _internal(request: Request, exc: Exception) -> Response:
    # No detail from `exc` goes into the body: it may hold SQL, paths or secrets. The exception is
    # re-raised by ServerErrorMiddleware after this response, so the server logs the traceback.
    return error_response(500, "internal", "an internal error occurred; it has been logged")


def exception_handlers() -> dict[Any, Any]:
    """For `Starlette(exception_handlers=...)`; `Exception` goes to ServerErrorMiddleware."""
    return {
        ApiError: _api_error,
        HTTPException: _http_exception,
        StoreError: _store_error,
        ClientDisconnect: _client_disconnect,
        Exception: _internal,
    }
