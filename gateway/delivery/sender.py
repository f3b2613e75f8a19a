"""One webhook attempt over HTTP, reduced to an `AttemptResult` the pipeline can act on.

The pipeline never sees an HTTP library: it hands a `Transport` a URL, headers and body and gets
back what happened. `AiohttpTransport` is the production one (chosen by measurement, see
`bench/http_clients.py`); `MockTransport` lets tests script receivers without sockets.

A transport never raises for anything the receiver or the network did: timeouts, refused
connections, TLS failures and garbage responses all come back as a result with `outcome="retry"`,
and SSRF refusals as `outcome="refused"`. Only programming errors (and cancellation) propagate.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol, Self

import aiohttp
from aiohttp.abc import AbstractResolver
from aiohttp.resolver import ThreadedResolver

from gateway.delivery.retry import parse_retry_after
from gateway.delivery.ssrf import GuardedResolver, UrlRefused, check_url

if TYPE_CHECKING:
    from gateway.settings import Settings

SUCCESS: Final = "success"
RETRY: Final = "retry"
GONE: Final = "gone"
REFUSED: Final = "refused"

_MAX_ERROR_CHARS = 200
_DNS_CACHE_SECONDS = 10


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt did, as the delivery log and the retry decision need it.

    `outcome`: "success" (2xx), "gone" (410: stop, the receiver asked us to), "refused" (the SSRF
    guard said no: retrying cannot help) or "retry" (anything else, Svix-style: network errors,
    timeouts, 3xx since redirects are not followed, 408, 429, 5xx and other 4xx, because a
    misconfigured receiver is often fixed within the retry window).
    `retry_after` is the receiver's `Retry-After` in seconds, read on 429 and 503 only.
    """

    status_code: int | None
    error: str | None
    duration_ms: float
    retry_after: float | None
    response_excerpt: str
    outcome: str

    @property
    def succeeded(self) -> bool:
        return self.outcome == SUCCESS


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 1] + "…"


def classify_status(status: int) -> tuple[str, str | None]:
    """(outcome, error) for an HTTP status code."""
    if 200 <= status < 300:
        return SUCCESS, None
    if status == 410:
        return GONE, "http_410"
    if 300 <= status < 400:
        return RETRY, "redirect_not_followed"
    return RETRY, f"http_{status}"


def _answered(
    status: int,
    retry_after_header: str | None,
    excerpt: bytes,
    duration_ms: float,
    max_retry_after_seconds: float | None,
    now: float | None = None,
) -> AttemptResult:
    """The result of an attempt the receiver answered: `retry_after_header` as sent (it counts on
    429 and 503 only, capped), `excerpt` the part of the body that was kept."""
    outcome, error = classify_status(status)
    retry_after: float | None = None
    if retry_after_header is not None and status in (429, 503):
        retry_after = parse_retry_after(retry_after_header, time.time() if now is None else now)
        if retry_after is not None and max_retry_after_seconds is not None:
            retry_after = min(retry_after, max_retry_after_seconds)
    text = excerpt.decode("utf-8", errors="replace") if excerpt else ""
    return AttemptResult(status, error, duration_ms, retry_after, text, outcome)


def result_from_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    duration_ms: float,
    *,
    body_cap: int,
    max_retry_after_seconds: float | None = None,
    now: float | None = None,
) -> AttemptResult:
    """Build the result for a response that arrived (for the mock transport)."""
    value = None
    if status in (429, 503):
        value = headers.get("Retry-After")
        if value is None:
            value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    excerpt = body[:body_cap] if body_cap > 0 else b""
    return _answered(status, value, excerpt, duration_ms, max_retry_after_seconds, now)


def _failure(error: str, started: float, outcome: str = RETRY) -> AttemptResult:
    return AttemptResult(None, _short(error), (time.perf_counter() - started) * 1000.0, None, "", outcome)


class Transport(Protocol):
    """Sends one webhook attempt. Implementations never raise for network or receiver failures."""

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult: ...

    async def close(self) -> None: ...


