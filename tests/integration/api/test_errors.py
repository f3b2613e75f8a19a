"""The one error envelope on every failure path, authentication, rate limits and body limits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

from gateway.api import auth
from gateway.crypto import new_api_key
from gateway.store.base import StoreError
from tests.integration.api.conftest import BOOTSTRAP_KEY, Gateway, Tenant, assert_error, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")

LIMIT = 256 * 1024  # conftest's max_body_bytes


async def test_missing_or_bad_key_is_401(gw: Gateway) -> None:
    async with gw.client() as anon:
        r = await anon.get("/v1/jobs")
        assert_error(r, 401, "unauthenticated")
        assert r.headers["www-authenticate"] == "Bearer"
    for header in ("Bearer", "Basic abc", "Token gwk_x", "gwk_nospace"):
        async with gw.client(headers={"Authorization": header}) as c:
            assert_error(await c.get("/v1/jobs"), 401, "unauthenticated")
    async with gw.client("gwk_not_a_key") as c:
        r = await c.post("/v1/jobs", json={"message_input": "x"})
        assert_error(r, 401, "unauthenticated")
        assert_error(await c.get("/api/v1/health/queues"), 401, "unauthenticated")


async def test_bootstrap_key_is_tenant_default(gw: Gateway) -> None:
    async with gw.client(BOOTSTRAP_KEY) as c:
        r = await c.post("/v1/jobs", json={"message_input": "x"})
        assert r.status_code == 202
    job = await gw.store.get_job("default", r.json()["job_id"])
    assert job is not None


async def test_scheme_is_case_insensitive(gw: Gateway, tenant: Tenant) -> None:
    async with gw.client(headers={"Authorization": f"bearer {tenant.key}"}) as c:
        assert (await c.get("/v1/jobs")).status_code == 200


async def test_unknown_route_is_404_envelope(tenant: Tenant) -> None:
    error = assert_error(await tenant.http.get("/v2/nothing"), 404, "not_found")
    assert "/v2/nothing" in error["message"]


async def test_a_trailing_slash_is_404_envelope_not_a_redirect(gw: Gateway, tenant: Tenant) -> None:
    async with gw.client(headers={"Host": "evil.example"}) as anon:
        for path in ("/v1/jobs/", "/healthz/", "/api/v1/health/queues/"):
            r = await anon.get(path)
            assert_error(r, 404, "not_found")
            assert "location" not in r.headers
    r = await tenant.http.post("/v1/jobs/", json={"message_input": "x"})
    assert_error(r, 404, "not_found")
    assert "location" not in r.headers
    assert (await tenant.http.get("/v1/jobs")).json()["jobs"] == []  # nothing was created


async def test_wrong_method_is_405_envelope_with_allow(tenant: Tenant) -> None:
    r = await tenant.http.put("/v1/jobs", json={})
    assert_error(r, 405, "method_not_allowed")
    assert {m.strip() for m in r.headers["allow"].split(",")} >= {"GET", "POST"}
    r = await tenant.http.post(f"/v1/jobs/job_{'0' * 26}")
    assert_error(r, 405, "method_not_allowed")
    assert {m.strip() for m in r.headers["allow"].split(",")} >= {"GET", "DELETE"}


async def test_413_by_content_length_before_auth(gw: Gateway) -> None:
    body = b'{"message_input": "' + b"x" * LIMIT + b'"}'
    async with gw.client() as anon:
        r = await anon.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    error = assert_error(r, 413, "payload_too_large")
    assert str(LIMIT) in error["message"]


async def test_413_for_a_chunked_body(tenant: Tenant) -> None:
    async def chunks(total: int) -> AsyncIterator[bytes]:
        yield b'{"message_input": "'
        sent = 0
        while sent < total:
            yield b"y" * 16384
            sent += 16384
        yield b'"}'

    r = await tenant.http.post("/v1/jobs", content=chunks(LIMIT + 16384))
    assert "content-length" not in r.request.headers and r.request.headers["transfer-encoding"] == "chunked"
    assert_error(r, 413, "payload_too_large")

    small = await tenant.http.post("/v1/jobs", content=chunks(32 * 1024))
    assert small.status_code == 202, small.text


async def test_body_at_the_limit_is_accepted(tenant: Tenant) -> None:
    prefix, suffix = b'{"message_input": "', b'"}'
    body = prefix + b"z" * (LIMIT - len(prefix) - len(suffix)) + suffix
    assert len(body) == LIMIT
    r = await tenant.http.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 202, r.text


async def test_unexpected_exception_is_500_without_details(
    gw: Gateway, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def boom(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError("SECRET-INTERNAL-DETAIL at /srv/gateway/store.py")

    monkeypatch.setattr(gw.store, "get_job", boom)
    r = await tenant.http.get(f"/v1/jobs/job_{'4' * 26}")
    assert_error(r, 500, "internal")
    assert "SECRET-INTERNAL-DETAIL" not in r.text and "store.py" not in r.text


async def test_store_error_is_503_with_retry_after(
    gw: Gateway, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def locked(*args: Any, **kwargs: Any) -> NoReturn:
        raise StoreError("database is locked")

    monkeypatch.setattr(gw.store, "list_jobs", locked)
    r = await tenant.http.get("/v1/jobs")
    assert_error(r, 503, "unavailable")
    assert r.headers["retry-after"] == "1"
    assert "locked" not in r.text


async def test_readyz_503_when_the_database_is_down(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    async def down() -> NoReturn:
        raise StoreError("unable to open database file")

    monkeypatch.setattr(gw.store, "ping", down)
    async with gw.client() as anon:
        r = await anon.get("/readyz")
        assert_error(r, 503, "unavailable")
        assert (await anon.get("/healthz")).status_code == 200


async def test_rate_limit_per_key(tmp_path: Path) -> None:
    async with serve(tmp_path, rate_limit_per_second=0.5, rate_limit_burst=2) as gw:
        _, key = await gw.new_key()
        _, other_key = await gw.new_key()
        async with gw.client(key) as c, gw.client(other_key) as o:
            assert (await c.get("/v1/jobs")).status_code == 200
            assert (await c.get("/v1/jobs")).status_code == 200
            r = await c.get("/v1/jobs")
            error = assert_error(r, 429, "rate_limited")
            assert int(r.headers["retry-after"]) >= 1 and "retry" in error["message"]
            assert (await o.get("/v1/jobs")).status_code == 200  # buckets are per key
            async with gw.client() as anon:  # unauthenticated routes are not limited
                assert all(
                    r.status_code == 200
                    for r in await asyncio.gather(*(anon.get("/healthz") for _ in range(5)))
                )


def _count_key_reads(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every key lookup that reaches the store."""
    reads: list[str] = []
    real = gw.store.tenant_for_key

    async def counting(digest: str) -> str | None:
        reads.append(digest)
        return await real(digest)

    monkeypatch.setattr(gw.store, "tenant_for_key", counting)
    return reads


