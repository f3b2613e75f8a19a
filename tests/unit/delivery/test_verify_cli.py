"""`gateway verify` as a receiver's operator uses it: body on stdin, headers as flags."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest

from gateway.cli import main
from gateway.crypto import new_signing_keypair, new_webhook_secret
from gateway.delivery.signing import webhook_headers

BODY = b'{"event":"job.completed","job_id":"job_1"}\n'


class _Stdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], body: bytes, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", _Stdin(body))
    code = main(["verify", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _flags(headers: dict[str, str]) -> list[str]:
    return [
        "--id",
        headers["webhook-id"],
        "--timestamp",
        headers["webhook-timestamp"],
        "--signature",
        headers["webhook-signature"],
    ]


def test_valid(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    secret = new_webhook_secret()
    headers = webhook_headers("msg_1", int(time.time()), BODY, secret)
    code, out, _ = _run(monkeypatch, capsys, BODY, "--secret", secret, *_flags(headers))
    assert (code, out) == (0, "valid\n")


def test_body_is_read_exactly_trailing_newline_included(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = new_webhook_secret()
    headers = webhook_headers("msg_1", int(time.time()), BODY, secret)
    code, out, _ = _run(monkeypatch, capsys, BODY.rstrip(b"\n"), "--secret", secret, *_flags(headers))
    assert code == 1
    assert out == "invalid: no matching signature found\n"


def test_stale_timestamp_and_no_tolerance(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = new_webhook_secret()
    headers = webhook_headers("msg_1", int(time.time()) - 3600, BODY, secret)
    code, out, _ = _run(monkeypatch, capsys, BODY, "--secret", secret, *_flags(headers))
    assert (code, out) == (1, "invalid: webhook-timestamp too old\n")
    code, out, _ = _run(
        monkeypatch, capsys, BODY, "--secret", secret, "--tolerance", "7200", *_flags(headers)
    )
    assert (code, out) == (0, "valid\n")
    code, out, _ = _run(monkeypatch, capsys, BODY, "--secret", secret, "--no-tolerance", *_flags(headers))
    assert (code, out) == (0, "valid\n")


def test_public_key_and_secret_from_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = new_webhook_secret()
    private, public = new_signing_keypair()
    headers = webhook_headers("msg_1", int(time.time()), BODY, secret, signing_key=private)
    code, out, _ = _run(monkeypatch, capsys, BODY, "--public-key", public, *_flags(headers))
    assert (code, out) == (0, "valid\n")
    monkeypatch.setenv("GATEWAY_WEBHOOK_SECRET", secret)
    code, out, _ = _run(monkeypatch, capsys, BODY, *_flags(headers))
    assert (code, out) == (0, "valid\n")


def test_usage_errors_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GATEWAY_WEBHOOK_SECRET", raising=False)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": "1", "webhook-signature": "v1,x"}
    code, out, err = _run(monkeypatch, capsys, BODY, *_flags(headers))
    assert code == 2 and out == "" and "--secret" in err
    code, out, err = _run(monkeypatch, capsys, BODY, "--public-key", "whpk_bad", *_flags(headers))
    assert code == 2 and "public key" in err


def test_as_a_real_process() -> None:
    secret = new_webhook_secret()
    headers = webhook_headers("msg_1", int(time.time()), BODY, secret)
    args = [sys.executable, "-m", "gateway.cli", "verify", "--secret", secret, *_flags(headers)]
    ok = subprocess.run(args, input=BODY, capture_output=True, timeout=30, check=False)
    assert (ok.returncode, ok.stdout) == (0, b"valid\n")
    bad = subprocess.run(args, input=BODY + b" ", capture_output=True, timeout=30, check=False)
    assert bad.returncode == 1
    assert bad.stdout.startswith(b"invalid: ")
