"""The transport against real receivers on 127.0.0.1: what each kind of answer turns into."""

from __future__ import annotations

import asyncio
import email.utils
import socket
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from standardwebhooks.webhooks import Webhook

from gateway.crypto import new_webhook_secret
from gateway.delivery.h1 import H1Transport
from gateway.delivery.sender import AiohttpTransport, AttemptResult, MockTransport, classify_status
from gateway.delivery.signing import webhook_headers
from gateway.settings import Settings


@dataclass
class Receiver:
    base_url: str
    port: int
    hits: dict[str, int] = field(default_factory=dict)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return self.base_url + path


async def _start(receiver_factory: type[Receiver] = Receiver) -> tuple[web.AppRunner, Receiver]:
    state: dict[str, Receiver] = {}

    def count(request: web.Request) -> Receiver:
        rec = state["r"]
        rec.hits[request.path] = rec.hits.get(request.path, 0) + 1
        return rec

    async def ok(request: web.Request) -> web.Response:
        rec = count(request)
        rec.received.append(({k.lower(): v for k, v in request.headers.items()}, await request.read()))
        return web.Response(text='{"received":true}', content_type="application/json")

    async def no_content(request: web.Request) -> web.Response:
        count(request)
        return web.Response(status=204)

    async def set_cookie(request: web.Request) -> web.Response:
        rec = count(request)
        rec.received.append(({k.lower(): v for k, v in request.headers.items()}, await request.read()))
        resp = web.Response(text="ok")
        resp.set_cookie("session", "from-receiver")
        return resp

    async def status(request: web.Request) -> web.Response:
        count(request)
        code = int(request.match_info["code"])
        headers = {}
        if "retry_after" in request.query:
            headers["Retry-After"] = request.query["retry_after"]
        if "retry_after_in" in request.query:
            when = time.time() + float(request.query["retry_after_in"])
            headers["Retry-After"] = email.utils.formatdate(when, usegmt=True)
        if 300 <= code < 400:
            headers["Location"] = "/ok"
        return web.Response(status=code, text=f"status {code}", headers=headers)

    async def hang(request: web.Request) -> web.Response:
        rec = count(request)
        await rec.release.wait()
        return web.Response(text="late")

    async def huge(request: web.Request) -> web.StreamResponse:
        count(request)
        resp = web.StreamResponse(status=500)
        resp.content_length = 8 * 1024 * 1024
        await resp.prepare(request)
        chunk = b"x" * 65536
        try:
            for _ in range(128):
                await resp.write(chunk)
        except (ConnectionResetError, ConnectionError):
            pass
        return resp

    async def not_utf8(request: web.Request) -> web.Response:
        count(request)
        return web.Response(status=400, body=b"bad \xff\xfe input")

    app = web.Application()
    app.router.add_post("/ok", ok)
    app.router.add_post("/204", no_content)
    app.router.add_post("/cookie", set_cookie)
    app.router.add_post("/status/{code}", status)
    app.router.add_post("/hang", hang)
    app.router.add_post("/huge", huge)
    app.router.add_post("/not-utf8", not_utf8)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    rec = receiver_factory(base_url=f"http://127.0.0.1:{port}", port=port)
    state["r"] = rec
    return runner, rec


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    runner, rec = await _start()
    try:
        yield rec
    finally:
        rec.release.set()
        await runner.cleanup()


@pytest.fixture
async def other_receiver() -> AsyncIterator[Receiver]:
    runner, rec = await _start()
    try:
        yield rec
    finally:
        rec.release.set()
        await runner.cleanup()


BODY = b'{"event":"job.completed","job_id":"job_1"}'


HEADERS = {"content-type": "application/json", "webhook-id": "msg_1"}


Client = type[AiohttpTransport] | type[H1Transport]


@pytest.fixture(params=[H1Transport, AiohttpTransport], ids=["h1", "aiohttp"])
def client(request: pytest.FixtureRequest) -> Client:
    """Every test runs against both transports: the production one and the aiohttp fallback."""
    cls: Client = request.param
    return cls


@pytest.fixture
async def transport(client: Client) -> AsyncIterator[AiohttpTransport | H1Transport]:
    t = client(timeout_seconds=5.0, connect_timeout_seconds=2.0, body_cap=64, allow_private_networks=True)
    try:
        yield t
    finally:
        await t.close()


