"""`make run` on a fresh machine: the first start prints an API key that works, once."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.acceptance.harness import Server

_KEY = re.compile(r"API key\s+(gwk_[A-Za-z0-9_-]+)")


class FirstRunServer(Server):
    def env(self) -> dict[str, str]:
        env = super().env()
        env.pop("GATEWAY_BOOTSTRAP_API_KEY")
        return env


def test_first_start_prints_a_working_key_once(tmp_path: Path) -> None:
    srv = FirstRunServer(root=tmp_path / "fresh")
    srv.start()
    try:
        assert srv.log_path is not None
        banner = srv.log_path.read_text()
        found = _KEY.findall(banner)
        assert len(found) == 1, banner
        key = found[0]
        assert f"http://127.0.0.1:{srv.port}" in banner
        r = httpx.post(
            f"{srv.base}/v1/jobs",
            json={"message_input": "hello", "message_output": "hi"},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert r.status_code == 202, r.text
    finally:
        srv.stop()
    srv.log_path.write_text("")
    srv.start()  # same database: the key exists, so none is printed again
    try:
        assert _KEY.findall(srv.log_path.read_text()) == []
        assert "gateway keys create" in srv.log_path.read_text()
        r = httpx.get(f"{srv.base}/v1/jobs", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200
    finally:
        srv.stop()
