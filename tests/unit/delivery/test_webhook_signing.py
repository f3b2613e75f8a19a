"""Signatures as a receiver sees them: the published Standard Webhooks verifier must accept ours."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError as ReferenceVerificationError

from gateway.crypto import new_signing_keypair, new_webhook_secret
from gateway.delivery.signing import (
    USER_AGENT,
    WebhookVerificationError,
    sign_v1,
    sign_v1a,
    verify,
    webhook_headers,
)

BODY = b'{"event":"job.completed","job_id":"job_1","data":{"message":"h\xc3\xa9llo"}}'
MSG_ID = "msg_01hzx3k2v9m7q8r6t5y4w3e2a1"


def _now() -> int:
    return int(time.time())


# --- interoperability with the reference verifier ------------------------------------------------


def test_reference_verifier_accepts_our_signature_with_a_generated_secret() -> None:
    secret = new_webhook_secret()
    headers = webhook_headers(MSG_ID, _now(), BODY, secret)
    assert Webhook(secret).verify(BODY, headers) == {
        "event": "job.completed",
        "job_id": "job_1",
        "data": {"message": "héllo"},
    }


@pytest.mark.parametrize("mutate", ["body", "id", "timestamp", "secret"])
def test_reference_verifier_rejects_tampering(mutate: str) -> None:
    secret = new_webhook_secret()
    ts = _now()
    headers = webhook_headers(MSG_ID, ts, BODY, secret)
    body = BODY
    if mutate == "body":
        body = BODY.replace(b"job_1", b"job_2")
    elif mutate == "id":
        headers["webhook-id"] = MSG_ID + "x"
    elif mutate == "timestamp":
        headers["webhook-timestamp"] = str(ts - 1)
    else:
        secret = new_webhook_secret()
    with pytest.raises(ReferenceVerificationError):
        Webhook(secret).verify(body, headers)


def test_reference_verifier_accepts_mixed_v1_and_v1a_header() -> None:
    secret = new_webhook_secret()
    private, _public = new_signing_keypair()
    headers = webhook_headers(MSG_ID, _now(), BODY, secret, signing_key=private)
    assert headers["webhook-signature"].count(" ") == 1
    Webhook(secret).verify(BODY, headers)  # skips the v1a entry, matches the v1 one


def test_sign_v1_matches_reference_sign_for_many_secrets() -> None:
    ts = 1614265330
    for _ in range(50):
        secret = new_webhook_secret()
        expected = Webhook(secret).sign(MSG_ID, datetime.fromtimestamp(ts, tz=UTC), BODY.decode())
        assert sign_v1(secret, MSG_ID, ts, BODY) == expected


def test_v1a_matches_the_reference_libraries_test_vector() -> None:
    # Test vector of the Standard Webhooks reference (Go) library for asymmetric signatures.
    key = "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
    expected = "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="
    body = b'{"test": 2432232314}'
    assert sign_v1a(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == expected
    assert sign_v1a("whsk_" + key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == expected


# --- headers -------------------------------------------------------------------------------------


def test_headers_are_exactly_the_standard_ones() -> None:
    secret = new_webhook_secret()
    headers = webhook_headers(MSG_ID, 1700000000, BODY, secret)
    assert headers == {
        "webhook-id": MSG_ID,
        "webhook-timestamp": "1700000000",
        "webhook-signature": sign_v1(secret, MSG_ID, 1700000000, BODY),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }
    assert USER_AGENT.startswith("llm-webhook-gateway/")
    version, sig = headers["webhook-signature"].split(",")
    assert version == "v1"
    assert len(base64.b64decode(sig, validate=True)) == 32


def test_signing_is_fast() -> None:
    secret = new_webhook_secret()
    body = BODY * 15  # ~1 KB
    webhook_headers(MSG_ID, 1, body, secret)
    n = 5000
    started = time.thread_time()  # this thread's CPU: a busy CI machine must not fail it
    for i in range(n):
        webhook_headers(MSG_ID, i, body, secret)
    per_call = (time.thread_time() - started) / n
    assert per_call < 50e-6, f"{per_call * 1e6:.1f} µs per signature"


# --- our verify ----------------------------------------------------------------------------------


def test_verify_accepts_v1_with_any_header_case() -> None:
    secret = new_webhook_secret()
    ts = _now()
    headers = {k.upper(): v for k, v in webhook_headers(MSG_ID, ts, BODY, secret).items()}
    verify(BODY, headers, secret=secret)


def test_verify_accepts_v1a_with_public_key_only() -> None:
    secret = new_webhook_secret()
    private, public = new_signing_keypair()
    headers = webhook_headers(MSG_ID, _now(), BODY, secret, signing_key=private)
    verify(BODY, headers, public_key=public)
    with pytest.raises(WebhookVerificationError, match="no matching signature"):
        verify(BODY + b" ", headers, public_key=public)
    with pytest.raises(WebhookVerificationError, match="no matching signature"):
        verify(BODY, headers, public_key=new_signing_keypair()[1])


def test_verify_finds_the_matching_one_among_several_signatures() -> None:
    old, new = new_webhook_secret(), new_webhook_secret()
    ts = _now()
    sig = " ".join(
        [
            "v2,abcd",
            "garbage-without-comma",
            sign_v1(old, MSG_ID, ts, BODY),
            "v1,not*base64",
            sign_v1(new, MSG_ID, ts, BODY),
        ]
    )
    headers = {"webhook-id": MSG_ID, "webhook-timestamp": str(ts), "webhook-signature": sig}
    verify(BODY, headers, secret=new)
    verify(BODY, headers, secret=old)


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("webhook-id", "missing required header webhook-id"),
        ("webhook-timestamp", "missing required header webhook-timestamp"),
        ("webhook-signature", "missing required header webhook-signature"),
    ],
)
def test_verify_names_the_missing_header(drop: str, message: str) -> None:
    secret = new_webhook_secret()
    headers = webhook_headers(MSG_ID, _now(), BODY, secret)
    del headers[drop]
    with pytest.raises(WebhookVerificationError, match=message):
        verify(BODY, headers, secret=secret)


def test_verify_enforces_the_tolerance_both_ways() -> None:
    secret = new_webhook_secret()
    now = 1_700_000_000.0
    for ts, ok in [(now - 300, True), (now + 300, True), (now - 301, False), (now + 301, False)]:
        headers = webhook_headers(MSG_ID, int(ts), BODY, secret)
        if ok:
            verify(BODY, headers, secret=secret, now=now)
        else:
            with pytest.raises(WebhookVerificationError, match="too old" if ts < now else "too new"):
                verify(BODY, headers, secret=secret, now=now)
    stale = webhook_headers(MSG_ID, int(now - 86400), BODY, secret)
    verify(BODY, stale, secret=secret, now=now, tolerance_seconds=None)


@pytest.mark.parametrize("ts", ["", "abc", "1.5e9", "-5", "1700000000.5", "١٧٠٠٠٠٠٠٠٠", "9" * 40])
def test_verify_rejects_malformed_timestamps(ts: str) -> None:
    secret = new_webhook_secret()
    headers = webhook_headers(MSG_ID, _now(), BODY, secret)
    headers["webhook-timestamp"] = ts
    with pytest.raises(WebhookVerificationError):
        verify(BODY, headers, secret=secret)


def test_verify_tampered_body_fails() -> None:
    secret = new_webhook_secret()
    headers = webhook_headers(MSG_ID, _now(), BODY, secret)
    for i in range(len(BODY)):
        tampered = BODY[:i] + bytes([BODY[i] ^ 1]) + BODY[i + 1 :]
        with pytest.raises(WebhookVerificationError):
            verify(tampered, headers, secret=secret)


def test_verify_needs_a_key_and_rejects_malformed_keys() -> None:
    headers = webhook_headers(MSG_ID, _now(), BODY, new_webhook_secret())
    with pytest.raises(ValueError):
        verify(BODY, headers)
    with pytest.raises(ValueError):
        verify(BODY, headers, public_key="whpk_c2hvcnQ=")


# --- fuzzing -------------------------------------------------------------------------------------

_SECRET = new_webhook_secret()
_PRIVATE, _PUBLIC = new_signing_keypair()
_header_names = st.sampled_from(["webhook-id", "Webhook-Timestamp", "WEBHOOK-SIGNATURE", "other"])
_sig_items = st.one_of(
    st.text(max_size=30),
    st.builds(lambda v, s: f"{v},{s}", st.sampled_from(["v1", "v1a", "v2", ""]), st.text(max_size=90)),
    st.builds(
        lambda v, b: f"{v},{base64.b64encode(b).decode()}",
        st.sampled_from(["v1", "v1a"]),
        st.binary(max_size=70),
    ),
)
_header_values = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.lists(_sig_items, max_size=4).map(" ".join),
)


@settings(max_examples=400, deadline=None)
@given(
    body=st.binary(max_size=200),
    headers=st.dictionaries(st.one_of(_header_names, st.text(max_size=20)), _header_values, max_size=5),
)
def test_verify_fuzz_only_ever_raises_verification_error(body: bytes, headers: dict[str, str]) -> None:
    try:
        verify(body, headers, secret=_SECRET, public_key=_PUBLIC, now=time.time())
    except WebhookVerificationError:
        return
    pytest.fail("random headers verified")  # pragma: no cover


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300), msg_id=st.text(min_size=1, max_size=40).filter(lambda s: " " not in s))
def test_verify_roundtrip_for_arbitrary_bodies(body: bytes, msg_id: str) -> None:
    try:
        msg_id.encode()
    except UnicodeEncodeError:
        return
    ts = _now()
    headers = webhook_headers(msg_id, ts, body, _SECRET, signing_key=_PRIVATE)
    verify(body, headers, secret=_SECRET)
    verify(body, headers, public_key=_PUBLIC)
    with pytest.raises(WebhookVerificationError):
        verify(body + b"!", headers, secret=_SECRET, public_key=_PUBLIC)
