"""The `custom` pack: a tenant's own keyword lists and regular expressions.

Keywords go into Aho-Corasick automata (pyahocorasick), so a scan costs the same with ten terms
or a hundred thousand. Regexes are compiled with RE2, whose matching time is linear in the text
whatever the pattern: no tenant pattern can stall a worker with catastrophic backtracking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ahocorasick
import re2

from rules.detectors.base import Doc, Finding, RuleInfo, iter_utf8

CATEGORY = "custom"


@dataclass(frozen=True, slots=True)
class CustomRule:
    """A validated tenant rule: exactly one of `keywords` and `regex` is set."""

    id: str
    placeholder: str
    keywords: tuple[str, ...] = ()
    regex: str | None = None
    case_sensitive: bool = False
    whole_word: bool = True
    description: str = ""

    @property
    def type(self) -> str:
        return self.id.split(".", 1)[-1].upper().replace(".", "_").replace("-", "_")


class CustomPatternError(ValueError):
    """A regex RE2 refuses, or one that would match the empty string."""


def compile_regex(pattern: str, case_sensitive: bool) -> Any:
    """Compile a tenant regex with RE2 (for the text as UTF-8 bytes); raise a readable error."""
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = case_sensitive
    options.max_mem = 8 << 20
    try:
        compiled = re2.compile(pattern.encode("utf-8", errors="surrogatepass"), options)
    except re2.error as exc:
        detail = (
            exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        )
        raise CustomPatternError(f"RE2 cannot compile this pattern ({detail})") from None
    empty = compiled.search(b"")
    if empty is not None:
        raise CustomPatternError("the pattern matches the empty string, so it would match everywhere")
    return compiled


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"


class CustomDetector:
    """Runs one policy's keyword and regex rules."""

    category = CATEGORY

    def __init__(self, rules: Sequence[CustomRule]) -> None:
        self._rules = tuple(rules)
        self._infos = tuple(
            RuleInfo(r.id, CATEGORY, r.type, r.placeholder, r.description or "tenant rule")
            for r in self._rules
        )
        keyword_rules = [r for r in self._rules if r.keywords]
        # ASCII keywords are searched in the one-byte-per-character view of the batch (cheap to
        # lower-case); keywords with other characters in the real text.
        self._automata = tuple(
            (automaton, fold, ascii_only)
            for fold in (True, False)
            for ascii_only in (True, False)
            if (
                automaton := self._automaton(
                    [r for r in keyword_rules if r.case_sensitive != fold], fold=fold, ascii_only=ascii_only
                )
            )
            is not None
        )
        self._regexes = tuple(
            (r.id, compile_regex(r.regex, r.case_sensitive)) for r in self._rules if r.regex is not None
        )

    @property
    def rules(self) -> tuple[RuleInfo, ...]:
        return self._infos

    @staticmethod
    def _automaton(rules: list[CustomRule], *, fold: bool, ascii_only: bool) -> Any:
        entries: dict[str, list[tuple[str, bool, bool]]] = {}
        for rule in rules:
            for kw in rule.keywords:
                if kw.isascii() != ascii_only:
                    continue
                key = kw.lower() if fold else kw
                left = rule.whole_word and _is_word(kw[0])
                right = rule.whole_word and _is_word(kw[-1])
                entries.setdefault(key, []).append((rule.id, left, right))
        if not entries:
            return None
        automaton = ahocorasick.Automaton()
        for key, owners in entries.items():
            automaton.add_word(key, (len(key), tuple(owners)))
        automaton.make_automaton()
        return automaton

    def find(self, doc: Doc) -> list[Finding]:
        out: list[Finding] = []
        for automaton, fold, ascii_only in self._automata:
            if ascii_only:
                view = doc.view.lower() if fold else doc.view
                haystack = view.decode("ascii")
            else:
                if doc.ascii:
                    continue
                haystack = doc.lower if fold else doc.text
            self._keywords(automaton, haystack, doc, out)
        for rule_id, regex in self._regexes:
            for s, e in iter_utf8(regex, doc):
                out.append((s, e, rule_id, 1.0))
        return out

    @staticmethod
    def _keywords(automaton: Any, haystack: str, doc: Doc, out: list[Finding]) -> None:
        text = doc.text
        n = len(text)
        for end, (length, owners) in automaton.iter(haystack):
            e = end + 1
            s = e - length
            before_word = s > 0 and _is_word(text[s - 1])
            after_word = e < n and _is_word(text[e])
            for rule_id, left, right in owners:
                if (left and before_word) or (right and after_word):
                    continue
                out.append((s, e, rule_id, 1.0))
