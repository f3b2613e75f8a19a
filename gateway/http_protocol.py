"""uvicorn's httptools protocol with a bound on the request head, writing each response at once.

httptools buffers a request's line and headers until they are complete, with no size limit: one
client sending an endless header line could make the process buffer gigabytes. This protocol counts
the head's bytes as they arrive and answers 431 (in the API's error envelope) and closes the
connection once they pass `max_head_bytes`, before the parser has buffered more than that.

A request the HTTP parser refuses (a control byte in a header, a broken request line, a bad
Content-Length) gets a 400 in the API's error envelope too, where uvicorn answers in plain text: a
client's error handling reads one shape, whatever layer refused it.

uvicorn writes a response's head and its body with two transport writes: two syscalls, two TCP
segments and, often, two wake-ups of the client. `_OneWrite` holds the head until the body follows
(in the same event-loop turn for every response this API makes) and writes them together.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.api.errors import Details, envelope, field_problem

DEFAULT_MAX_HEAD_BYTES = 64 * 1024
_HEAD_END = b"\r\n\r\n"
_INTERIM = b"HTTP/1.1 1"  # a 1xx status line: `100 Continue`, written before the response


class BoundedHeadProtocol(HttpToolsProtocol):
    max_head_bytes = DEFAULT_MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_open = True
        self._head_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self._head_open:
            end = data.find(_HEAD_END)
            # Only the part up to the blank line is head; a body in the same chunk is not counted.
            # A blank line split across two chunks counts the whole chunk: conservative, harmless.
            self._head_bytes += len(data) if end < 0 else end + len(_HEAD_END)
            if self._head_bytes > self.max_head_bytes:
                self._refuse_head()
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head_open = False
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = _OneWrite(self.transport)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_open = True  # the next request on this connection starts its own count
        self._head_bytes = 0

    def _refuse_head(self) -> None:
        self._head_open = False
        self._refuse(
            b"431 Request Header Fields Too Large",
            "request_header_fields_too_large",
            f"the request line and headers are larger than {self.max_head_bytes} bytes",
            [field_problem("headers", f"larger than {self.max_head_bytes} bytes")],
        )

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this when the parser refuses the bytes; same status, our envelope."""
        self._refuse(
            b"400 Bad Request",
            "invalid_argument",
            "the request is not valid HTTP/1.1 (request line, headers or framing)",
            [field_problem("request", "not valid HTTP/1.1")],
        )

    def _refuse(self, status: bytes, code: str, message: str, details: Details) -> None:
        """Answer in the error envelope and close: the connection's framing can no longer be trusted."""
        body = orjson.dumps(envelope(code, message, details))
        head = (
            b"HTTP/1.1 " + status + b"\r\n"
            b"content-type: application/json\r\n"
            b"connection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        if not self.transport.is_closing():
            self.transport.write(head + body)
            self.transport.close()


class _OneWrite:
    """The transport as one request cycle sees it: the response head is held until the body's
    first write and sent with it. An interim response written before it (`100 Continue`) goes
    out at once, and a head whose body does not follow in the same event-loop turn (a streamed
    response) is flushed at the end of that turn, so nothing waits on the hold.

    It keeps no reference to its request cycle (which holds it as `transport`): a reference
    back would make every request a reference cycle, garbage that only the cycle collector
    frees, in pauses that grew with the load (tens of milliseconds at a few hundred requests a
    second, straight into the create latency's p99)."""

    __slots__ = ("_held", "_state", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held = b""
        self._state = 0  # 0: no head yet, 1: head held, 2: head sent

    def write(self, data: bytes) -> None:
        if self._state == 1:
            self._state = 2
            held, self._held = self._held, b""
            self._transport.write(held + data)
        elif self._state == 0 and not data.startswith(_INTERIM):
            self._state = 1
            self._held = data
            asyncio.get_running_loop().call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        if self._state == 1:
            self._state = 2
            held, self._held = self._held, b""
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def bounded(max_head_bytes: int) -> type[BoundedHeadProtocol]:
    """The protocol class with this limit (uvicorn instantiates the class it is given)."""
    return type("BoundedHeadProtocol", (BoundedHeadProtocol,), {"max_head_bytes": max_head_bytes})
