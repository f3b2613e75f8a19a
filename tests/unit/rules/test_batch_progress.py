"""Regression: a batch scan must always make progress (found by fuzzing, tests/hostile/test_fuzz.py).

A prompt-injection gate match that started past the end of its text (in the gap before the next
one) sent the scan position back to where it was, so the same match was found forever and a
worker hung on three short texts.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from rules import compile_policy

_TEXTS = [
    "[e\x1fçÞ\x00\U00076084T_´\U000ed889\x88\x06\x1f\x16äª{\x10x\x043a4111 1111 1111 1111system prompt:",
    "system prompt:4111 1111 1111 1111system prompt:",
    "[e\x1fçÞ\x00\U00076084T_´\U000ed889\x88\x06\x1f\x16äª{\x10x\x043a4111 1111 1111 1111system prompt:",
]


@pytest.fixture
def deadline() -> Iterator[None]:
    def hung(*_: object) -> None:
        raise TimeoutError("the scan did not finish: it is looping")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("action", ["redact", "flag", "block"])
def test_batch_of_adjacent_injection_gates_finishes_and_agrees(deadline: None, action: str) -> None:
    policy = compile_policy(
        {
            "inbound": {
                "packs": ["pii", "prompt_injection", "unicode"],
                "actions": {"prompt_injection": action},
            }
        },
        "t",
    )
    batch = policy.scan_many(_TEXTS, "inbound")
    assert [v.to_dict() for v in batch] == [policy.scan(t, "inbound").to_dict() for t in _TEXTS]
