"""Per-API-key rate limits (GATEWAY_RATE_LIMIT_PER_SECOND / GATEWAY_RATE_LIMIT_BURST), black-box.

A key that goes over its budget gets 429 `rate_limited` in the error envelope with a `Retry-After`
of whole seconds (at least 1); another key of the same server is untouched; after waiting
Retry-After the key works again.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.crypto import hash_api_key, new_api_key
from tests.acceptance.harness import Server
from tests.hostile.conftest import assert_alive, auth, running

RATE = 2.0
BURST = 4


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(
        tmp_path_factory.mktemp("ratelimit"),
        GATEWAY_RATE_LIMIT_PER_SECOND=str(RATE),
        GATEWAY_RATE_LIMIT_BURST=str(BURST),
    ) as server:
        yield server
        assert_alive(server)


def _second_key(server: Server, tenant: str) -> str:
    """A key made the way operators make them: `gateway keys create` against the same database."""
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "keys", "create", "--tenant", tenant],
        env=server.env(),
        cwd=server.root,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    key = out.stdout.strip()
    assert key and hash_api_key(key), out
    return key


def _exhaust(client: httpx.Client, path: str = "/v1/jobs") -> httpx.Response:
    """Send requests until one is refused; the burst must run out within BURST + a few."""
    for _ in range(BURST + 10):
        response = client.get(path)
        if response.status_code == 429:
            return response
        assert response.status_code == 200, response.text
    raise AssertionError(f"no 429 after {BURST + 10} requests with a burst of {BURST}")


def test_over_the_limit_is_429_with_retry_after_and_recovers(limited: Server) -> None:
    with httpx.Client(base_url=limited.base, headers=auth(limited.api_key), timeout=5) as client:
        refused = _exhaust(client)
        assert refused.headers["content-type"].startswith("application/json")
        body = refused.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
        assert body["error"]["code"] == "rate_limited"
        retry_after = refused.headers["Retry-After"]
        assert retry_after.isdigit() and int(retry_after) >= 1, retry_after

        # Every route behind the key is limited, not only the one that ran the budget out.
        for path in ("/v1/policies", "/api/v1/health/queues"):
            assert client.get(path).status_code == 429

        time.sleep(int(retry_after))
        again = client.get("/v1/jobs")
        assert again.status_code == 200, again.text


def test_another_key_is_not_affected(limited: Server) -> None:
    other = _second_key(limited, "other-tenant")
    with (
        httpx.Client(base_url=limited.base, headers=auth(limited.api_key), timeout=5) as noisy,
        httpx.Client(base_url=limited.base, headers=auth(other), timeout=5) as quiet,
    ):
        _exhaust(noisy)
        for _ in range(BURST):
            response = quiet.get("/v1/jobs")
            assert response.status_code == 200, response.text
        # Posting work is limited too, and the refusal creates nothing. (Exhausted again first: on
        # a slow machine the requests above can take longer than one token's refill, 1/RATE s.)
        _exhaust(noisy)
        refused = noisy.post("/v1/jobs", json={"message_input": "hello"})
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limited"


def test_unauthenticated_and_health_probes_are_not_limited(limited: Server) -> None:
    """Liveness and readiness probes carry no key; they must answer however busy a key is."""
    with httpx.Client(base_url=limited.base, timeout=5) as anon:
        for _ in range(BURST * 3):
            assert anon.get("/healthz").status_code == 200
            assert anon.get("/readyz").status_code == 200
        bad = anon.get("/v1/jobs", headers=auth(new_api_key()))
        assert bad.status_code == 401
