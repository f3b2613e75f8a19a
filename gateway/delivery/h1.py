"""`H1Transport`: webhook attempts over a lean HTTP/1.1 client, the delivery hot path.

Why not aiohttp's `ClientSession` here: a webhook attempt needs a small part of what it does (one
POST with a body we already hold, keep-alive, a status and a few KiB of the answer), and the rest
costs CPU on the event loop every request. On this machine (`bench/http_clients.py`, same run,
same receiver) a `ClientSession` spends about 60 µs of CPU per request, this client about 15-20.
Delivery throughput is the product, and under load the event loop's CPU is what bounds it.

What is ours and what is not:
* Response parsing is httptools (llhttp, Node.js's parser; the library uvicorn parses requests
  with), so status lines, chunked bodies, `Connection: close` and interim 1xx answers are handled by
  a well-tested parser. We write only the request head, which is fixed in shape.
* Name resolution goes through an aiohttp `AbstractResolver` (threaded `getaddrinfo` by default)
  wrapped in the SSRF `GuardedResolver`, and we connect to exactly the addresses it returned and
  checked, so DNS rebinding cannot slip a private address in between the check and the connect.
  Literal IP hosts are checked statically (`check_url`) before each request.
* TLS is the standard library's `ssl` with the default context (certificates and host names
  verified), through the event loop.

Behaviour matches `AiohttpTransport` (the tests run both): only a 2xx succeeds, redirects are not
followed, `Retry-After` is read on 429/503, at most `body_cap` bytes of a response are kept (a
longer body is not read and its connection is dropped), `max_per_host` connections per
destination and `max_connections` in all, a connect timeout that also covers waiting for a free
connection, and a total timeout per attempt. No cookies, no proxies, no decompression
(`Accept-Encoding: identity`).

A keep-alive connection the receiver closed just as we reused it fails with no byte of answer;
that attempt is repeated once at once on a new connection (the receiver saw nothing, or at worst
a duplicate it can drop by `webhook-id`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any, Final, cast
from urllib.parse import quote, urlsplit

import httptools
from aiohttp.abc import AbstractResolver

from gateway.delivery.sender import (
    REFUSED,
    AttemptResult,
    HttpTransport,
    _failure,
    _static_refusal,
)
from gateway.delivery.ssrf import UrlRefused

_DNS_CACHE_SECONDS: Final = 10.0
_KEEPALIVE_SECONDS: Final = 15.0
_OWN_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# everything printable in a URL's path and query stays as it is; anything else is percent-encoded
_PATH_SAFE: Final = "!#$%&'()*+,/:;=?@[]~"


@dataclass(frozen=True, slots=True)
class _Target:
    """What a URL means to the client: where to connect and what to put in the request head."""

    key: tuple[str, str, int]
    host: str  # ASCII (IDNA), no brackets
    port: int
    tls: bool
    literal: bool
    head_start: str  # "POST /path?query HTTP/1.1\r\nHost: host[:port]\r\n"


@functools.lru_cache(maxsize=4096)
def _target(url: str) -> _Target:
    """Parse a webhook URL once (tenants send the same few, over and over). Raises ValueError."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"unsupported scheme {scheme!r}")
    host = parts.hostname
    if not host:
        raise ValueError("no host")
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    tls = scheme == "https"
    port = parts.port or (443 if tls else 80)
    try:
        ip_address(host)
        literal = True
    except ValueError:
        literal = False
    shown = f"[{host}]" if ":" in host else host
    if port != (443 if tls else 80):
        shown = f"{shown}:{port}"
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=_PATH_SAFE)
    return _Target(
        (scheme, host, port), host, port, tls, literal, f"POST {path} HTTP/1.1\r\nHost: {shown}\r\n"
    )


