"""Standard Webhooks signatures: `v1` (HMAC-SHA256) and `v1a` (ed25519), signing and verifying.

The signed content is `{webhook-id}.{webhook-timestamp}.{body}`; signatures travel in one
`webhook-signature` header as a space-separated list of `version,base64`, so a receiver can rotate
secrets or move from symmetric to asymmetric keys without a flag day.

Signing runs once per delivery attempt, so decoded keys are cached: the base64 decode and the
ed25519 key load happen once per secret, and a `v1` signature costs one C-level HMAC call.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import re
import time
from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gateway import __version__

USER_AGENT = f"llm-webhook-gateway/{__version__}"
DEFAULT_TOLERANCE_SECONDS = 300

_SECRET_PREFIX = "whsec_"
_PRIVATE_PREFIX = "whsk_"
_PUBLIC_PREFIX = "whpk_"
_TIMESTAMP_RE = re.compile(r"[0-9]{1,15}")


class WebhookVerificationError(Exception):
    """The webhook is not authentic or not fresh; the message says which check failed."""


@functools.lru_cache(maxsize=8192)
def _hmac_key(secret: str) -> bytes:
    """Decode a `whsec_` secret exactly as the reference verifiers do (lenient base64, any padding).

    Matching their decoding matters more than strictness: a receiver's verifier and our signer
    must derive the same key bytes from the same string.
    """
    body = secret[len(_SECRET_PREFIX) :] if secret.startswith(_SECRET_PREFIX) else secret
    try:
        key = base64.b64decode(body + "==")
    except (binascii.Error, ValueError) as exc:
        raise ValueError("webhook secret is not valid base64") from exc
    if not key:
        raise ValueError("webhook secret is empty")
    return key


def _raw_key(text: str, prefix: str, what: str) -> bytes:
    body = text[len(prefix) :] if text.startswith(prefix) else text
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{what} is not valid base64") from exc
    if len(raw) != 32:
        raise ValueError(f"{what} must be base64 of 32 bytes, got {len(raw)}")
    return raw


@functools.lru_cache(maxsize=1024)
def _private_key(private_key: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(_raw_key(private_key, _PRIVATE_PREFIX, "signing key"))


@functools.lru_cache(maxsize=1024)
def _public_key(public_key: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(_raw_key(public_key, _PUBLIC_PREFIX, "public key"))


def _signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{msg_id}.{timestamp}.".encode() + body


def _hmac_v1(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    return hmac.digest(key, _signed_content(msg_id, timestamp, body), "sha256")


def sign_v1(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,` + base64(HMAC-SHA256(key, id.timestamp.body)); key = base64-decoded `whsec_` secret."""
    digest = _hmac_v1(_hmac_key(secret), msg_id, timestamp, body)
    return "v1," + base64.b64encode(digest).decode("ascii")


def sign_v1a(private_key: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1a,` + base64(ed25519 signature of id.timestamp.body) with a `whsk_` seed."""
    signature = _private_key(private_key).sign(_signed_content(msg_id, timestamp, body))
    return "v1a," + base64.b64encode(signature).decode("ascii")


def webhook_headers(
    msg_id: str, timestamp: int, body: bytes, secret: str, signing_key: str | None = None
) -> dict[str, str]:
    """Every header one attempt carries; call it per attempt (the timestamp changes on retries)."""
    signature = sign_v1(secret, msg_id, timestamp, body)
    if signing_key is not None:
        signature += " " + sign_v1a(signing_key, msg_id, timestamp, body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


def _header(lowered: Mapping[str, str], name: str) -> str:
    value = lowered.get(name)
    if not value:
        raise WebhookVerificationError(f"missing required header {name}")
    return value


def verify(
    body: bytes,
    headers: Mapping[str, str],
    secret: str | None = None,
    public_key: str | None = None,
    tolerance_seconds: int | None = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> None:
    """Raise `WebhookVerificationError` unless one listed signature matches and the timestamp is fresh.

    `v1` signatures are checked with `secret`, `v1a` ones with `public_key`; other versions are
    skipped (forward compatibility). `tolerance_seconds=None` skips the freshness check, which a
    receiver should only do when replaying stored webhooks by hand. Comparisons are constant-time.
    A malformed key is the caller's mistake and raises `ValueError` instead.
    """
    if secret is None and public_key is None:
        raise ValueError("verify() needs a secret (v1) or a public key (v1a)")
    hmac_key = _hmac_key(secret) if secret is not None else None
    ed_key = _public_key(public_key) if public_key is not None else None

    lowered: dict[str, str] = {}
    for name, value in headers.items():
        if isinstance(name, str) and isinstance(value, str):
            lowered.setdefault(name.lower(), value)
    msg_id = _header(lowered, "webhook-id")
    ts_text = _header(lowered, "webhook-timestamp").strip()
    sig_header = _header(lowered, "webhook-signature")

    if not _TIMESTAMP_RE.fullmatch(ts_text):
        raise WebhookVerificationError("invalid webhook-timestamp: must be integer Unix seconds")
    timestamp = int(ts_text)
    if tolerance_seconds is not None:
        current = time.time() if now is None else now
        if timestamp < current - tolerance_seconds:
            raise WebhookVerificationError("webhook-timestamp too old")
        if timestamp > current + tolerance_seconds:
            raise WebhookVerificationError("webhook-timestamp too new")

    try:
        content = _signed_content(msg_id, timestamp, body)
    except UnicodeEncodeError:
        raise WebhookVerificationError("invalid webhook-id: not encodable as UTF-8") from None
    expected_v1 = hmac.digest(hmac_key, content, "sha256") if hmac_key is not None else None
    for item in sig_header.split(" "):
        version, sep, encoded = item.partition(",")
        if not sep:
            continue
        if version == "v1" and expected_v1 is not None:
            given = _b64(encoded)
            if given is not None and hmac.compare_digest(expected_v1, given):
                return
        elif version == "v1a" and ed_key is not None:
            given = _b64(encoded)
            if given is None or len(given) != 64:
                continue
            try:
                ed_key.verify(given, content)
            except InvalidSignature:
                continue
            return
    raise WebhookVerificationError("no matching signature found")


def _b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