async def test_invalid_keys_are_limited_per_address_without_store_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The budget's clock stands still unless the test moves it: on a slow machine the requests
    # below can take long enough for a real clock to hand a token back mid-test.
    now = [1000.0]
    monkeypatch.setattr(auth, "_clock", lambda: now[0])
    async with serve(tmp_path, auth_failure_rate_per_second=2.0, auth_failure_burst=3) as gw:
        _, key = await gw.new_key()
        _, fresh_key = await gw.new_key()
        reads = _count_key_reads(gw, monkeypatch)
        async with gw.client(key) as valid:
            assert (await valid.get("/v1/jobs")).status_code == 200  # now known to this instance
        for _ in range(3):
            async with gw.client(new_api_key()) as wrong:
                assert_error(await wrong.get("/v1/jobs"), 401, "unauthenticated")
        assert len(reads) == 4
        for _ in range(5):  # the address's budget is spent: refused before any database read
            async with gw.client(new_api_key()) as wrong:
                r = await wrong.post("/v1/jobs", json={"message_input": "x"})
                error = assert_error(r, 429, "rate_limited")
                assert "invalid API keys" in error["message"]
                assert int(r.headers["retry-after"]) >= 1
        assert len(reads) == 4

        # A key this instance has seen valid keeps working from that address, even once its cache
        # entry has expired (it is looked up again: it may have been revoked meanwhile) ...
        state = gw.app.state.gateway_auth
        state.cache = {d: (t, 0.0) for d, (t, _) in state.cache.items()}
        async with gw.client(key) as valid:
            assert (await valid.get("/v1/jobs")).status_code == 200
        assert len(reads) == 5
        # ... while a valid key never seen here waits like any other unknown key from there.
        async with gw.client(fresh_key) as unseen:
            assert_error(await unseen.get("/v1/jobs"), 429, "rate_limited")

        # Another address has its own budget.
        other = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(
            base_url=gw.base_url, transport=other, headers={"Authorization": f"Bearer {new_api_key()}"}
        ) as elsewhere:
            assert_error(await elsewhere.get("/v1/jobs"), 401, "unauthenticated")

        now[0] += 1.0  # two tokens back at 2 per second
        async with gw.client(fresh_key) as unseen:
            assert (await unseen.get("/v1/jobs")).status_code == 200
        async with gw.client(new_api_key()) as wrong:
            assert_error(await wrong.get("/v1/jobs"), 401, "unauthenticated")


