"""Secrets at rest, API keys and webhook signing keys.

Webhook secrets must be recoverable (we sign with them on every attempt), so they are encrypted,
not hashed: AES-256-GCM under one server key (`GATEWAY_SECRET_KEY`, or `var/secret.key` created on
first start). API keys only ever need to be compared, so they are hashed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import secrets
import time
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gateway import rand

KEY_BYTES = 32
SECRET_KEY_FILENAME = "secret.key"
WEBHOOK_SECRET_PREFIX = "whsec_"
SIGNING_KEY_PREFIX = "whsk_"
PUBLIC_KEY_PREFIX = "whpk_"
API_KEY_PREFIX = "gwk_"

_HKDF_INFO = b"gateway-secret-key"
_BOX_VERSION = b"\x01"
_NONCE_BYTES = 12
_TAG_BYTES = 16


class SecretBoxError(Exception):
    """A sealed secret could not be opened: tampered, truncated, or sealed under another key/aad."""


def _decode_key_b64(text: str) -> bytes | None:
    """The 32 raw bytes if `text` is (urlsafe) base64 of exactly 32 bytes, else None."""
    stripped = text.strip()
    if "+" in stripped or "/" in stripped:
        candidate = stripped
    else:  # urlsafe (or alphabet-neutral) base64: map to the standard alphabet first
        candidate = stripped.replace("-", "+").replace("_", "/")
    candidate += "=" * (-len(candidate) % 4)
    try:
        raw = base64.b64decode(candidate.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None
    return raw if len(raw) == KEY_BYTES else None


def _derive(passphrase: str) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=_HKDF_INFO)
    return hkdf.derive(passphrase.encode("utf-8"))


def load_secret_key(settings_secret: str | None, var_dir: Path) -> bytes:
    """The 32-byte server key that seals webhook secrets.

    A configured value is taken as base64 of 32 bytes when it is exactly that (what
    `openssl rand -base64 32` prints); any other string is stretched with HKDF-SHA256, so an operator
    may paste a long passphrase. Without a configured value the key lives in `var_dir/secret.key`,
    created on first start. Losing that file makes every stored webhook secret unreadable, which is
    why it is created once and never rewritten.
    """
    if settings_secret is not None:
        if not settings_secret.strip():
            raise ValueError("GATEWAY_SECRET_KEY is set but empty")
        raw = _decode_key_b64(settings_secret)
        return raw if raw is not None else _derive(settings_secret)
    return _load_or_create_key_file(Path(var_dir) / SECRET_KEY_FILENAME)


def _read_key_file(path: Path) -> bytes:
    # A concurrent creator may be between "file exists" and "file written" when we use the
    # O_EXCL fallback; wait briefly for the content instead of failing or overwriting it.
    deadline = time.monotonic() + 2.0
    while True:
        text = path.read_text(encoding="ascii", errors="replace").strip()
        if text or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    raw = _decode_key_b64(text)
    if raw is None:
        raise ValueError(f"{path} does not hold base64 of a 32-byte key; refusing to replace it")
    return raw


def _load_or_create_key_file(path: Path) -> bytes:
    if path.exists():
        return _read_key_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    content = base64.b64encode(secrets.token_bytes(KEY_BYTES)) + b"\n"
    # Write a private temp file, then link it into place: link() fails if the name exists, so two
    # processes starting at once agree on one key, and nobody ever reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return _read_key_file(path)
        except OSError:
            # Filesystems without hard links: fall back to an exclusive create of the final name.
            try:
                fd2 = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return _read_key_file(path)
            with os.fdopen(fd2, "wb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return base64.b64decode(content.strip())


class SecretBox:
    """AES-256-GCM with a random 96-bit nonce: `version || nonce || ciphertext+tag`.

    The version byte lets the format change later without guessing; it is authenticated together
    with the caller's `aad` (bind a sealed secret to its row, e.g. the job id, so a ciphertext copied
    onto another row does not open). Random nonces are safe far beyond the number of secrets one
    gateway will ever seal (the birthday bound is ~2^32 messages per key).
    """

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"SecretBox needs a {KEY_BYTES}-byte key, got {len(key)} bytes")
        self._aead = AESGCM(key)

    def encrypt(self, plaintext: bytes, aad: bytes) -> bytes:
        nonce = rand.token_bytes(_NONCE_BYTES)
        return _BOX_VERSION + nonce + self._aead.encrypt(nonce, plaintext, _BOX_VERSION + aad)

    def decrypt(self, token: bytes, aad: bytes) -> bytes:
        if len(token) < 1 + _NONCE_BYTES + _TAG_BYTES:
            raise SecretBoxError("sealed secret is truncated")
        if token[:1] != _BOX_VERSION:
            raise SecretBoxError(f"unknown sealed-secret version {token[0]}")
        nonce = token[1 : 1 + _NONCE_BYTES]
        try:
            return self._aead.decrypt(nonce, token[1 + _NONCE_BYTES :], _BOX_VERSION + aad)
        except InvalidTag:
            raise SecretBoxError("sealed secret failed authentication (tampered, wrong key or aad)") from None


def new_webhook_secret() -> str:
    """`whsec_` + base64 of 32 random bytes: the Standard Webhooks symmetric secret format."""
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(rand.token_bytes(KEY_BYTES)).decode("ascii")


def new_api_key() -> str:
    """`gwk_` + 43 URL-safe characters (256 random bits); the prefix makes leaked keys greppable."""
    return API_KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def hash_api_key(key: str) -> str:
    """Hex SHA-256 of the key: what the store keeps and looks keys up by.

    A slow password hash (bcrypt, argon2) exists to make guessing low-entropy human passwords
    expensive. API keys are 256 random bits, so brute force is already hopeless and a fast hash loses
    nothing; it also keeps authentication at microseconds per request and lets the hash be an
    indexed, exact-match lookup column (no per-row salt to iterate over).
    """
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_signing_keypair() -> tuple[str, str]:
    """A Standard Webhooks asymmetric (`v1a`, ed25519) key pair: (`whsk_...`, `whpk_...`).

    Both halves are base64 of the raw 32-byte keys; the private half is the ed25519 seed, which is
    what the reference libraries (e.g. the Go one's `ed25519.NewKeyFromSeed`) decode it as.
    """
    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return (
        SIGNING_KEY_PREFIX + base64.b64encode(seed).decode("ascii"),
        PUBLIC_KEY_PREFIX + base64.b64encode(public).decode("ascii"),
    )