def _head(target: _Target, headers: Mapping[str, str], length: int) -> bytes:
    """The request head. Header names and values are ours (ids, signatures), never a tenant's, so
    CR, LF or NUL in one is a bug: it raises rather than let a header be split."""
    lines = [target.head_start]
    identity = True
    for name, value in headers.items():
        lower = name.lower()
        if lower in _OWN_HEADERS:
            continue
        if lower == "accept-encoding":
            identity = False
        lines.append(f"{name}: {value}\r\n")
    fields = "".join(lines[1:])
    n = len(lines) - 1  # each line ends in exactly one CRLF; any other CR, LF or NUL is in a field
    if fields.count("\n") != n or fields.count("\r") != n or "\x00" in fields:
        raise ValueError("a header name or value contains CR, LF or NUL")
    if identity:
        lines.append("Accept-Encoding: identity\r\n")
    lines.append(f"Content-Length: {length}\r\n\r\n")
    return "".join(lines).encode("latin-1")


class _Disconnected(Exception):
    def __init__(self, answered: bool) -> None:
        super().__init__("server closed the connection without a response")
        self.answered = answered  # some of an answer had arrived
        self.reused = False  # on a pooled connection (it may have gone stale while idle)


class _ProtocolError(Exception):
    pass


class _Origin:
    """The connections to one (scheme, host, port)."""

    __slots__ = ("idle", "key", "open")

    def __init__(self, key: tuple[str, str, int]) -> None:
        self.key = key
        self.idle: list[_Conn] = []
        self.open = 0