async def _wrong_key_from(gw: Gateway, forwarded_for: str | None, *, source: str = "127.0.0.1") -> int:
    headers = {"Authorization": f"Bearer {new_api_key()}"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(base_url=gw.base_url, transport=transport, headers=headers) as c:
        return (await c.get("/v1/jobs")).status_code


async def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget(tmp_path: Path) -> None:
    async with serve(
        tmp_path, auth_failure_rate_per_second=0.01, auth_failure_burst=2, trusted_proxies="127.0.0.1"
    ) as gw:
        assert [await _wrong_key_from(gw, "203.0.113.5") for _ in range(3)] == [401, 401, 429]
        # another client behind the same proxy is not refused for its neighbour's guesses
        assert await _wrong_key_from(gw, "203.0.113.6") == 401
        # the client is the address the trusted proxy saw, not what the client claimed before it
        assert await _wrong_key_from(gw, "198.51.100.1, 203.0.113.5") == 429
        # a peer that is not a trusted proxy cannot pick its address with the header
        assert await _wrong_key_from(gw, "203.0.113.7", source="127.0.0.2") == 401
        assert await _wrong_key_from(gw, "203.0.113.8", source="127.0.0.2") == 401
        assert await _wrong_key_from(gw, "203.0.113.9", source="127.0.0.2") == 429


async def test_without_trusted_proxies_the_forwarded_header_is_ignored(tmp_path: Path) -> None:
    async with serve(tmp_path, auth_failure_rate_per_second=0.01, auth_failure_burst=2) as gw:
        codes = [await _wrong_key_from(gw, f"203.0.113.{i}") for i in range(1, 4)]
        assert codes == [401, 401, 429]  # one peer, one budget, whatever each request claims


async def test_revoked_key_loses_its_free_lookups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key seen valid is looked up whatever the budget; once the store says it is not valid
    (revoked), it is an unknown key again and is refused like one."""
    async with serve(tmp_path, auth_failure_rate_per_second=0.01, auth_failure_burst=2) as gw:
        _, key = await gw.new_key()
        async with gw.client(key) as c:
            assert (await c.get("/v1/jobs")).status_code == 200
        state = gw.app.state.gateway_auth
        state.cache = {d: (t, 0.0) for d, (t, _) in state.cache.items()}

        async def revoked(digest: str) -> None:
            return None

        monkeypatch.setattr(gw.store, "tenant_for_key", revoked)
        async with gw.client(key) as c:
            for code in (401, 401, 429):
                assert (await c.get("/v1/jobs")).status_code == code


async def test_store_failures_do_not_spend_the_invalid_key_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve(tmp_path, auth_failure_rate_per_second=0.01, auth_failure_burst=2) as gw:
        real = gw.store.tenant_for_key

        async def locked(digest: str) -> NoReturn:
            raise StoreError("database is locked")

        monkeypatch.setattr(gw.store, "tenant_for_key", locked)
        async with gw.client(new_api_key()) as c:
            for _ in range(4):
                assert_error(await c.get("/v1/jobs"), 503, "unavailable")
        monkeypatch.setattr(gw.store, "tenant_for_key", real)
        async with gw.client(new_api_key()) as c:
            for code in (401, 401, 429):
                assert (await c.get("/v1/jobs")).status_code == code


async def test_invalid_key_limit_can_be_switched_off(tmp_path: Path) -> None:
    async with serve(tmp_path, auth_failure_rate_per_second=0, auth_failure_burst=1) as gw:
        async with gw.client(new_api_key()) as wrong:
            codes = {(await wrong.get("/v1/jobs")).status_code for _ in range(10)}
        assert codes == {401}


async def test_a_burst_on_a_valid_key_not_yet_cached_is_not_limited(tmp_path: Path) -> None:
    """A backend starting with many concurrent requests on its key: every one misses the cache and
    is looked up, and none of them may count against the address's invalid-key budget."""
    async with serve(tmp_path, auth_failure_rate_per_second=0.01, auth_failure_burst=3) as gw:
        _, key = await gw.new_key()
        async with gw.client(key) as c:
            codes = [r.status_code for r in await asyncio.gather(*(c.get("/v1/jobs") for _ in range(40)))]
        assert codes == [200] * 40
        for code in (401, 401, 401, 429):
            async with gw.client(new_api_key()) as wrong:
                assert (await wrong.get("/v1/jobs")).status_code == code