@functools.lru_cache(maxsize=4096)
def _static_refusal(url: str, allow_private: bool) -> tuple[str, str] | None:
    try:
        check_url(url, allow_private)
    except UrlRefused as exc:
        return exc.code, exc.message
    return None


def _os_reason(exc: aiohttp.ClientConnectorError) -> str:
    os_error = exc.os_error
    reason = os_error.strerror or str(os_error) or type(os_error).__name__
    return f"{exc.host}:{exc.port}: {reason}"


class HttpTransport(Transport):
    """What the real transports share: their limits, built from the settings; the SSRF-guarded
    resolver; and the result of an attempt the receiver answered."""

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
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = connect_timeout_seconds
        self.max_connections = max_connections
        self.max_per_host = max_per_host
        self.body_cap = body_cap
        self.allow_private_networks = allow_private_networks
        self.max_retry_after_seconds = max_retry_after_seconds

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(
            timeout_seconds=settings.webhook_timeout_seconds,
            connect_timeout_seconds=settings.webhook_connect_timeout_seconds,
            max_connections=settings.webhook_max_concurrency,
            max_per_host=settings.webhook_max_per_host,
            body_cap=settings.webhook_response_body_cap,
            allow_private_networks=settings.webhook_allow_private_networks,
            max_retry_after_seconds=settings.webhook_max_retry_after_seconds,
        )

    def _guarded(self, resolver: AbstractResolver | None) -> AbstractResolver:
        """`resolver` (threaded getaddrinfo by default), refusing forbidden addresses unless
        private networks are allowed: connections go to exactly the addresses it returns."""
        inner = resolver if resolver is not None else ThreadedResolver()
        return inner if self.allow_private_networks else GuardedResolver(allow_private=False, inner=inner)

    def _answered(
        self, status: int, retry_after_header: str | None, excerpt: bytes, started: float
    ) -> AttemptResult:
        duration_ms = (time.perf_counter() - started) * 1000.0
        return _answered(status, retry_after_header, excerpt, duration_ms, self.max_retry_after_seconds)


