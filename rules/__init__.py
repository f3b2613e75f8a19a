"""The content-filter engine: compile a policy once, scan text many times.

    from rules import load_policy_file
    policy = load_policy_file("config/policies/default.toml")
    verdict = policy.scan("my card is 4111 1111 1111 1111", "inbound")
    verdict.verdict, verdict.message   # ("redacted", "my card is [CREDIT_CARD]")

Pure computation apart from reading policy files; never imports the `gateway` package.
"""

from __future__ import annotations

from rules.engine import CompiledPolicy, compile_policy
from rules.loader import load_policy_dir, load_policy_file
from rules.model import Match, Verdict
from rules.policy import PolicyError

__all__ = [
    "CompiledPolicy",
    "Match",
    "PolicyError",
    "Verdict",
    "compile_policy",
    "load_policy_dir",
    "load_policy_file",
]