async def test_2xx_is_success_and_the_receiver_can_verify_it(
    transport: AiohttpTransport | H1Transport, receiver: Receiver
) -> None:
    secret = new_webhook_secret()
    headers = webhook_headers("msg_abc", int(time.time()), BODY, secret)
    result = await transport.post(receiver.url("/ok"), headers, BODY)
    assert result.outcome == "success"
    assert result.status_code == 200
    assert result.error is None
    assert result.response_excerpt == '{"received":true}'
    assert 0 < result.duration_ms < 5000
    received_headers, received_body = receiver.received[0]
    assert received_body == BODY
    assert received_headers["user-agent"].startswith("llm-webhook-gateway/")
    Webhook(secret).verify(received_body, received_headers)


async def test_responses_are_asked_for_uncompressed(
    transport: AiohttpTransport | H1Transport, receiver: Receiver
) -> None:
    # only a few KiB of a response are kept, undecoded, for the attempt log
    assert (await transport.post(receiver.url("/ok"), HEADERS, BODY)).outcome == "success"
    received_headers, _ = receiver.received[0]
    assert received_headers["accept-encoding"] == "identity"


async def test_204_is_success(transport: AiohttpTransport | H1Transport, receiver: Receiver) -> None:
    result = await transport.post(receiver.url("/204"), HEADERS, BODY)
    assert (result.outcome, result.status_code, result.response_excerpt) == ("success", 204, "")


async def test_cookies_are_never_replayed(
    transport: AiohttpTransport | H1Transport, receiver: Receiver
) -> None:
    for _ in range(2):
        # a host name, not 127.0.0.1: cookie jars ignore cookies from IP hosts anyway
        url = f"http://localhost:{receiver.port}/cookie"
        assert (await transport.post(url, HEADERS, BODY)).outcome == "success"
    assert all("cookie" not in headers for headers, _ in receiver.received)


async def test_connections_are_reused(transport: AiohttpTransport | H1Transport, receiver: Receiver) -> None:
    for _ in range(20):
        assert (await transport.post(receiver.url("/ok"), HEADERS, BODY)).outcome == "success"
    assert receiver.hits["/ok"] == 20


@pytest.mark.parametrize("code", [500, 502, 400, 401, 404, 408, 422])
async def test_other_statuses_retry(
    transport: AiohttpTransport | H1Transport, receiver: Receiver, code: int
) -> None:
    result = await transport.post(receiver.url(f"/status/{code}"), HEADERS, BODY)
    assert result.outcome == "retry"
    assert result.status_code == code
    assert result.error == f"http_{code}"
    assert result.response_excerpt == f"status {code}"
    assert result.retry_after is None


async def test_429_retry_after_seconds(transport: AiohttpTransport | H1Transport, receiver: Receiver) -> None:
    result = await transport.post(receiver.url("/status/429?retry_after=7"), HEADERS, BODY)
    assert (result.outcome, result.status_code, result.retry_after) == ("retry", 429, 7.0)


async def test_503_retry_after_http_date(
    transport: AiohttpTransport | H1Transport, receiver: Receiver
) -> None:
    result = await transport.post(receiver.url("/status/503?retry_after_in=120"), HEADERS, BODY)
    assert result.outcome == "retry"
    assert result.retry_after is not None
    assert 115 <= result.retry_after <= 121


async def test_retry_after_only_counts_on_429_and_503(
    transport: AiohttpTransport | H1Transport, receiver: Receiver
) -> None:
    result = await transport.post(receiver.url("/status/500?retry_after=7"), HEADERS, BODY)
    assert result.retry_after is None


async def test_retry_after_is_capped(client: Client, receiver: Receiver) -> None:
    t = client(allow_private_networks=True, max_retry_after_seconds=60)
    try:
        result = await t.post(receiver.url("/status/429?retry_after=86400"), HEADERS, BODY)
    finally:
        await t.close()
    assert result.retry_after == 60


async def test_410_is_gone(transport: AiohttpTransport | H1Transport, receiver: Receiver) -> None:
    result = await transport.post(receiver.url("/status/410"), HEADERS, BODY)
    assert (result.outcome, result.status_code, result.error) == ("gone", 410, "http_410")


@pytest.mark.parametrize("code", [301, 302, 307, 308])
async def test_redirects_are_not_followed(
    transport: AiohttpTransport | H1Transport, receiver: Receiver, code: int
) -> None:
    result = await transport.post(receiver.url(f"/status/{code}"), HEADERS, BODY)
    assert (result.outcome, result.status_code, result.error) == ("retry", code, "redirect_not_followed")
    assert "/ok" not in receiver.hits  # the Location was never visited


