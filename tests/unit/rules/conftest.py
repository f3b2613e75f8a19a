"""Shared fixtures: compiled policies are built once per session (compiling is the slow part)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rules import CompiledPolicy, compile_policy, load_policy_file

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def default_policy() -> CompiledPolicy:
    return load_policy_file(REPO / "config" / "policies" / "default.toml")


@pytest.fixture(scope="session")
def pii_policy() -> CompiledPolicy:
    return compile_policy({"inbound": {"packs": ["pii"]}}, "pii")


@pytest.fixture(scope="session")
def secrets_policy() -> CompiledPolicy:
    return compile_policy({"inbound": {"packs": ["secrets"]}}, "secrets")


@pytest.fixture(scope="session")
def injection_policy() -> CompiledPolicy:
    return compile_policy({"inbound": {"packs": ["prompt_injection"]}}, "injection")