class _Conn(asyncio.Protocol):
    """One connection; answers one request at a time (no pipelining)."""

    def __init__(self, client: H1Transport, origin: _Origin) -> None:
        self.client = client
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[tuple[int, str | None, bytes]] | None = None
        self.closed = False
        self.counted = False
        self.idle_since = 0.0
        self.cap = 0
        self.status = 0
        self.retry_after: str | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.answered = False
        self.interim = False

    # -- asyncio ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio subclass

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # nobody asked: stray bytes, or the rest of a capped body
            self.close()
            return
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(_ProtocolError("the receiver switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(_ProtocolError(f"malformed response ({exc})"))

    def eof_received(self) -> bool | None:
        return False  # close our side too; connection_lost settles any request in flight

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.counted:
            self.counted = False
            self.client._lost(self.origin)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if self.status and not self.interim:  # a body delimited by the end of the connection
                self._finish(keep=False)
            else:
                self._fail(_Disconnected(self.answered))

    # -- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 11 and name.lower() == b"retry-after":
            self.retry_after = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        self.status = status
        self.interim = 100 <= status < 200 and status != 101

    def on_body(self, body: bytes) -> None:
        if self.waiter is None:
            return
        room = self.cap - self.size
        if room > 0:
            self.chunks.append(body if len(body) <= room else body[:room])
        self.size += len(body)
        if self.size > self.cap:  # more than we keep: stop here, do not read the rest
            self._finish(keep=False)

    def on_message_complete(self) -> None:
        if self.waiter is None:
            return
        if self.interim:  # 100 Continue and friends: the real answer follows
            self.status, self.interim, self.retry_after = 0, False, None
            return
        self._finish(keep=self.parser.should_keep_alive())

    # -- ours -------------------------------------------------------------------------------

    def begin(self, waiter: asyncio.Future[tuple[int, str | None, bytes]], cap: int) -> None:
        self.waiter = waiter
        self.cap = cap
        self.status = 0
        self.retry_after = None
        self.chunks = []
        self.size = 0
        self.answered = False
        self.interim = False

    def _finish(self, keep: bool) -> None:
        waiter, self.waiter = self.waiter, None
        if not keep:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, self.retry_after, b"".join(self.chunks)))

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class H1Transport(HttpTransport):
    """Webhook attempts over pooled HTTP/1.1 keep-alive connections (see the module docstring)."""

    def __init__(
        self,
        timeout_seconds: float = 15.0,
        connect_timeout_seconds: float = 5.0,
        max_connections: int = 512,
        max_per_host: int = 64,
        body_cap: int = 4096,
        allow_private_networks: bool = False,
        *,
        max_retry_after_seconds: float | None = None,
        resolver: AbstractResolver | None = None,
        keepalive_seconds: float = _KEEPALIVE_SECONDS,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(
            timeout_seconds,
            connect_timeout_seconds,
            max_connections,
            max_per_host,
            body_cap,
            allow_private_networks,
            max_retry_after_seconds=max_retry_after_seconds,
        )
        self.keepalive_seconds = keepalive_seconds
        self._resolver = self._guarded(resolver)
        self._ssl = ssl_context
        self._origins: dict[tuple[str, str, int], _Origin] = {}
        self._open = 0
        self._waiters: deque[tuple[_Origin, asyncio.Future[None]]] = deque()
        self._dns: dict[tuple[str, int], tuple[float, list[tuple[str, int]]]] = {}
        self._reaper: asyncio.TimerHandle | None = None
        self._closed = False

    # -- the attempt ------------------------------------------------------------------------

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult:
        started = time.perf_counter()
        refusal = _static_refusal(url, self.allow_private_networks)
        if refusal is not None:
            return _failure(f"refused: {refusal[1]}", started, REFUSED)
        try:
            target = _target(url)
        except ValueError as exc:
            return _failure(f"refused: invalid url ({exc})", started, REFUSED)
        data = _head(target, headers, len(body)) + body
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_seconds
        try:
            try:
                status, retry_after_header, excerpt = await self._exchange(
                    loop, target, data, deadline, False
                )
            except _Disconnected as exc:
                if exc.answered or not exc.reused or loop.time() >= deadline:
                    raise
                status, retry_after_header, excerpt = await self._exchange(loop, target, data, deadline, True)
        except UrlRefused as exc:
            return _failure(f"refused: {exc.message}", started, REFUSED)
        except _ConnectTimeout:
            return _failure("connect_timeout", started)
        except TimeoutError:
            return _failure("timeout", started)
        except _DnsError as exc:
            return _failure(f"dns_error: {target.host}:{target.port}: {exc.reason}", started)
        except _TlsError as exc:
            return _failure(f"tls_error: {exc.reason}", started)
        except _ConnectError as exc:
            return _failure(f"connect_error: {target.host}:{target.port}: {exc.reason}", started)
        except _Disconnected:
            return _failure("disconnected: server closed the connection without a response", started)
        except _ProtocolError as exc:
            return _failure(f"protocol_error: {exc}", started)
        except OSError as exc:
            return _failure(f"connect_error: {type(exc).__name__}: {exc}", started)
        return self._answered(status, retry_after_header, excerpt, started)

    async def _exchange(
        self, loop: asyncio.AbstractEventLoop, target: _Target, data: bytes, deadline: float, fresh: bool
    ) -> tuple[int, str | None, bytes]:
        connect_by = min(deadline, loop.time() + self.connect_timeout_seconds)
        conn, reused = await self._acquire(loop, target, connect_by, fresh)
        waiter: asyncio.Future[tuple[int, str | None, bytes]] = loop.create_future()
        conn.begin(waiter, self.body_cap)
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            assert conn.transport is not None
            conn.transport.write(data)
            answer = await waiter
        except _Disconnected as exc:
            exc.reused = reused
            raise
        except BaseException:  # timeout, cancellation: the connection's state is unknown
            conn.waiter = None
            conn.close()
            raise
        finally:
            timer.cancel()
        if self._closed:
            conn.close()
        elif not conn.closed:
            conn.idle_since = loop.time()
            conn.origin.idle.append(conn)
            if self._waiters:
                self._wake()
        return answer

    # -- the pool ---------------------------------------------------------------------------

    async def _acquire(
        self, loop: asyncio.AbstractEventLoop, target: _Target, connect_by: float, fresh: bool
    ) -> tuple[_Conn, bool]:
        if self._closed:
            raise _ConnectError("the transport is closed")
        origin = self._origins.get(target.key)
        if origin is None:
            origin = self._origins[target.key] = _Origin(target.key)
        while True:
            idle = origin.idle
            while idle and not fresh:
                conn = idle.pop()
                if not conn.closed and loop.time() - conn.idle_since < self.keepalive_seconds:
                    return conn, True
                conn.close()
            if origin.open < self.max_per_host and self._open < self.max_connections:
                origin.open += 1
                self._open += 1
                try:
                    conn = await self._connect(loop, target, origin, connect_by)
                except BaseException:
                    self._lost(origin)
                    raise
                conn.counted = True
                if conn.closed:  # lost before we even counted it
                    conn.counted = False
                    self._lost(origin)
                    raise _Disconnected(False)
                return conn, False
            fresh = False
            turn: asyncio.Future[None] = loop.create_future()
            entry = (origin, turn)
            self._waiters.append(entry)
            timer = loop.call_at(connect_by, _expire, turn)
            try:
                await turn
            except TimeoutError:
                raise _ConnectTimeout() from None
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled() and turn.exception() is None:
                    self._wake()  # we were given a turn we will not use: pass it on
                raise
            finally:
                timer.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(entry)

    def _lost(self, origin: _Origin) -> None:
        origin.open -= 1
        self._open -= 1
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        """Give the first waiter that can now proceed its turn."""
        for entry in self._waiters:
            origin, turn = entry
            if turn.done():
                continue
            if origin.idle or (origin.open < self.max_per_host and self._open < self.max_connections):
                self._waiters.remove(entry)
                turn.set_result(None)
                return

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, target: _Target, origin: _Origin, connect_by: float
    ) -> _Conn:
        try:
            async with asyncio.timeout_at(connect_by):
                addresses: list[tuple[str, int]]
                if target.literal:
                    addresses = [(target.host, socket.AF_INET6 if ":" in target.host else socket.AF_INET)]
                else:
                    addresses = await self._resolve(loop, target.host, target.port)
                last: OSError | None = None
                for host, family in addresses:
                    try:
                        _, conn = await loop.create_connection(
                            lambda: _Conn(self, origin),
                            host,
                            target.port,
                            family=family,
                            ssl=self._tls() if target.tls else None,
                            server_hostname=target.host if target.tls else None,
                        )
                    except ssl.SSLError as exc:  # certificate, host name, or not TLS at all
                        raise _TlsError(str(exc)) from exc
                    except OSError as exc:
                        last = exc
                        continue
                    self._schedule_reaper(loop)
                    return conn
        except TimeoutError:
            raise _ConnectTimeout() from None
        reason = (last.strerror or str(last) or type(last).__name__) if last else "no address"
        raise _ConnectError(reason)

    async def _resolve(self, loop: asyncio.AbstractEventLoop, host: str, port: int) -> list[tuple[str, int]]:
        now = loop.time()
        cached = self._dns.get((host, port))
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            results = await self._resolver.resolve(host, port, socket.AF_UNSPEC)
        except OSError as exc:  # a refusal (UrlRefused) is not one: it passes through
            raise _DnsError(exc.strerror or str(exc) or type(exc).__name__) from exc
        addresses = [(r["host"], r["family"]) for r in results]
        if not addresses:
            raise _DnsError("no address")
        if len(self._dns) > 4096:
            self._dns.clear()
        self._dns[(host, port)] = (now + _DNS_CACHE_SECONDS, addresses)
        return addresses

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def _schedule_reaper(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._reaper is None and not self._closed:
            self._reaper = loop.call_later(self.keepalive_seconds, self._reap, loop)

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close connections idle past the keep-alive time, so none lingers forever."""
        self._reaper = None
        now = loop.time()
        for origin in list(self._origins.values()):
            stale = [c for c in origin.idle if now - c.idle_since >= self.keepalive_seconds]
            if stale:
                origin.idle = [c for c in origin.idle if c not in stale]
                for conn in stale:
                    conn.close()
            if not origin.idle and origin.open == 0 and all(o is not origin for o, _ in self._waiters):
                del self._origins[origin.key]
        if self._origins:
            self._schedule_reaper(loop)

    async def close(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for origin in self._origins.values():
            for conn in origin.idle:
                conn.close()
            origin.idle = []
        for _, turn in self._waiters:
            if not turn.done():
                turn.set_exception(_ConnectError("the transport is closed"))
        self._waiters.clear()
        await self._resolver.close()
        await asyncio.sleep(0)  # let the transports deliver connection_lost


class _ConnectTimeout(Exception):
    pass


class _ReasonError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _DnsError(_ReasonError):
    pass


class _TlsError(_ReasonError):
    pass


class _ConnectError(_ReasonError):
    pass


__all__ = ["H1Transport"]
