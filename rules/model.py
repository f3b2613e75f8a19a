"""The values the engine hands out: a `Match` per finding and one `Verdict` per scanned text.

They are frozen so a verdict computed once can be shared between the job pipeline, the webhook body
and the API response without anyone mutating what another part already reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ALLOWED = "allowed"
REDACTED = "redacted"
BLOCKED = "blocked"

BLOCK = "block"
REDACT = "redact"
STRIP = "strip"
FLAG = "flag"
OFF = "off"

#: Actions a policy may give a rule. `off` disables the rule; `strip` removes the span outright.
ACTIONS: tuple[str, ...] = (BLOCK, REDACT, STRIP, FLAG, OFF)

#: Which action wins when two matches disagree about the same characters.
SEVERITY: dict[str, int] = {BLOCK: 3, REDACT: 2, STRIP: 2, FLAG: 1, OFF: 0}

DIRECTIONS: tuple[str, ...] = ("inbound", "outbound")


@dataclass(frozen=True, slots=True)
class Match:
    """One rule firing on `text[start:end]` (Python str indices into the original text)."""

    rule: str
    category: str
    action: str
    start: int
    end: int
    score: float
    type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "rule": self.rule,
            "category": self.category,
            "action": self.action,
            "start": self.start,
            "end": self.end,
            "score": self.score,
        }
        if self.type is not None:
            data["type"] = self.type
        return data


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a rule set decided about one text.

    `message` is the text as it may travel on (redacted and stripped), or None when blocked: a
    blocked text must not leak through the verdict that blocked it.
    """

    verdict: str
    message: str | None
    matches: tuple[Match, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "message": self.message,
            "matches": [m.to_dict() for m in self.matches],
        }