async def test_huge_response_body_is_capped(
    transport: AiohttpTransport | H1Transport, receiver: Receiver
) -> None:
    started = time.perf_counter()
    result = await transport.post(receiver.url("/huge"), HEADERS, BODY)
    assert result.status_code == 500
    assert result.response_excerpt == "x" * 64
    assert time.perf_counter() - started < 2.0
    # the half-read connection was dropped, not reused: the next request still works
    assert (await transport.post(receiver.url("/ok"), HEADERS, BODY)).outcome == "success"


async def test_undecodable_body_is_replaced_not_fatal(
    transport: AiohttpTransport | H1Transport, receiver: Receiver
) -> None:
    result = await transport.post(receiver.url("/not-utf8"), HEADERS, BODY)
    assert result.status_code == 400
    assert result.response_excerpt.startswith("bad ")
    assert "\ufffd" in result.response_excerpt


async def test_hanging_receiver_times_out_without_blocking_others(
    client: Client, receiver: Receiver, other_receiver: Receiver
) -> None:
    t = client(timeout_seconds=1.0, connect_timeout_seconds=0.5, max_per_host=2, allow_private_networks=True)
    try:
        started = time.perf_counter()
        hung = [asyncio.create_task(t.post(receiver.url("/hang"), HEADERS, BODY)) for _ in range(4)]
        await asyncio.sleep(0.05)  # let the hung requests occupy their host's connections
        healthy_started = time.perf_counter()
        healthy = await t.post(other_receiver.url("/ok"), HEADERS, BODY)
        healthy_elapsed = time.perf_counter() - healthy_started
        results = await asyncio.gather(*hung)
        total = time.perf_counter() - started
    finally:
        await t.close()
    assert healthy.outcome == "success"
    assert healthy_elapsed < 0.4  # far below the 0.5 s a queued request would wait
    errors = sorted(r.error or "" for r in results)
    # two hold the per-host connections until the total timeout; two queue and give up at connect
    assert errors == ["connect_timeout", "connect_timeout", "timeout", "timeout"]
    assert all(r.outcome == "retry" and r.status_code is None for r in results)
    for r in results:
        limit = 500 if r.error == "connect_timeout" else 1000
        assert limit * 0.9 <= r.duration_ms <= limit + 400
    assert total < 2.0
    assert receiver.hits["/hang"] == 2


async def test_connection_refused_is_a_retry(transport: AiohttpTransport | H1Transport) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = await transport.post(f"http://127.0.0.1:{port}/hook", HEADERS, BODY)
    assert result.outcome == "retry"
    assert result.status_code is None
    assert result.error is not None and result.error.startswith("connect_error:")


async def test_dns_failure_is_a_retry(transport: AiohttpTransport | H1Transport) -> None:
    result = await transport.post("http://no-such-host.invalid/hook", HEADERS, BODY)
    assert result.outcome == "retry"
    assert result.error is not None and result.error.startswith("dns_error:")


async def test_tls_to_a_plain_http_port_is_a_retry(
    transport: AiohttpTransport | H1Transport, receiver: Receiver
) -> None:
    result = await transport.post(f"https://127.0.0.1:{receiver.port}/ok", HEADERS, BODY)
    assert result.outcome == "retry"
    assert result.error is not None


# --- SSRF at dial time -----------------------------------------------------------------------------


async def test_private_literal_is_refused_before_connecting(client: Client, receiver: Receiver) -> None:
    t = client(allow_private_networks=False)
    try:
        result = await t.post(receiver.url("/ok"), HEADERS, BODY)
    finally:
        await t.close()
    assert result.outcome == "refused"
    assert result.error is not None and result.error.startswith("refused:")
    assert receiver.hits == {}


async def test_localhost_name_is_refused(client: Client, receiver: Receiver) -> None:
    t = client(allow_private_networks=False)
    try:
        result = await t.post(f"http://localhost:{receiver.port}/ok", HEADERS, BODY)
    finally:
        await t.close()
    assert result.outcome == "refused"
    assert receiver.hits == {}


