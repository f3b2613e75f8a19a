"""Webhook signatures as a receiver checks them (CONTRACT.md §4): the published `standardwebhooks`
verifier, a by-hand HMAC and ed25519 check, our own `verify()` and the `gateway verify` CLI.

Retries are 1.5 s (±20 %) apart here, so each attempt is signed in a different Unix second.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError as StdVerificationError

from gateway.client import verify_webhook
from gateway.delivery.signing import WebhookVerificationError, verify
from tests.acceptance.harness import REPO, Received, Receiver, Server, eventually, wait_status

TERMINAL = {"inbound_blocked", "outbound_blocked", "completed", "failed", "expired", "cancelled"}


@pytest.fixture(scope="module")
def signing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        root=Path(tmp_path_factory.mktemp("signing")),
        env_overrides={"GATEWAY_WEBHOOK_RETRY_SCHEDULE": "1.5,1.5,1.5"},
    )
    with srv:
        yield srv


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job: dict[str, Any] = r.json()
    return job


async def delivered(client: httpx.AsyncClient, receiver: Receiver, job: dict[str, Any]) -> list[Received]:
    done = await wait_status(client, job["job_id"], TERMINAL, within=15)
    assert done["status"] == "completed", done
    hooks = receiver.for_job(job["job_id"])
    assert hooks
    return hooks


def signatures(received: Received) -> dict[str, list[bytes]]:
    """The `webhook-signature` header as {version: [raw signature bytes]}."""
    out: dict[str, list[bytes]] = {}
    for item in received.headers["webhook-signature"].split(" "):
        version, _, encoded = item.partition(",")
        out.setdefault(version, []).append(base64.b64decode(encoded, validate=True))
    return out


def signed_content(received: Received) -> bytes:
    h = received.headers
    return f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + received.body


def with_headers(received: Received, **changes: str) -> dict[str, str]:
    headers = dict(received.headers)
    headers.update({k.replace("_", "-"): v for k, v in changes.items()})
    return headers


async def test_v1_every_retry_is_freshly_signed_and_verifies(
    signing_server: Server, receiver: Receiver
) -> None:
    async with signing_server.client() as c:
        job = await create(
            c, message_input="hi", message_output="hello", webhook_url=f"{receiver.base}/flaky/2"
        )
        secret = job["webhook_secret"]
        assert "webhook_public_key" not in job
        hooks = await delivered(c, receiver, job)
    assert len(hooks) == 3

    # Same message on every attempt: one webhook-id, the same bytes.
    assert len({h.headers["webhook-id"] for h in hooks}) == 1
    assert len({h.body for h in hooks}) == 1
    # A new signing time on each attempt, close to when it arrived.
    stamps = [int(h.headers["webhook-timestamp"]) for h in hooks]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3, stamps
    for h, ts in zip(hooks, stamps, strict=True):
        assert abs(h.at - ts) < 2.0, (h.at, ts)
    # So a different signature each time, and each verifies on its own.
    sigs = [h.headers["webhook-signature"] for h in hooks]
    assert len(set(sigs)) == 3
    key = base64.b64decode(secret.removeprefix("whsec_"))
    for h in hooks:
        assert set(signatures(h)) == {"v1"}
        assert Webhook(secret).verify(h.body, h.headers)["job_id"] == job["job_id"]
        verify_webhook(h.body, h.headers, secret)
        by_hand = hmac.digest(key, signed_content(h), hashlib.sha256)
        assert signatures(h)["v1"] == [by_hand]

    # The timestamp is part of what is signed: a replay cannot refresh it.
    first, second = hooks[0], hooks[1]
    replayed = with_headers(second, webhook_timestamp=first.headers["webhook-timestamp"])
    with pytest.raises(StdVerificationError):
        Webhook(secret).verify(second.body, replayed)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(second.body, replayed, secret)

    # Tolerance: the same webhook is refused when it arrives too late or "from the future".
    ts = stamps[0]
    verify(first.body, first.headers, secret=secret, now=ts + 299)
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify(first.body, first.headers, secret=secret, now=ts + 301)
    with pytest.raises(WebhookVerificationError, match="too new"):
        verify(first.body, first.headers, secret=secret, now=ts - 301)
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify(first.body, first.headers, secret=secret, now=ts + 31, tolerance_seconds=30)


async def test_v1a_carries_both_signatures(signing_server: Server, receiver: Receiver) -> None:
    async with signing_server.client() as c:
        job = await create(
            c,
            message_input="hi",
            message_output="hello",
            webhook_url=f"{receiver.base}/ok",
            signature_scheme="v1a",
        )
        public_key = job["webhook_public_key"]
        assert public_key.startswith("whpk_")
        [hook] = await delivered(c, receiver, job)
        other = await create(c, message_input="x", message_output="y", signature_scheme="v1a")
        assert other["webhook_public_key"] != public_key

    sigs = signatures(hook)
    assert set(sigs) == {"v1", "v1a"} and len(sigs["v1"]) == len(sigs["v1a"]) == 1

    # Our verifier, with the public key only (what a receiver that holds no secret has).
    verify(hook.body, hook.headers, public_key=public_key)
    tampered = hook.body.replace(b'"hello"', b'"HELLO"')
    assert tampered != hook.body
    with pytest.raises(WebhookVerificationError):
        verify(tampered, hook.headers, public_key=public_key)
    with pytest.raises(WebhookVerificationError):
        verify(hook.body, hook.headers, public_key=other["webhook_public_key"])
    only_v1a = with_headers(hook, webhook_signature="v1a," + base64.b64encode(sigs["v1a"][0]).decode())
    verify(hook.body, only_v1a, public_key=public_key)
    with pytest.raises(WebhookVerificationError):
        verify(hook.body, only_v1a, secret=job["webhook_secret"])  # no v1 signature left

    # Independently of our code: plain ed25519 over `id.timestamp.body`.
    raw = base64.b64decode(public_key.removeprefix("whpk_"))
    Ed25519PublicKey.from_public_bytes(raw).verify(sigs["v1a"][0], signed_content(hook))
    with pytest.raises(InvalidSignature):
        Ed25519PublicKey.from_public_bytes(raw).verify(sigs["v1a"][0], signed_content(hook) + b" ")

    # The published v1-only verifier skips v1a and still accepts the v1 part.
    assert Webhook(job["webhook_secret"]).verify(hook.body, hook.headers)["event"] == "job.completed"
    with pytest.raises(StdVerificationError):
        Webhook(job["webhook_secret"]).verify(tampered, hook.headers)


async def test_v1a_public_key_is_replayed_with_the_idempotent_answer(signing_server: Server) -> None:
    async with signing_server.client() as c:
        headers = {"Idempotency-Key": f"sig-{time.time_ns()}"}
        body = {"message_input": "once", "signature_scheme": "v1a"}
        first = await c.post("/v1/jobs", json=body, headers=headers)
        again = await c.post("/v1/jobs", json=body, headers=headers)
        assert first.status_code == again.status_code == 202
        assert again.json()["webhook_public_key"] == first.json()["webhook_public_key"]
        job = await c.get(f"/v1/jobs/{first.json()['job_id']}")
        assert "webhook_public_key" not in job.json() and "webhook_secret" not in job.json()


def run_verify_cli(
    body: bytes, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "verify", *args],
        input=body,
        capture_output=True,
        env={**base, **(env or {})},
        cwd=REPO,
        timeout=30,
        check=False,
    )


async def test_gateway_verify_cli_on_a_real_webhook(signing_server: Server, receiver: Receiver) -> None:
    async with signing_server.client() as c:
        job = await create(
            c,
            message_input="hi",
            message_output="hello",
            webhook_url=f"{receiver.base}/ok",
            signature_scheme="v1a",
        )
        [hook] = await eventually(lambda: _hooks(receiver, job["job_id"]), what="the webhook")
    secret, public_key = job["webhook_secret"], job["webhook_public_key"]
    h = hook.headers
    header_args = [
        "--id",
        h["webhook-id"],
        "--timestamp",
        h["webhook-timestamp"],
        "--signature",
        h["webhook-signature"],
    ]
    tampered = hook.body.replace(b'"hello"', b'"hell0"')

    cases: list[tuple[bytes, list[str], dict[str, str] | None, int]] = [
        (hook.body, ["--secret", secret, *header_args], None, 0),
        (hook.body, header_args, {"GATEWAY_WEBHOOK_SECRET": secret}, 0),
        (hook.body, ["--public-key", public_key, *header_args], None, 0),
        (tampered, ["--secret", secret, *header_args], None, 1),
        (tampered, ["--public-key", public_key, *header_args], None, 1),
        (hook.body + b"\n", ["--secret", secret, *header_args], None, 1),  # the body is byte-exact
        (hook.body, ["--secret", "whsec_" + base64.b64encode(b"k" * 32).decode(), *header_args], None, 1),
        (hook.body, [*header_args], None, 2),  # no key at all is a usage error
    ]
    results = await asyncio.gather(*(asyncio.to_thread(run_verify_cli, b, *a, env=e) for b, a, e, _ in cases))
    for (_, args, _, expected), result in zip(cases, results, strict=True):
        out = result.stdout.decode()
        assert result.returncode == expected, (args, result.returncode, out, result.stderr.decode())
        if expected == 0:
            assert out.strip() == "valid"
        elif expected == 1:
            assert out.startswith("invalid:")
        assert secret not in out and secret not in result.stderr.decode()


async def _hooks(receiver: Receiver, job_id: str) -> list[Received] | None:
    return receiver.for_job(job_id) or None
