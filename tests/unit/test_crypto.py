"""Secrets at rest, key files and key formats."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gateway.crypto import (
    SecretBox,
    SecretBoxError,
    hash_api_key,
    load_secret_key,
    new_api_key,
    new_signing_keypair,
    new_webhook_secret,
)
from gateway.delivery.signing import sign_v1a, verify

# --- load_secret_key -------------------------------------------------------------------------------


def test_configured_base64_key_is_used_as_is(tmp_path: Path) -> None:
    raw = os.urandom(32)
    assert load_secret_key(base64.b64encode(raw).decode(), tmp_path) == raw
    assert load_secret_key(base64.urlsafe_b64encode(raw).decode().rstrip("="), tmp_path) == raw
    assert load_secret_key("  " + base64.b64encode(raw).decode() + "\n", tmp_path) == raw
    assert not (tmp_path / "secret.key").exists()


def test_configured_passphrase_is_stretched_deterministically(tmp_path: Path) -> None:
    a = load_secret_key("correct horse battery staple", tmp_path)
    assert len(a) == 32
    assert load_secret_key("correct horse battery staple", tmp_path) == a
    assert load_secret_key("correct horse battery stapler", tmp_path) != a
    # base64 of the wrong length is a passphrase, not an error
    assert len(load_secret_key(base64.b64encode(b"short").decode(), tmp_path)) == 32


def test_empty_configured_key_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_secret_key("   ", tmp_path)


def test_key_file_is_created_once_private_and_reused(tmp_path: Path) -> None:
    var = tmp_path / "deep" / "var"
    key = load_secret_key(None, var)
    path = var / "secret.key"
    assert len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert base64.b64decode(path.read_text().strip()) == key
    assert load_secret_key(None, var) == key
    assert [p.name for p in var.iterdir()] == ["secret.key"]  # no temp files left behind


def test_corrupt_key_file_is_refused_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_text("not a key\n")
    with pytest.raises(ValueError, match="refusing to replace"):
        load_secret_key(None, tmp_path)
    assert path.read_text() == "not a key\n"


def test_concurrent_threads_agree_on_one_key(tmp_path: Path) -> None:
    results: list[bytes] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        results.append(load_secret_key(None, tmp_path))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert len(set(results)) == 1


def test_concurrent_processes_agree_on_one_key(tmp_path: Path) -> None:
    code = (
        "import sys, pathlib; from gateway.crypto import load_secret_key; "
        "print(load_secret_key(None, pathlib.Path(sys.argv[1])).hex())"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    keys = {p.communicate(timeout=30)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(keys) == 1
    assert bytes.fromhex(keys.pop()) == load_secret_key(None, tmp_path)


# --- SecretBox -------------------------------------------------------------------------------------


def test_secret_box_roundtrip_and_fresh_nonces() -> None:
    box = SecretBox(os.urandom(32))
    secret = new_webhook_secret().encode()
    a = box.encrypt(secret, b"job_1")
    b = box.encrypt(secret, b"job_1")
    assert a != b
    assert secret not in a
    assert len(a) == 1 + 12 + len(secret) + 16
    assert box.decrypt(a, b"job_1") == secret
    assert box.decrypt(b, b"job_1") == secret


def test_secret_box_detects_every_single_bit_flip() -> None:
    box = SecretBox(os.urandom(32))
    token = box.encrypt(b"whsec_abc", b"job_1")
    for i in range(len(token)):
        for bit in (0x01, 0x80):
            tampered = token[:i] + bytes([token[i] ^ bit]) + token[i + 1 :]
            with pytest.raises(SecretBoxError):
                box.decrypt(tampered, b"job_1")


def test_secret_box_wrong_key_aad_or_truncation() -> None:
    key = os.urandom(32)
    token = SecretBox(key).encrypt(b"whsec_abc", b"job_1")
    with pytest.raises(SecretBoxError):
        SecretBox(os.urandom(32)).decrypt(token, b"job_1")
    with pytest.raises(SecretBoxError):
        SecretBox(key).decrypt(token, b"job_2")
    with pytest.raises(SecretBoxError):
        SecretBox(key).decrypt(token[:20], b"job_1")
    with pytest.raises(SecretBoxError):
        SecretBox(key).decrypt(b"", b"job_1")


def test_secret_box_needs_a_32_byte_key() -> None:
    with pytest.raises(ValueError):
        SecretBox(b"short")


# --- key formats -----------------------------------------------------------------------------------


def test_webhook_secret_format() -> None:
    secrets = {new_webhook_secret() for _ in range(100)}
    assert len(secrets) == 100
    for s in secrets:
        assert s.startswith("whsec_")
        assert len(base64.b64decode(s[6:], validate=True)) == 32


def test_api_key_format_and_hash() -> None:
    key = new_api_key()
    assert key.startswith("gwk_")
    assert len(key) == 4 + 43
    assert set(key[4:]) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert new_api_key() != key
    digest = hash_api_key(key)
    assert len(digest) == 64
    assert int(digest, 16) >= 0
    assert hash_api_key(key) == digest
    assert hash_api_key(key + "x") != digest


def test_signing_keypair_signs_and_verifies() -> None:
    private, public = new_signing_keypair()
    assert private.startswith("whsk_")
    assert public.startswith("whpk_")
    assert len(base64.b64decode(private[5:])) == 32
    assert len(base64.b64decode(public[5:])) == 32
    sig = sign_v1a(private, "msg_1", 1700000000, b"{}")
    headers = {"webhook-id": "msg_1", "webhook-timestamp": "1700000000", "webhook-signature": sig}
    verify(b"{}", headers, public_key=public, now=1700000000)