class AiohttpTransport(HttpTransport):
    """Webhook attempts over one shared `aiohttp.ClientSession`.

    * One session per transport, created lazily inside the running loop, so connections are pooled
      and reused across jobs to the same receiver.
    * `limit_per_host` bounds how many connections one receiver can hold: a receiver that hangs ties
      up at most that many, and requests queued behind them give up after the connect timeout (it
      covers waiting for a pooled connection), so it cannot starve deliveries to anyone else.
    * `total` bounds a whole attempt (`GATEWAY_WEBHOOK_TIMEOUT_SECONDS`); redirects are not followed;
      at most `body_cap` bytes of a response are read; cookies are never kept; proxies from the
      environment are ignored (a proxy would dial the URL on our behalf, past the SSRF guard).
    * Unless `allow_private_networks`, literal hosts are checked before each request and names by a
      `GuardedResolver` at connect time.
    """

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
        self._inner_resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._timeout = aiohttp.ClientTimeout(
            total=timeout_seconds, connect=connect_timeout_seconds, sock_connect=connect_timeout_seconds
        )

    def _open(self) -> aiohttp.ClientSession:
        resolver = self._guarded(self._inner_resolver)
        connector = aiohttp.TCPConnector(
            limit=self.max_connections,
            limit_per_host=self.max_per_host,
            resolver=resolver,
            ttl_dns_cache=_DNS_CACHE_SECONDS,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            # We keep at most a few KiB of a response, undecoded: ask for it uncompressed. A default
            # header rather than skip_auto_headers, which aiohttp turns into a sorted multidict and
            # two header copies on every request (~3% of the event loop's time under load).
            headers={"Accept-Encoding": "identity"},
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            raise_for_status=False,
        )
        return self._session

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult:
        started = time.perf_counter()
        refusal = _static_refusal(url, self.allow_private_networks)
        if refusal is not None:
            return _failure(f"refused: {refusal[1]}", started, REFUSED)
        session = self._session if self._session is not None else self._open()
        try:
            async with session.post(url, data=body, headers=headers, allow_redirects=False) as resp:
                status = resp.status
                data = await self._read_capped(resp.content)
                retry_after_header = resp.headers.get("Retry-After") if status in (429, 503) else None
        except UrlRefused as exc:
            return _failure(f"refused: {exc.message}", started, REFUSED)
        except aiohttp.ConnectionTimeoutError:
            # also what a request gets that waited too long for a free connection to this destination
            return _failure("connect_timeout", started)
        except TimeoutError:  # total or read timeout (aiohttp's timeouts subclass it)
            return _failure("timeout", started)
        except aiohttp.ClientConnectorDNSError as exc:
            return _failure(f"dns_error: {_os_reason(exc)}", started)
        except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError) as exc:
            return _failure(f"tls_error: {exc}", started)
        except aiohttp.ClientConnectorError as exc:
            return _failure(f"connect_error: {_os_reason(exc)}", started)
        except aiohttp.ServerDisconnectedError:
            return _failure("disconnected: server closed the connection without a response", started)
        except aiohttp.InvalidURL as exc:
            return _failure(f"refused: invalid url {exc}", started, REFUSED)
        except aiohttp.ClientResponseError as exc:
            # aiohttp's text carries its own pseudo-status and the full URL (query tokens and all):
            # keep only the reason, never the URL, in the attempt log.
            return _failure(f"protocol_error: {exc.message}", started)
        except aiohttp.ClientPayloadError as exc:
            return _failure(f"protocol_error: {type(exc).__name__}", started)
        except (aiohttp.ClientError, OSError) as exc:
            return _failure(f"connect_error: {type(exc).__name__}: {exc}", started)
        return self._answered(status, retry_after_header, data, started)

    async def _read_capped(self, content: aiohttp.StreamReader) -> bytes:
        """Read at most `body_cap` bytes; a longer body is left unread and its connection dropped."""
        remaining = self.body_cap
        if remaining <= 0:
            return b""
        first = await content.read(remaining)
        if not first or len(first) >= remaining:
            return first
        chunks = [first]
        remaining -= len(first)
        while remaining > 0:
            chunk = await content.read(remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


MockResponse = AttemptResult | tuple[int, Mapping[str, str], bytes]
MockHandler = Callable[[str, Mapping[str, str], bytes], Awaitable[MockResponse] | MockResponse]


@dataclass(frozen=True, slots=True)
class MockRequest:
    url: str
    headers: Mapping[str, str]
    body: bytes


@dataclass
class MockTransport(Transport):
    """A scripted receiver, in the spirit of `httpx.MockTransport`.

    The handler (sync or async) gets `(url, headers, body)` and returns either an `AttemptResult`
    (to simulate timeouts, refusals...) or `(status, headers, body)`, which is classified exactly as
    a real response would be. Every request is recorded in `requests`. With `check_urls=True` the
    static SSRF check runs first, as in production with private networks disallowed.
    """

    handler: MockHandler
    body_cap: int = 4096
    max_retry_after_seconds: float | None = None
    check_urls: bool = False
    requests: list[MockRequest] = field(default_factory=list)
    closed: bool = False

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult:
        started = time.perf_counter()
        self.requests.append(MockRequest(url, dict(headers), body))
        if self.check_urls:
            refusal = _static_refusal(url, False)
            if refusal is not None:
                return _failure(f"refused: {refusal[1]}", started, REFUSED)
        out = self.handler(url, headers, body)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, AttemptResult):
            return out
        status, response_headers, response_body = out
        return result_from_response(
            status,
            response_headers,
            response_body,
            (time.perf_counter() - started) * 1000.0,
            body_cap=self.body_cap,
            max_retry_after_seconds=self.max_retry_after_seconds,
        )

    async def close(self) -> None:
        self.closed = True


__all__ = [
    "GONE",
    "REFUSED",
    "RETRY",
    "SUCCESS",
    "AiohttpTransport",
    "AttemptResult",
    "HttpTransport",
    "MockRequest",
    "MockTransport",
    "Transport",
    "classify_status",
    "result_from_response",
]