class _RebindingDNS(AbstractResolver):
    """Answers 127.0.0.1 for any name: a DNS-rebinding attacker's server."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(hostname=host, host="127.0.0.1", port=port, family=socket.AF_INET, proto=0, flags=0)
        ]

    async def close(self) -> None:
        pass


async def test_name_resolving_to_loopback_is_refused_at_connect_time(
    client: Client, receiver: Receiver
) -> None:
    url = f"http://hooks.attacker.test:{receiver.port}/ok"
    t = client(allow_private_networks=False, resolver=_RebindingDNS())
    try:
        result = await t.post(url, HEADERS, BODY)
    finally:
        await t.close()
    assert result.outcome == "refused"
    assert "127.0.0.1" in (result.error or "")
    assert receiver.hits == {}

    # the same resolver with private networks allowed really connects to what it answered
    t = client(allow_private_networks=True, resolver=_RebindingDNS())
    try:
        assert (await t.post(url, HEADERS, BODY)).outcome == "success"
    finally:
        await t.close()
    assert receiver.hits == {"/ok": 1}


async def test_machine_hostname_resolving_to_loopback_is_refused(client: Client, receiver: Receiver) -> None:
    """Real DNS (the hosts file): a name other than `localhost` that resolves to loopback."""
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        pytest.skip("this machine's hostname does not resolve")
    if not address.startswith("127."):
        pytest.skip("this machine's hostname does not resolve to loopback")
    t = client(allow_private_networks=False)
    try:
        result = await t.post(f"http://{socket.gethostname()}:{receiver.port}/ok", HEADERS, BODY)
    finally:
        await t.close()
    assert result.outcome == "refused"
    assert receiver.hits == {}


# --- construction and the mock ----------------------------------------------------------------------


async def test_from_settings(client: Client) -> None:
    settings = Settings(
        webhook_timeout_seconds=3,
        webhook_connect_timeout_seconds=1,
        webhook_max_concurrency=10,
        webhook_max_per_host=2,
        webhook_response_body_cap=99,
        webhook_allow_private_networks=True,
        webhook_max_retry_after_seconds=42,
    )
    t = client.from_settings(settings)
    assert (t.timeout_seconds, t.connect_timeout_seconds, t.max_connections, t.max_per_host) == (3, 1, 10, 2)
    assert (t.body_cap, t.allow_private_networks, t.max_retry_after_seconds) == (99, True, 42)
    await t.close()  # closing an unused transport is fine


def test_classify_status() -> None:
    assert classify_status(200) == ("success", None)
    assert classify_status(299) == ("success", None)
    assert classify_status(410) == ("gone", "http_410")
    assert classify_status(304) == ("retry", "redirect_not_followed")
    assert classify_status(404) == ("retry", "http_404")
    assert classify_status(100) == ("retry", "http_100")


async def test_mock_transport_classifies_like_the_real_one() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        if url.endswith("/slow"):
            return 429, {"retry-after": "3"}, b"later"
        return 200, {}, b"ok"

    mock = MockTransport(handler)
    ok = await mock.post("https://example.com/ok", HEADERS, BODY)
    slow = await mock.post("https://example.com/slow", HEADERS, BODY)
    assert (ok.outcome, ok.status_code, ok.response_excerpt) == ("success", 200, "ok")
    assert (slow.outcome, slow.retry_after) == ("retry", 3.0)
    assert [r.url for r in mock.requests] == ["https://example.com/ok", "https://example.com/slow"]
    assert mock.requests[0].body == BODY
    await mock.close()
    assert mock.closed


async def test_mock_transport_sync_handler_results_and_url_checks() -> None:
    timeout = AttemptResult(None, "timeout", 15000.0, None, "", "retry")
    mock = MockTransport(lambda url, headers, body: timeout, check_urls=True)
    assert await mock.post("https://example.com/", HEADERS, BODY) is timeout
    refused = await mock.post("http://169.254.169.254/", HEADERS, BODY)
    assert refused.outcome == "refused"


async def test_garbage_response_error_never_contains_the_url(client: Client) -> None:
    """Webhook URLs often carry a token in the query; the attempt log must not copy it."""

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = client(timeout_seconds=2.0, connect_timeout_seconds=1.0, allow_private_networks=True)
    try:
        result = await transport.post(f"http://127.0.0.1:{port}/hook?token=s3cr3t-value", {}, b"{}")
    finally:
        await transport.close()
        server.close()
        await server.wait_closed()
    assert result.outcome == "retry" and result.error is not None
    assert result.error.startswith("protocol_error")
    assert "s3cr3t-value" not in result.error and "127.0.0.1" not in result.error
