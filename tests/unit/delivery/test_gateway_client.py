"""The Python client against a scripted API (httpx.MockTransport): requests, errors, polling."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.client import TERMINAL_STATUSES, GatewayClient, GatewayError, verify_webhook
from gateway.crypto import new_webhook_secret
from gateway.delivery.signing import WebhookVerificationError, webhook_headers
from gateway.jobs import TERMINAL

Handler = Callable[[httpx.Request], httpx.Response]


def _client(handler: Handler, **kwargs: Any) -> GatewayClient:
    return GatewayClient("http://gw.test/", "gwk_secret", transport=httpx.MockTransport(handler), **kwargs)


def test_terminal_statuses_match_the_status_machine() -> None:
    assert {str(s) for s in TERMINAL} == TERMINAL_STATUSES


async def test_create_job_sends_only_given_fields_and_auth() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            202, json={"job_id": "job_1", "status": "processing_inbound", "webhook_secret": "s"}
        )

    async with _client(handler) as gw:
        job = await gw.create_job(
            "hello",
            webhook_url="https://me.example/hook",
            metadata={"k": "v"},
            expires_in_seconds=60,
            idempotency_key="idem-1",
        )
    assert job["job_id"] == "job_1"
    (req,) = seen
    assert (req.method, req.url.path) == ("POST", "/v1/jobs")
    assert req.headers["authorization"] == "Bearer gwk_secret"
    assert req.headers["idempotency-key"] == "idem-1"
    assert json.loads(req.content) == {
        "message_input": "hello",
        "webhook_url": "https://me.example/hook",
        "metadata": {"k": "v"},
        "expires_in_seconds": 60,
    }


async def test_other_calls_hit_the_documented_routes() -> None:
    seen: list[tuple[str, str, str, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode().partition("?")[0]  # as sent, still percent-encoded
        seen.append((request.method, path, request.url.query.decode(), request.content))
        return httpx.Response(200, json={"ok": True})

    async with _client(handler) as gw:
        await gw.get_job("job_1")
        await gw.submit_response("job_1", "answer")
        await gw.cancel_job("job_1")
        await gw.list_jobs(status="completed", limit=10, cursor="job_0")
        await gw.list_jobs()
        await gw.filter("text", "outbound", policy="strict")
        await gw.get_deliveries("job_1")
        await gw.get_job("../admin")
    assert seen == [
        ("GET", "/v1/jobs/job_1", "", b""),
        ("POST", "/v1/jobs/job_1/response", "", b'{"message_output":"answer"}'),
        ("DELETE", "/v1/jobs/job_1", "", b""),
        ("GET", "/v1/jobs", "status=completed&limit=10&cursor=job_0", b""),
        ("GET", "/v1/jobs", "", b""),
        ("POST", "/v1/filter", "", b'{"text":"text","direction":"outbound","policy":"strict"}'),
        ("GET", "/v1/jobs/job_1/deliveries", "", b""),
        ("GET", "/v1/jobs/..%2Fadmin", "", b""),
    ]


async def test_error_envelope_becomes_gateway_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            409,
            json={"error": {"code": "invalid_state", "message": "job is completed", "details": [{"x": 1}]}},
        )

    async with _client(handler) as gw:
        with pytest.raises(GatewayError) as info:
            await gw.submit_response("job_1", "x")
    err = info.value
    assert (err.status_code, err.code, err.message, err.details) == (
        409,
        "invalid_state",
        "job is completed",
        [{"x": 1}],
    )
    assert "invalid_state" in str(err)


async def test_non_envelope_error_is_still_a_gateway_error() -> None:
    async with _client(lambda r: httpx.Response(502, text="<html>bad gateway</html>")) as gw:
        with pytest.raises(GatewayError) as info:
            await gw.get_job("job_1")
    assert (info.value.status_code, info.value.code) == (502, "http_502")
    assert "bad gateway" in info.value.message


class _FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def test_wait_for_job_backs_off_and_returns_at_terminal_status() -> None:
    fake = _FakeTime()
    statuses = iter(["processing_inbound"] * 7 + ["completed"])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"job_id": "job_1", "status": next(statuses)})

    async with _client(handler, sleep=fake.sleep, clock=fake.clock) as gw:
        job = await gw.wait_for_job("job_1")
    assert job["status"] == "completed"
    assert fake.sleeps == [2, 4, 8, 16, 30, 30, 30]


async def test_wait_for_job_custom_statuses() -> None:
    fake = _FakeTime()
    statuses = iter(["processing_inbound", "awaiting_response"])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": next(statuses)})

    async with _client(handler, sleep=fake.sleep, clock=fake.clock) as gw:
        job = await gw.wait_for_job("job_1", statuses={"awaiting_response"})
    assert job["status"] == "awaiting_response"
    assert fake.sleeps == [2]


async def test_wait_for_job_never_sleeps_past_the_deadline() -> None:
    fake = _FakeTime()
    polls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        polls.append(fake.now)
        return httpx.Response(200, json={"status": "awaiting_response"})

    async with _client(handler, sleep=fake.sleep, clock=fake.clock) as gw:
        with pytest.raises(TimeoutError, match="awaiting_response"):
            await gw.wait_for_job("job_1", timeout=20)
    assert fake.sleeps == [2, 4, 8, 6]  # the last sleep is cut to end exactly at the deadline
    assert polls[-1] == 1020.0  # one last look at the deadline before giving up


def test_verify_webhook_reexports_signing_verify() -> None:
    secret = new_webhook_secret()
    body = b'{"event":"job.completed"}'
    headers = webhook_headers("msg_1", int(time.time()), body, secret)
    verify_webhook(body, headers, secret)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(body + b" ", headers, secret)
