"""Revoking an API key, black-box: `gateway keys revoke` against the server's database, and every
request with that key is refused (401 in the envelope) within GATEWAY_API_KEY_CACHE_SECONDS."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.acceptance.harness import Server
from tests.hostile.conftest import assert_alive, auth, running

CACHE_SECONDS = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(
        tmp_path_factory.mktemp("revoke"), GATEWAY_API_KEY_CACHE_SECONDS=str(CACHE_SECONDS)
    ) as server:
        yield server
        assert_alive(server)


def _keys(server: Server, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "keys", *args],
        env=server.env(),
        cwd=server.root,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_revoked_key_is_refused_within_the_cache_time(server: Server) -> None:
    made = _keys(server, "create", "--tenant", "leaver")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    other = _keys(server, "create", "--tenant", "stayer").stdout.strip()
    with httpx.Client(base_url=server.base, timeout=10) as client:
        assert client.get("/v1/jobs", headers=auth(key)).status_code == 200  # now cached
        revoked = _keys(server, "revoke", stdin=key + "\n")  # from stdin: not in the process list
        assert revoked.returncode == 0, revoked.stderr
        assert revoked.stdout == ""
        deadline = time.monotonic() + CACHE_SECONDS + 3
        while True:
            r = client.get("/v1/jobs", headers=auth(key))
            if r.status_code == 401 or time.monotonic() > deadline:
                break
            assert r.status_code == 200
            time.sleep(0.1)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "unauthenticated"
        assert client.post("/v1/jobs", headers=auth(key), json={"message_input": "x"}).status_code == 401
        assert client.get("/v1/jobs", headers=auth(other)).status_code == 200  # other keys untouched
    again = _keys(server, "revoke", key)
    assert again.returncode == 1
    assert "no live key" in again.stderr
    assert _keys(server, "revoke", "gwk_never_issued_0123456789abcdef").returncode == 1
    assert _keys(server, "revoke", stdin="").returncode == 2
