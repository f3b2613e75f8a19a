"""POST /v1/jobs skips the generic request stack when it has a Content-Length within the limit
(gateway/api/fast.py). Every answer must be the one the generic stack gives: each case below is sent
both ways (a chunked body, with no Content-Length, takes the generic stack) and compared."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.api.conftest import Gateway, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _chunked(body: bytes) -> AsyncIterator[bytes]:
    async def gen() -> AsyncIterator[bytes]:
        yield body

    return gen()


async def _both(
    c: httpx.AsyncClient, body: bytes, headers: dict[str, str] | None = None
) -> list[httpx.Response]:
    headers = {"content-type": "application/json", **(headers or {})}
    fast = await c.post("/v1/jobs", content=body, headers=headers)
    generic = await c.post("/v1/jobs", content=_chunked(body), headers=headers)
    assert "content-length" not in generic.request.headers  # it really took the other way
    return [fast, generic]


def _same(responses: list[httpx.Response]) -> dict[str, Any]:
    fast, generic = responses
    assert fast.status_code == generic.status_code, (fast.text, generic.text)
    assert fast.headers.get("content-type") == generic.headers.get("content-type")
    assert fast.headers.get("www-authenticate") == generic.headers.get("www-authenticate")
    assert fast.json() == generic.json()
    out: dict[str, Any] = fast.json()
    return out


def _counter(metrics: str, status: int) -> float:
    m = re.search(rf'gateway_http_requests_total{{route="/v1/jobs",status="{status}"}} ([0-9.e+]+)', metrics)
    return float(m.group(1)) if m else 0.0


CASES = [
    (b"{not json", 400, "invalid_argument"),
    (b"[]", 422, "invalid_argument"),
    (b'{"message_input": "a", "bogus": 1}', 422, "invalid_argument"),
    (b'{"message_output": "only"}', 422, "invalid_argument"),
    (b'{"message_input": "a", "webhook_url": "http://127.0.0.1/x"}', 422, "webhook_url_forbidden"),
    (b'{"message_input": "a", "expires_in_seconds": true}', 422, "invalid_argument"),
    (b'{"message_input": "\\u0000"}', 422, "invalid_argument"),
    (b'{"message_input": "a", "policy": "nope"}', 422, "invalid_argument"),
]


async def test_errors_are_the_same_both_ways(tmp_path: Path) -> None:
    async with serve(tmp_path) as gw:
        _, key = await gw.new_key()
        async with gw.client() as anon:
            error = _same(await _both(anon, b'{"message_input": "a"}'))["error"]
            assert error["code"] == "unauthenticated"
            error = _same(await _both(anon, b'{"message_input": "a"}', {"authorization": "Bearer nope"}))
            assert error["error"]["code"] == "unauthenticated"
        async with gw.client(key) as c:
            for body, status, code in CASES:
                responses = await _both(c, body)
                assert responses[0].status_code == status, (body, responses[0].text)
                got = _same(responses)["error"]
                assert got["code"] == code or any(d.get("code") == code for d in got["details"]), got


async def test_success_and_idempotent_replay_both_ways(tmp_path: Path) -> None:
    async with serve(tmp_path) as gw:
        _, key = await gw.new_key()
        app: Any = gw.app
        taken = 0
        direct = app._create

        async def counting(*args: Any) -> None:
            nonlocal taken
            taken += 1
            await direct(*args)

        app._create = counting
        async with gw.client(key) as c:
            fast, generic = await _both(c, b'{"message_input": "hello", "metadata": {"a": 1}}')
            assert taken == 1  # the framed request took the direct way, the chunked one did not
            assert fast.status_code == generic.status_code == 202
            assert fast.headers["location"] == f"/v1/jobs/{fast.json()['job_id']}"
            assert set(fast.json()) == set(generic.json())
            body = b'{"message_input": "same"}'
            first, replay = await _both(c, body, {"idempotency-key": "k"})
            assert replay.json() == first.json() and replay.headers["idempotent-replayed"] == "true"
            conflict = await _both(c, b'{"message_input": "other"}', {"idempotency-key": "k"})
            assert _same(conflict)["error"]["code"] == "conflict"


async def test_requests_are_counted_by_route_both_ways(tmp_path: Path) -> None:
    async with serve(tmp_path) as gw:
        _, key = await gw.new_key()
        async with gw.client(key) as c:
            before = (await c.get("/metrics")).text
            await _both(c, b'{"message_input": "a"}')
            await _both(c, b"{bad")
            after = (await c.get("/metrics")).text
    assert _counter(after, 202) - _counter(before, 202) == 2
    assert _counter(after, 400) - _counter(before, 400) == 2


async def test_a_crash_is_the_internal_envelope_both_ways(tmp_path: Path) -> None:
    async with serve(tmp_path) as gw:
        _, key = await gw.new_key()
        store: Any = gw.store

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom: SELECT secret FROM somewhere")

        real, store.create_job = store.create_job, broken
        try:
            async with gw.client(key) as c:
                got = _same(await _both(c, b'{"message_input": "a"}'))
        finally:
            store.create_job = real
        assert got["error"]["code"] == "internal" and "boom" not in str(got)


async def test_over_the_limit_or_unframed_bodies_take_the_generic_stack(gw: Gateway) -> None:
    _, key = await gw.new_key()
    async with gw.client(key) as c:
        r = await c.post(
            "/v1/jobs",
            content=b'{"message_input": "' + b"x" * (300 * 1024) + b'"}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
