"""Huge, deep, malformed and mis-labelled requests against a real `gateway serve` (workers on).

Each one must get a clear 4xx in the error envelope, or a correct result (a job that reaches a
terminal status with the right verdict); never a 5xx, a crash or a job left stuck. After each, the
process must still be alive and /healthz must answer.
"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.acceptance.harness import Server
from tests.hostile.conftest import assert_alive, auth, running

MAX_BODY = 1024 * 1024
TERMINAL = {"inbound_blocked", "outbound_blocked", "completed", "failed", "expired", "cancelled"}
ROUTES = ["/v1/jobs", "/v1/filter", "/v1/policies/hostile", "/v1/jobs/{job}/response"]
PROSE = (
    "The quarterly report covers revenue, churn and the hiring plan for the next two quarters. "
    "Reach the finance team at {email} for the spreadsheet; the call is on Thursday at ten. "
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(
        tmp_path_factory.mktemp("huge"),
        GATEWAY_MAX_BODY_BYTES=str(MAX_BODY),
        GATEWAY_WEBHOOK_ALLOW_PRIVATE_NETWORKS="false",
    ) as srv:
        yield srv
        assert_alive(srv)


@pytest.fixture(scope="module")
def api(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base, headers=auth(server.api_key), timeout=30) as client:
        yield client


@pytest.fixture(autouse=True)
def _still_alive_after_each(server: Server) -> Iterator[None]:
    yield
    assert_alive(server)


@pytest.fixture(scope="module")
def waiting_job(api: httpx.Client) -> str:
    """A separate-mode job waiting for its response, for POST /v1/jobs/{id}/response."""
    job_id = _create(api, {"message_input": "hello there"})
    _wait(api, job_id, {"awaiting_response"})
    return job_id


# ---- helpers ------------------------------------------------------------------------------------


def _create(api: httpx.Client, body: dict[str, Any]) -> str:
    response = api.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def _wait(api: httpx.Client, job_id: str, statuses: set[str], within: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        job: dict[str, Any] = api.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        assert time.monotonic() < deadline, f"job stuck in {job['status']}: {job}"
        time.sleep(0.05)


def assert_envelope(response: httpx.Response, *statuses: int) -> dict[str, Any]:
    """A 4xx in the one error envelope (and one of `statuses`, when given)."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    if statuses:
        assert response.status_code in statuses, (response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in response.text
    return error


def _path(route: str, job: str) -> str:
    return route.replace("{job}", job)


def _send(api: httpx.Client, route: str, job: str, content: bytes, **headers: str) -> httpx.Response:
    method = "PUT" if route.startswith("/v1/policies") else "POST"
    return api.request(
        method, _path(route, job), content=content, headers={"Content-Type": "application/json", **headers}
    )


def _raw(server: Server, request: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes; return what comes back until the response is complete or the peer closes."""
    out = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as conn:
        with contextlib.suppress(OSError):  # the server may close mid-send: what it said still counts
            conn.sendall(request)
        with contextlib.suppress(OSError):
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                out += chunk
                head, sep, rest = out.partition(b"\r\n\r\n")
                if sep:
                    length = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
                    if length and len(rest) >= int(length[0].split(b":")[1]):
                        break
    return out


def _status_of(raw: bytes) -> int | None:
    if not raw.startswith(b"HTTP/1.1 "):
        return None
    return int(raw[9:12])


# ---- deep and huge JSON -------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="100k-arrays"),
        pytest.param(b'{"a":' * 100_000 + b"1" + b"}" * 100_000, id="100k-objects"),
        pytest.param(b'{"message_input": "x", "metadata": ' + b"[" * 100_000, id="100k-unclosed"),
        pytest.param(b'{"text": "x", "direction": "inbound", "policy": ' + b"[" * 2000 + b"]" * 2000 + b"}",
                     id="2k-in-a-field"),
    ],
)  # fmt: skip
def test_deep_json_is_a_clear_4xx(api: httpx.Client, waiting_job: str, route: str, body: bytes) -> None:
    assert_envelope(_send(api, route, waiting_job, body), 400, 422)


@pytest.mark.parametrize(
    "depth",
    [
        pytest.param(200, id="200"),
        pytest.param(300, id="300"),
        pytest.param(1000, id="1000"),
    ],
)
def test_deeply_nested_metadata_is_stored_or_refused_never_500(api: httpx.Client, depth: int) -> None:
    """Nesting orjson still parses (it stops at 1024) must not reach code that cannot serialise it."""
    metadata = b"[" * depth + b"]" * depth
    response = _send(api, "/v1/jobs", "", b'{"message_input": "x", "metadata": {"deep": ' + metadata + b"}}")
    if response.status_code == 202:
        job = _wait(api, response.json()["job_id"], {"awaiting_response"} | TERMINAL)
        assert json.dumps(job["metadata"]["deep"]).count("[") == depth
    else:
        error = assert_envelope(response, 422)
        assert any(str(d.get("field", "")).startswith("metadata") for d in error["details"]), error


def _filler(size: int) -> str:
    """ASCII prose of exactly `size` characters with an e-mail address every sentence."""
    chunks: list[str] = []
    total = 0
    n = 0
    while total < size:
        piece = PROSE.format(email=f"finance{n}@example.com")
        chunks.append(piece)
        total += len(piece)
        n += 1
    return "".join(chunks)[:size]


def _body_of_size(size: int) -> bytes:
    """A combined-mode create body of exactly `size` bytes."""
    empty = json.dumps({"message_input": "", "message_output": "ok"}).encode()
    body = json.dumps({"message_input": _filler(size - len(empty)), "message_output": "ok"}).encode()
    assert len(body) == size
    return body


def test_body_just_under_the_limit_is_accepted_and_filtered(api: httpx.Client) -> None:
    body = _body_of_size(MAX_BODY)
    response = _send(api, "/v1/jobs", "", body)
    assert response.status_code == 202, response.text[:500]
    job = _wait(api, response.json()["job_id"], TERMINAL, within=60)
    assert job["status"] == "completed", job["error"]
    assert job["inbound"]["verdict"] == "redacted"
    message = job["inbound"]["message"]
    assert "@example.com" not in message and "[EMAIL_ADDRESS]" in message


@pytest.mark.parametrize("route", ROUTES)
def test_body_over_the_limit_is_413(api: httpx.Client, waiting_job: str, route: str) -> None:
    error = assert_envelope(_send(api, route, waiting_job, _body_of_size(MAX_BODY + 1)), 413)
    assert error["code"] == "payload_too_large"


def test_chunked_body_over_the_limit_is_413(api: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"message_input": "'
        for _ in range(MAX_BODY // 65536 + 2):
            yield b"a" * 65536
        yield b'"}'

    response = api.post("/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert assert_envelope(response, 413)["code"] == "payload_too_large"


def test_bad_content_length_is_a_clear_4xx(server: Server) -> None:
    key = server.api_key.encode()
    for declared in (b"abc", b"-1", b"99999999999999999999999"):
        raw = _raw(
            server,
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + declared + b"\r\n\r\n{}",
        )
        status = _status_of(raw)
        assert status is not None and 400 <= status < 500, (declared, raw[:300])


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n",
        b"GET /he\x00althz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"NOT-HTTP\r\n\r\n",
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello",
    ],
    ids=["control-byte-in-header", "nul-in-path", "no-request-line", "two-content-lengths"],
)
def test_requests_the_parser_refuses_get_the_error_envelope(server: Server, request_bytes: bytes) -> None:
    """Not uvicorn's plain-text 400: the same JSON envelope as every other error, and the connection
    closed (its framing cannot be trusted). The server keeps serving."""
    raw = _raw(server, request_bytes)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert _status_of(raw) == 400, raw[:300]
    assert b"content-type: application/json" in head.lower()
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_argument" and error["message"] and error["details"]
    assert _status_of(_raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 200


def test_expect_100_continue_then_pipelined_requests_on_one_connection(server: Server) -> None:
    """The server writes each response's head and body together (gateway/http_protocol.py); an
    interim `100 Continue` must still go out at once, and pipelined responses come back whole, in order."""
    key = server.api_key.encode()
    body = b'{"message_input": "hello", "message_output": "hi"}'
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(head + b"Expect: 100-continue\r\n\r\n")
        interim = conn.recv(100)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n"), interim  # sent before we send the body
        conn.sendall(body + (head + b"\r\n" + body) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        out = b""
        deadline = time.monotonic() + 10
        while out.count(b"HTTP/1.1 ") < 3 or not out.endswith(b'{"status":"ok"}'):
            assert time.monotonic() < deadline, out
            chunk = conn.recv(65536)
            assert chunk, out
            out += chunk
    statuses = [int(part[:3]) for part in out.split(b"HTTP/1.1 ")[1:]]
    assert statuses == [202, 202, 200], out


# ---- 100k-character messages --------------------------------------------------------------------


def _long_message(size: int, emails: int) -> str:
    """`size` characters of prose with `emails` addresses, bidi overrides and zero-width spaces."""
    unit = size // emails
    parts: list[str] = []
    for n in range(emails):
        piece = f"note {n}: write to person{n}@example.com \u202e\u200b about it. "
        parts.append((piece + "lorem ipsum dolor sit amet " * (unit // 27 + 1))[:unit])
    return "".join(parts).ljust(size, ".")


def _probe(server: Server, stop: threading.Event, out: list[float]) -> None:
    """Time small requests, one after another, until `stop`: what other clients see meanwhile."""
    with httpx.Client(base_url=server.base, headers=auth(server.api_key), timeout=10) as client:
        while not stop.is_set():
            for path in ("/healthz", "/v1/jobs?limit=1", "/api/v1/health/queues"):
                started = time.perf_counter()
                response = client.get(path)
                out.append(time.perf_counter() - started)
                assert response.status_code == 200
            time.sleep(0.005)


def test_100k_character_messages_are_filtered_and_the_api_stays_responsive(
    server: Server, api: httpx.Client
) -> None:
    text = _long_message(100_000, emails=100)
    assert len(text) == 100_000
    latencies: list[float] = []
    stop = threading.Event()
    probe = threading.Thread(target=_probe, args=(server, stop, latencies), daemon=True)
    probe.start()
    try:
        while not latencies:
            time.sleep(0.001)
        # Several at once, so the workers are busy filtering while the probe runs.
        ids = [_create(api, {"message_input": text, "message_output": text}) for _ in range(16)]
        filtered = api.post("/v1/filter", json={"direction": "inbound", "text": text})
        jobs = [_wait(api, job_id, TERMINAL, within=60) for job_id in ids]
    finally:
        stop.set()
        probe.join(timeout=15)
    for job in jobs:
        assert job["status"] == "completed", job
        for side in ("inbound", "outbound"):
            verdict = job[side]
            assert verdict["verdict"] == "redacted", verdict["matches"][:5]
            assert "@example.com" not in verdict["message"]
            assert verdict["message"].count("[EMAIL_ADDRESS]") == 100
        assert "\u202e" not in job["inbound"]["message"]  # the default policy strips bidi inbound
    assert filtered.status_code == 200
    assert filtered.json()["message"] == jobs[0]["inbound"]["message"]
    assert len(latencies) >= 10, latencies
    worst = max(latencies)
    assert statistics.median(latencies) < 0.05 and worst < 0.1, (statistics.median(latencies), worst)


def _best_scan_seconds(text: str) -> float:
    from gateway.settings import REPO_ROOT
    from rules import load_policy_file

    # CPU time of this thread, not wall time: other processes on a shared CI machine must not make
    # a linear scan look slow (the bound is about the scan's own work).
    policy = load_policy_file(REPO_ROOT / "config" / "policies" / "default.toml")
    best = float("inf")
    for _ in range(5):
        started = time.thread_time()
        policy.scan(text, "inbound")
        best = min(best, time.thread_time() - started)
    return best


@pytest.mark.parametrize("char", ["\u200b", "\u202e", "\U000e0041"], ids=["zero-width", "bidi", "tag"])
def test_scan_time_grows_linearly_with_many_matches(char: str) -> None:
    small = _best_scan_seconds(("x" + char) * 2_500)
    large = _best_scan_seconds(("x" + char) * 10_000)  # 4x the text: a linear scan takes ~4x the time
    # The ratio is the check (a quadratic scan gives 16); the absolute bound only catches a scan
    # that is slow per match, with room for a slow machine (a day with heavy CPU steal took 0.13 s
    # here, at ratios of 4.0 to 6.3 between runs).
    assert large < 0.5 and large / max(small, 1e-3) < 9, (small, large)


# ---- many keys, NUL and lone surrogates ---------------------------------------------------------


def test_10k_metadata_keys_is_a_clear_422(api: httpx.Client) -> None:
    metadata = {f"k{i}": i for i in range(10_000)}
    error = assert_envelope(api.post("/v1/jobs", json={"message_input": "x", "metadata": metadata}), 422)
    assert any(d.get("field") == "metadata" for d in error["details"]), error


def test_10k_metadata_keys_within_the_size_limit_round_trip(api: httpx.Client) -> None:
    """Many keys are fine as long as the JSON fits: the job echoes them all back."""
    metadata = {chr(0x4E00 + i): 0 for i in range(3000)}  # 3000 keys in ~16 KiB
    response = api.post("/v1/jobs", json={"message_input": "x", "message_output": "y", "metadata": metadata})
    if response.status_code == 422:
        assert_envelope(response, 422)
        return
    assert response.status_code == 202, response.text[:300]
    job = _wait(api, response.json()["job_id"], TERMINAL)
    assert job["metadata"] == metadata


def _encode_lax(body: Any) -> bytes:
    """JSON with lone surrogates escaped (json.dumps does that; UTF-8 itself cannot carry them)."""
    return json.dumps(body).encode()


JOB_FIELDS = ["message_input", "message", "message_output", "webhook_url", "policy", "signature_scheme"]


@pytest.mark.parametrize(
    "bad", ["\x00", "\ud800", "\udfff\ud800", "a\x00b\ud83d"], ids=["nul", "lone", "reversed", "mixed"]
)
@pytest.mark.parametrize("field", [*JOB_FIELDS, "metadata-key", "metadata-value", "metadata-nested"])
def test_nul_and_lone_surrogates_in_job_fields(api: httpx.Client, field: str, bad: str) -> None:
    body: dict[str, Any] = {"message_input": "hello", "message_output": "world"}
    if field == "message":
        del body["message_input"]
    if field.startswith("metadata"):
        body["metadata"] = {
            "metadata-key": {f"k{bad}": 1},
            "metadata-value": {"k": f"v{bad}"},
            "metadata-nested": {"k": [{"deeper": [f"v{bad}"]}]},
        }[field]
    else:
        body[field] = f"x{bad}y" if field != "webhook_url" else f"https://example.com/{bad}"
    response = api.post("/v1/jobs", content=_encode_lax(body), headers={"Content-Type": "application/json"})
    error = assert_envelope(response, 422)
    named = [str(d.get("field", "")) for d in error["details"]]
    expected = "metadata" if field.startswith("metadata") else field
    assert any(n.startswith(expected) for n in named), error


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone"])
def test_nul_and_lone_surrogates_in_response_and_policy(
    api: httpx.Client, waiting_job: str, bad: str
) -> None:
    assert_envelope(
        api.post(
            f"/v1/jobs/{waiting_job}/response",
            content=_encode_lax({"message_output": f"a{bad}b"}),
            headers={"Content-Type": "application/json"},
        ),
        422,
    )
    policies: list[dict[str, Any]] = [
        {"description": f"d{bad}"},
        {f"in{bad}bound": {}},
        {"inbound": {"packs": ["custom"], "custom": [{"id": "custom.a", "keywords": [f"k{bad}"]}]}},
        {"inbound": {"packs": ["custom"], "custom": [{"id": "custom.a", "regex": f"r{bad}"}]}},
    ]
    for policy in policies:
        response = api.put(
            "/v1/policies/hostile", content=_encode_lax(policy), headers={"Content-Type": "application/json"}
        )
        assert_envelope(response, 422)


def test_filter_takes_nul_but_refuses_lone_surrogates(api: httpx.Client) -> None:
    """Nothing is stored by /v1/filter, so a NUL is scanned (it may be what a prompt hides behind);
    a lone surrogate is not text the engine can scan, so it is a 422 naming `text`."""
    response = api.post("/v1/filter", json={"direction": "outbound", "text": "a\x00 mail jane@example.com"})
    assert response.status_code == 200, response.text
    verdict = response.json()
    assert verdict["verdict"] == "redacted" and verdict["message"] == "a\x00 mail [EMAIL_ADDRESS]"
    for direction in ("inbound", "outbound"):
        error = assert_envelope(
            api.post(
                "/v1/filter",
                content=_encode_lax({"direction": direction, "text": "a\ud800b"}),
                headers={"Content-Type": "application/json"},
            ),
            422,
        )
        assert any(d.get("field") == "text" for d in error["details"]), error


# ---- bytes that are not UTF-8, and bodies that are not JSON -------------------------------------


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\x80b"],
    ids=["ff-fe", "overlong-nul", "cesu-surrogate", "above-10ffff", "lone-continuation"],
)
def test_invalid_utf8_is_a_clear_400(api: httpx.Client, waiting_job: str, route: str, raw: bytes) -> None:
    body = b'{"message_input": "' + raw + b'", "text": "' + raw + b'", "message_output": "' + raw + b'"}'
    assert_envelope(_send(api, route, waiting_job, body), 400)


@pytest.mark.parametrize(
    ("content_type", "body", "accepted"),
    [
        ("text/plain", b'{"message_input": "hi", "message_output": "yo"}', True),
        ("application/xml", b"<job><message_input>hi</message_input></job>", False),
        ("application/x-www-form-urlencoded", b"message_input=hi&message_output=yo", False),
        ("multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name=a\r\n\r\nb', False),
        ("application/json; charset=latin-1", b'{"message_input": "caf\xe9"}', False),
        ("", b'{"message_input": "hi", "message_output": "yo"}', True),
        ("application/json", b"", False),
        ("application/json", b"null", False),
        ("application/json", b'"just a string"', False),
        ("application/json", b'{"message_input": "a"} trailing', False),
        ("application/json", b'{"message_input": NaN}', False),
        ("application/json", b'{"message_input": "a", "message_input": "b"}', True),
    ],
)  # fmt: skip
def test_wrong_content_types_and_non_json_bodies(
    api: httpx.Client, content_type: str, body: bytes, accepted: bool
) -> None:
    """The API reads JSON whatever the label says (as most JSON APIs do); what is not JSON is a 400
    or 422, what is JSON gets a correct result."""
    response = api.post("/v1/jobs", content=body, headers={"Content-Type": content_type})
    if accepted and response.status_code == 202:
        job = _wait(api, response.json()["job_id"], TERMINAL | {"awaiting_response"})
        assert job["inbound"] is not None
    else:
        assert_envelope(response, 400, 415, 422)


def test_policy_as_toml_good_and_bad(api: httpx.Client) -> None:
    toml = b'[inbound]\npacks = ["pii"]\n[outbound]\npacks = ["pii"]\n'
    response = api.put("/v1/policies/toml-ok", content=toml, headers={"Content-Type": "application/toml"})
    assert response.status_code == 200, response.text
    for bad in (b"[inbound\npacks = 1", b"\xff\xfe", b'description = "a\\u0000b"', b"[[[[[[[[[["):
        response = api.put("/v1/policies/toml-bad", content=bad, headers={"Content-Type": "application/toml"})
        assert_envelope(response, 400, 422)


# ---- headers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [8 * 1024, 64 * 1024, 1024 * 1024])
def test_giant_header_gets_a_clear_answer(server: Server, size: int) -> None:
    raw = _raw(
        server,
        b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + server.api_key.encode() + b"\r\n"
        b"X-Padding: " + b"a" * size + b"\r\n\r\n",
    )
    status = _status_of(raw)
    assert status == 200 or (status is not None and 400 <= status < 500) or raw == b"", raw[:300]


def test_ten_thousand_headers_get_a_clear_answer(server: Server) -> None:
    many = b"".join(b"X-H-%d: v\r\n" % i for i in range(10_000))
    raw = _raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    status = _status_of(raw)
    assert status == 200 or (status is not None and 400 <= status < 500) or raw == b"", raw[:300]


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_header_section_is_bounded_before_it_is_buffered(server: Server) -> None:
    assert server.proc is not None
    before = _rss_mib(server.proc.pid)
    peak = before
    answered = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ")
        chunk = b"a" * (1024 * 1024)
        with contextlib.suppress(OSError):  # refused mid-way: the connection is closed under us
            for _ in range(64):
                conn.sendall(chunk)
            peak = max(peak, _rss_mib(server.proc.pid))
            conn.sendall(b"\r\n\r\n")
            answered = conn.recv(300)
    status = _status_of(answered)
    refused = answered == b"" or (status is not None and status in (400, 413, 431))
    assert refused, answered[:200]
    assert peak - before < 32, f"RSS grew by {peak - before:.0f} MiB while the head was buffered"


@pytest.mark.parametrize(
    "value",
    [
        b"Bearer " + b"A" * 200_000,
        b"Bearer \xff\xfe\xfd",
        b"Bearer caf\xe9",
        b"Bearer \x01\x02",
        b"Basic Zm9vOmJhcg==",
        b"Bearer a b c",
        b"",
        b"Bearer",
        b"bearer    ",
        b"Bearer gwk_" + b"0" * 64,
        b"Token abc",
    ],
    ids=["200k", "invalid-utf8", "latin1", "control", "basic", "spaces", "empty", "no-token", "blank",
         "unknown", "token-scheme"],
)  # fmt: skip
def test_garbage_authorization_is_a_clear_4xx(server: Server, value: bytes) -> None:
    raw = _raw(server, b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: " + value + b"\r\n\r\n")
    status = _status_of(raw)
    assert status is not None and 400 <= status < 500, raw[:300]
    if status == 401:
        head, _, body = raw.partition(b"\r\n\r\n")
        assert b"www-authenticate: bearer" in head.lower()
        assert json.loads(body)["error"]["code"] == "unauthenticated"


# ---- nothing left behind ------------------------------------------------------------------------


def test_no_job_is_left_in_a_processing_queue(api: httpx.Client) -> None:
    """Runs last in this module: every job the tests above created got through filtering."""
    deadline = time.monotonic() + 30
    while True:
        queues = api.get("/api/v1/health/queues").json()["queues"]
        busy = {q: queues[q]["depth"] for q in ("processing_inbound", "processing_outbound", "delivering")}
        if not any(busy.values()):
            return
        assert time.monotonic() < deadline, f"jobs stuck: {busy}"
        time.sleep(0.1)
