"""The SSRF guard from outside (CONTRACT.md §4): with GATEWAY_WEBHOOK_ALLOW_PRIVATE_NETWORKS unset,
webhooks to loopback, private, link-local and other non-global addresses are refused.

Nothing here may make the gateway connect to a non-loopback address, even if the guard were broken:
* URLs that point at this machine's loopback go to a server WITH workers, next to a receiver on
  127.0.0.1:PORT that must never see a request;
* URLs that point anywhere else (private ranges, metadata services, public addresses) go only to a
  server started with `--no-workers`, which has no delivery code running at all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.harness import Receiver, Server, eventually, wait_status

GUARDED = {"GATEWAY_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "false"}
TERMINAL = {"inbound_blocked", "outbound_blocked", "completed", "failed", "expired", "cancelled"}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(root=Path(tmp_path_factory.mktemp("guarded")), env_overrides=GUARDED)
    with srv:
        yield srv


@pytest.fixture(scope="module")
def api_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # `gateway serve --no-workers`: the API only, so no job is ever filtered or delivered
    srv = Server(
        root=Path(tmp_path_factory.mktemp("api-only")), env_overrides=GUARDED, serve_args=("--no-workers",)
    )
    with srv:
        yield srv


def loopback_urls(port: int) -> list[str]:
    """Every spelling of "this machine" we know of; each would reach the receiver if let through."""
    return [
        f"http://127.0.0.1:{port}/",
        f"http://localhost:{port}/",
        f"http://[::1]:{port}/",
        f"http://0.0.0.0:{port}/",
        f"http://2130706433:{port}/",
        "http://2130706433/",
        f"http://[::ffff:127.0.0.1]:{port}/",
        "http://[::ffff:127.0.0.1]/",
        f"http://127.1:{port}/",
        f"http://0x7f000001:{port}/",
        f"http://0177.0.0.1:{port}/",
        f"http://127.0.0.1.:{port}/",
        f"http://127.42.0.7:{port}/",
        f"http://LOCALHOST:{port}/",
        f"http://localhost.:{port}/",
        f"http://app.localhost:{port}/",
        f"http://[::]:{port}/",
        f"http://[0:0:0:0:0:ffff:7f00:1]:{port}/",
        f"http://１２７。０。０。１:{port}/",  # full-width digits and ideographic dots
        f"https://127.0.0.1:{port}/",
    ]


# Not this machine: these only ever go to the --no-workers server.
ELSEWHERE = [
    "http://10.0.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://0xa9fea9fe/latest/meta-data/",  # 169.254.169.254 in hex
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://[2002:a9fe:a9fe::]/",  # 6to4 of 169.254.169.254
    "http://100.100.100.200/",  # Alibaba Cloud metadata (carrier-grade NAT range)
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://[fd00::1]/",
    "http://[fe80::1]/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
]


async def assert_refused(client: httpx.AsyncClient, url: str) -> None:
    r = await client.post("/v1/jobs", json={"message_input": "hi", "message_output": "x", "webhook_url": url})
    assert r.status_code == 422, (url, r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] == "invalid_argument" and "webhook_url" in err["message"], (url, err)
    [detail] = [d for d in err["details"] if d.get("field") == "webhook_url"]
    assert detail.get("code") == "webhook_url_forbidden", (url, detail)
    assert "Location" not in r.headers


async def test_loopback_webhook_urls_are_refused_and_nothing_is_sent(
    guarded: Server, receiver: Receiver
) -> None:
    async with guarded.client() as c:
        for url in loopback_urls(receiver.port):
            await assert_refused(c, url)
        assert (await c.get("/v1/jobs")).json()["jobs"] == []
        # the guarded server has workers: give them time to (wrongly) deliver anything
        await asyncio.sleep(1.0)
    assert receiver.requests == []


async def test_private_and_metadata_urls_are_refused(api_only: Server) -> None:
    async with api_only.client() as c:
        for url in ELSEWHERE:
            await assert_refused(c, url)


async def test_public_urls_are_accepted_at_create(api_only: Server) -> None:
    """Accepted (202), on a server with no workers, so no connection is ever attempted."""
    async with api_only.client() as c:
        for url in (
            "http://93.184.216.34/hook",
            "https://[2606:2800:220:1:248:1893:25c8:1946]/hook",
            "https://receiver.example.com/hooks/gateway?token=abc",
        ):
            r = await c.post(
                "/v1/jobs", json={"message_input": "hi", "message_output": "x", "webhook_url": url}
            )
            assert r.status_code == 202, (url, r.text)
            job_id = r.json()["job_id"]
            cancelled = await c.delete(f"/v1/jobs/{job_id}")
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
            log = await c.get(f"/v1/jobs/{job_id}/deliveries")
            assert log.json() == {"attempts": []}


def _hosts_name_for_loopback() -> str | None:
    """A name other than localhost that resolves (via /etc/hosts) to loopback addresses only."""
    try:
        lines = Path("/etc/hosts").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        for name in fields[1:]:
            if name == "localhost" or name.endswith((".localhost", ".localhost.")):
                continue
            try:
                infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
            except OSError:
                continue
            addresses = {ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos}
            if addresses and all(a.is_loopback for a in addresses):
                return name
    return None


async def test_name_resolving_to_loopback_is_refused_at_delivery(guarded: Server, receiver: Receiver) -> None:
    """A name passes the create-time check (no DNS there); the resolver check refuses it when the
    connection would be made, and the job fails at once instead of retrying."""
    name = _hosts_name_for_loopback()
    if name is None:
        pytest.skip("no /etc/hosts name (other than localhost) that resolves only to loopback")
    async with guarded.client() as c:
        r = await c.post(
            "/v1/jobs",
            json={
                "message_input": "hi",
                "message_output": "x",
                "webhook_url": f"http://{name}:{receiver.port}/",
            },
        )
        assert r.status_code == 202, r.text
        job: dict[str, Any] = r.json()
        done = await wait_status(c, job["job_id"], TERMINAL)
        assert done["status"] == "failed", done
        assert done["error"]["code"] == "webhook_url_forbidden", done

        async def logged() -> list[dict[str, Any]] | None:
            attempts: list[dict[str, Any]] = (await c.get(f"/v1/jobs/{job['job_id']}/deliveries")).json()[
                "attempts"
            ]
            return attempts or None

        [attempt] = await eventually(logged, what="the refused attempt")
        assert attempt["status_code"] is None and attempt["error"].startswith("refused")
        assert attempt["next_attempt_at"] is None
        await asyncio.sleep(0.5)
    assert receiver.requests == []
