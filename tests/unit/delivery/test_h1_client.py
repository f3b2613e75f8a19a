"""`H1Transport` against scripted raw-socket receivers: the parts of HTTP/1.1 a hand-written
client can get wrong (keep-alive, stale connections, interim answers, framing, limits, TLS).

`test_http_sender.py` runs the behaviour both transports share; this file is the H1 client's own."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.delivery.h1 import H1Transport, _head, _target

BODY = b'{"event":"job.completed"}'


HEADERS = {"content-type": "application/json", "webhook-id": "msg_1"}
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

Script = Callable[["Peer", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Peer:
    """A raw receiver: each connection runs `script`; requests and connections are counted."""

    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    open_now: int = 0
    most_open: int = 0
    closed: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str = "/hook", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length)
    return head + body


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Peer]]]:
    servers: list[asyncio.Server] = []
    peers: list[Peer] = []

    async def start(script: Script, tls: ssl.SSLContext | None = None) -> Peer:
        peer = Peer()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer.connections += 1
            peer.open_now += 1
            peer.most_open = max(peer.most_open, peer.open_now)
            try:
                await script(peer, reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                peer.open_now -= 1
                peer.closed += 1
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
        peer.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        peer.release.set()
    for server in servers:
        server.close()


def answering(*answers: bytes, then_close: bool = False) -> Script:
    """Answer the receiver's n-th request with the n-th of `answers` (the last one repeats)."""

    async def script(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            peer.requests.append(request)
            writer.write(answers[min(len(peer.requests) - 1, len(answers) - 1)])
            await writer.drain()
            if then_close:
                return

    return script


@pytest.fixture
async def client() -> AsyncIterator[H1Transport]:
    t = H1Transport(
        timeout_seconds=3.0, connect_timeout_seconds=1.0, body_cap=16, allow_private_networks=True
    )
    yield t
    await t.close()


async def test_one_connection_carries_many_requests(
    client: H1Transport, serve: Callable[..., Awaitable[Peer]]
) -> None:
    peer = await serve(answering(OK))
    for _ in range(5):
        result = await client.post(peer.url(), HEADERS, BODY)
        assert (result.outcome, result.status_code, result.response_excerpt) == ("success", 200, "ok")
    assert peer.connections == 1 and len(peer.requests) == 5
    head = peer.requests[0].split(b"\r\n\r\n")[0].decode()
    assert head.startswith("POST /hook HTTP/1.1\r\n")
    lines = {line.split(": ", 1)[0].lower(): line.split(": ", 1)[1] for line in head.split("\r\n")[1:]}
    assert lines["host"] == f"127.0.0.1:{peer.port}"
    assert lines["content-length"] == str(len(BODY))
    assert lines["webhook-id"] == "msg_1" and lines["accept-encoding"] == "identity"
    assert peer.requests[0].endswith(BODY)


async def test_a_connection_the_receiver_closed_while_idle_is_not_reused(
    client: H1Transport, serve: Callable[..., Awaitable[Peer]]
) -> None:
    """The receiver closes after each answer without saying `Connection: close`."""
    peer = await serve(answering(OK, then_close=True))
    for _ in range(3):
        result = await client.post(peer.url(), HEADERS, BODY)
        assert result.outcome == "success", result
    assert len(peer.requests) == 3 and peer.connections == 3


async def test_a_stale_pooled_connection_is_retried_once_on_a_new_one(
    client: H1Transport, serve: Callable[..., Awaitable[Peer]]
) -> None:
    """The second request goes out on the pooled connection just as the receiver drops it,
    before we have seen the close: it is sent again on a fresh connection, once."""

    async def script(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        assert request is not None
        peer.requests.append(request)
        if peer.connections == 1:
            writer.write(OK)
            await writer.drain()
            await read_request(reader)  # the reused connection's request: drop it unanswered
            return
        writer.write(OK)
        await writer.drain()

    peer = await serve(script)
    assert (await client.post(peer.url(), HEADERS, BODY)).outcome == "success"
    again = await client.post(peer.url(), HEADERS, BODY)
    assert again.outcome == "success", again
    assert peer.connections == 2


async def test_a_fresh_connection_dropped_without_an_answer_is_not_retried(
    client: H1Transport, serve: Callable[..., Awaitable[Peer]]
) -> None:
    async def script(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        assert request is not None
        peer.requests.append(request)

    peer = await serve(script)
    result = await client.post(peer.url(), HEADERS, BODY)
    assert (result.outcome, result.status_code) == ("retry", None)
    assert result.error == "disconnected: server closed the connection without a response"
    assert len(peer.requests) == 1


async def test_interim_answers_are_skipped(
    client: H1Transport, serve: Callable[..., Awaitable[Peer]]
) -> None:
    peer = await serve(
        answering(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
    )
    result = await client.post(peer.url(), HEADERS, BODY)
    assert (result.outcome, result.status_code) == ("success", 202)


@pytest.mark.parametrize(
    ("answer", "excerpt"),
    [
        (b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", "abcde"),
        (b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\nuntil the end", "until the end"),
        (b"HTTP/1.0 500 Oops\r\n\r\nold style", "old style"),
    ],
    ids=["chunked", "close-delimited", "http-1.0"],
)
async def test_bodies_in_every_framing_are_read(
    client: H1Transport, serve: Callable[..., Awaitable[Peer]], answer: bytes, excerpt: str
) -> None:
    peer = await serve(answering(answer, then_close=True))
    result = await client.post(peer.url(), HEADERS, BODY)
    assert (result.status_code, result.response_excerpt, result.error) == (500, excerpt, "http_500")
    # and the next attempt opens a new connection rather than reuse a finished one
    assert (await client.post(peer.url(), HEADERS, BODY)).status_code == 500
    assert peer.connections == 2


async def test_a_body_past_the_cap_is_cut_and_its_connection_dropped(
    client: H1Transport, serve: Callable[..., Awaitable[Peer]]
) -> None:
    long = b"x" * 1000
    peer = await serve(answering(b"HTTP/1.1 400 Bad\r\nContent-Length: 1000\r\n\r\n" + long, OK))
    first = await client.post(peer.url(), HEADERS, BODY)
    assert (first.status_code, first.response_excerpt) == (400, "x" * 16)
    second = await client.post(peer.url(), HEADERS, BODY)
    assert second.status_code == 200
    assert peer.connections == 2


async def test_retry_after_is_read_from_a_raw_answer(
    client: H1Transport, serve: Callable[..., Awaitable[Peer]]
) -> None:
    peer = await serve(answering(b"HTTP/1.1 429 Slow down\r\nRETRY-AFTER: 7\r\nContent-Length: 0\r\n\r\n"))
    result = await client.post(peer.url(), HEADERS, BODY)
    assert (result.outcome, result.retry_after) == ("retry", 7.0)


async def test_per_host_limit_holds_and_queued_requests_get_their_turn(
    serve: Callable[..., Awaitable[Peer]],
) -> None:
    async def slow(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            peer.requests.append(request)
            await asyncio.sleep(0.05)
            writer.write(OK)
            await writer.drain()

    peer = await serve(slow)
    t = H1Transport(connect_timeout_seconds=2.0, max_per_host=2, allow_private_networks=True)
    try:
        results = await asyncio.gather(*(t.post(peer.url(), HEADERS, BODY) for _ in range(8)))
    finally:
        await t.close()
    assert [r.outcome for r in results] == ["success"] * 8
    assert peer.most_open == 2 and len(peer.requests) == 8


async def test_the_global_limit_holds_across_hosts(serve: Callable[..., Awaitable[Peer]]) -> None:
    async def hold(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            peer.requests.append(request)
            await peer.release.wait()
            writer.write(OK)
            await writer.drain()

    a, b = await serve(hold), await serve(hold)
    t = H1Transport(
        connect_timeout_seconds=2.0, max_connections=3, max_per_host=3, allow_private_networks=True
    )
    try:
        tasks = [asyncio.create_task(t.post(p.url(), HEADERS, BODY)) for p in (a, b, a, b, a, b)]
        await asyncio.sleep(0.2)
        assert a.open_now + b.open_now == 3
        a.release.set()
        b.release.set()
        results = await asyncio.gather(*tasks)
    finally:
        await t.close()
    assert [r.outcome for r in results] == ["success"] * 6


async def test_a_cancelled_attempt_frees_its_connection_slot(serve: Callable[..., Awaitable[Peer]]) -> None:
    async def first_hangs(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            peer.requests.append(request)
            if len(peer.requests) == 1:
                await peer.release.wait()
                return
            writer.write(OK)
            await writer.drain()

    peer = await serve(first_hangs)
    t = H1Transport(connect_timeout_seconds=1.0, max_per_host=1, allow_private_networks=True)
    try:
        hung = asyncio.create_task(t.post(peer.url(), HEADERS, BODY))
        await asyncio.sleep(0.1)
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        result = await t.post(peer.url(), HEADERS, BODY)
    finally:
        await t.close()
    assert result.outcome == "success", result
    assert peer.connections == 2


async def test_idle_connections_are_closed_after_the_keepalive_time(
    serve: Callable[..., Awaitable[Peer]],
) -> None:
    peer = await serve(answering(OK))
    t = H1Transport(allow_private_networks=True, keepalive_seconds=0.2)
    try:
        assert (await t.post(peer.url(), HEADERS, BODY)).outcome == "success"
        for _ in range(50):
            if peer.closed:
                break
            await asyncio.sleep(0.05)
        assert peer.closed == 1
        assert (await t.post(peer.url(), HEADERS, BODY)).outcome == "success"
        assert peer.connections == 2
    finally:
        await t.close()


async def test_close_closes_pooled_connections(serve: Callable[..., Awaitable[Peer]]) -> None:
    peer = await serve(answering(OK))
    t = H1Transport(allow_private_networks=True)
    assert (await t.post(peer.url(), HEADERS, BODY)).outcome == "success"
    await t.close()
    for _ in range(50):
        if peer.closed:
            break
        await asyncio.sleep(0.02)
    assert peer.closed == 1
    after = await t.post(peer.url(), HEADERS, BODY)
    assert after.outcome == "retry" and after.error and "closed" in after.error


def test_request_targets() -> None:
    t = _target("https://Hooks.Example.com/a path/ü?q=1&x=ä#frag")
    assert t.key == ("https", "hooks.example.com", 443) and t.tls and not t.literal
    assert t.head_start == "POST /a%20path/%C3%BC?q=1&x=%C3%A4 HTTP/1.1\r\nHost: hooks.example.com\r\n"
    v6 = _target("http://[::1]:8080")
    assert (v6.host, v6.port, v6.literal) == ("::1", 8080, True)
    assert v6.head_start.endswith("Host: [::1]:8080\r\n") and v6.head_start.startswith("POST / HTTP/1.1")
    idn = _target("http://bücher.example/x%2Fy")
    assert idn.host == "xn--bcher-kva.example" and "/x%2Fy " in idn.head_start
    with pytest.raises(ValueError):
        _target("ftp://example.com/")


def test_the_head_never_splits_a_header() -> None:
    t = _target("http://example.com/")
    head = _head(t, {"webhook-id": "msg_1", "Host": "evil", "content-length": "1"}, 5).decode()
    assert head.count("Host:") == 1 and "evil" not in head and head.endswith("Content-Length: 5\r\n\r\n")
    for bad in ({"x": "a\r\nInjected: 1"}, {"x\n": "a"}, {"x": "a\x00"}):
        with pytest.raises(ValueError):
            _head(t, bad, 0)


# --- TLS ---------------------------------------------------------------------------------------------


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


async def test_tls_verifies_the_certificate(tmp_path: Path, serve: Callable[..., Awaitable[Peer]]) -> None:
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    peer = await serve(answering(OK), tls=server_ctx)

    untrusting = H1Transport(connect_timeout_seconds=2.0, allow_private_networks=True)
    try:
        refused = await untrusting.post(peer.url(scheme="https"), HEADERS, BODY)
    finally:
        await untrusting.close()
    assert refused.outcome == "retry" and refused.error and refused.error.startswith("tls_error:")
    assert "CERTIFICATE_VERIFY_FAILED" in refused.error
    assert peer.requests == []

    trusting_ctx = ssl.create_default_context(cafile=str(cert))
    trusting = H1Transport(connect_timeout_seconds=2.0, allow_private_networks=True, ssl_context=trusting_ctx)
    try:
        ok = await trusting.post(peer.url(scheme="https"), HEADERS, BODY)
        again = await trusting.post(peer.url(scheme="https"), HEADERS, BODY)
    finally:
        await trusting.close()
    assert (ok.outcome, ok.response_excerpt, again.outcome) == ("success", "ok", "success")
    # the failed handshake never reached the handler; both requests shared one kept-alive connection
    assert peer.connections == 1 and len(peer.requests) == 2
