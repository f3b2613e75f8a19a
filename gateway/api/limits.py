"""Request body size limit, as pure ASGI so it acts before anything reads the body.

A declared `Content-Length` over the limit is refused before a byte of the body is read (and one
within it needs no further checks: the HTTP parser frames the body by that length); a body without
one (chunked) is counted as it streams and refused as soon as it goes over, so a client can never
make us buffer more than the limit.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.api.errors import ApiError, error_response, response_for


class PayloadTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            "payload_too_large",
            f"the request body is larger than the limit of {limit} bytes",
            [{"field": "body", "problem": f"larger than {limit} bytes", "limit_bytes": limit}],
        )


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        declared = content_length(scope)
        if declared == -1:
            response = error_response(400, "invalid_argument", "the Content-Length header is not a number")
            await response(scope, receive, send)
            return
        if declared is not None and declared > limit:
            await response_for(PayloadTooLarge(limit))(scope, receive, send)
            return
        if declared is not None:
            # The HTTP parser delivers exactly Content-Length bytes, so a body within a declared
            # length within the limit needs no counting: skip the wrappers (most requests).
            await self.app(scope, receive, send)
            return

        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Raised inside whoever reads the body; the ApiError handler answers 413.
                    raise PayloadTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except PayloadTooLarge as exc:
            if started:
                raise
            await response_for(exc)(scope, receive, send)


def content_length(scope: Scope) -> int | None:
    """The declared length, None when absent, -1 when unparseable."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None
