"""Shared fixtures for the hostile-input suite: real `gateway serve` processes on loopback.

Every test here drives the gateway as an attacker or a careless client would, over real HTTP, and
checks afterwards that the process is still alive and answering, so a crash is never mistaken
for a refusal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType

import httpx

from tests.acceptance.harness import Server


@contextlib.contextmanager
def running(root: Path, **env: str) -> Iterator[Server]:
    """A `gateway serve` subprocess (workers included) with `env` on top of the harness defaults."""
    server = Server(root, env_overrides=dict(env))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def assert_alive(server: Server) -> None:
    """The process has not exited and /healthz still answers at once."""
    assert server.proc is not None and server.proc.poll() is None, _log_tail(server)
    response = httpx.get(f"{server.base}/healthz", timeout=2.0)
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ok"}


def _log_tail(server: Server) -> str:
    if server.log_path is None or not server.log_path.exists():
        return "server exited (no log)"
    return "server exited:\n" + server.log_path.read_text(errors="replace")[-4000:]


def auth(key: str) -> Mapping[str, str]:
    return {"Authorization": f"Bearer {key}"}


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise TimeoutError in the block after `seconds`, so an endless loop in pure Python fails the
    test instead of hanging the suite (main thread only; elsewhere the block just runs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"{what} did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
