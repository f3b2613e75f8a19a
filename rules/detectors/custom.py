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

from rules.detectors.base import Doc, Finding, RuleInfo, iter_utf8, next_span

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
        self._automata: tuple[tuple[Any, bool, bool, _Prefilter | None], ...] = tuple(
            (automaton, fold, ascii_only, _Prefilter.of(keys, fold) if ascii_only else None)
            for fold in (True, False)
            for ascii_only in (True, False)
            if (
                built := self._automaton(
                    [r for r in keyword_rules if r.case_sensitive != fold], fold=fold, ascii_only=ascii_only
                )
            )
            is not None
            for automaton, keys in (built,)
        )
        self._regexes = tuple(
            (r.id, compile_regex(r.regex, r.case_sensitive)) for r in self._rules if r.regex is not None
        )

    @property
    def rules(self) -> tuple[RuleInfo, ...]:
        return self._infos

    @staticmethod
    def _automaton(rules: list[CustomRule], *, fold: bool, ascii_only: bool) -> tuple[Any, list[str]] | None:
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
        return automaton, list(entries)

    def find(self, doc: Doc) -> list[Finding]:
        out: list[Finding] = []
        for automaton, fold, ascii_only, prefilter in self._automata:
            if ascii_only:
                if prefilter is None:
                    view = doc.view.lower() if fold else doc.view
                    self._keywords(automaton, view.decode("ascii"), 0, doc, out)
                    continue
                # only the texts where some keyword occurs: the automaton walks a few of them
                # instead of the whole batch
                starts, ends = doc.starts, doc.ends
                for i in prefilter.texts(doc):
                    s, e = starts[i], ends[i]
                    segment = doc.view[s:e]
                    self._keywords(
                        automaton, (segment.lower() if fold else segment).decode("ascii"), s, doc, out
                    )
            else:
                if doc.ascii:
                    continue
                self._keywords(automaton, doc.lower if fold else doc.text, 0, doc, out)
        for rule_id, regex in self._regexes:
            for s, e in iter_utf8(regex, doc):
                out.append((s, e, rule_id, 1.0))
        return out

    @staticmethod
    def _keywords(automaton: Any, haystack: str, base: int, doc: Doc, out: list[Finding]) -> None:
        """Every occurrence in `haystack`, which is `doc.text[base:]` (lower-cased or not)."""
        text = doc.text
        n = len(text)
        for end, (length, owners) in automaton.iter(haystack):
            e = base + end + 1
            s = e - length
            before_word = s > 0 and _is_word(text[s - 1])
            after_word = e < n and _is_word(text[e])
            for rule_id, left, right in owners:
                if (left and before_word) or (right and after_word):
                    continue
                out.append((s, e, rule_id, 1.0))


class _Prefilter:
    """Which texts of a batch hold an occurrence of some ASCII keyword: one RE2 pass over the
    batch's ASCII view (a literal alternation runs several times faster than the automaton's
    walk over every character), so the automaton only walks the texts that have one.

    Exact: RE2's hits are leftmost-first, so every occurrence the automaton would report starts
    inside some hit. Only for keywords without "\\n" or NUL, which no occurrence can then reach
    across the separator between texts, and for lists of moderate size (RE2 builds a DFA).
    """

    __slots__ = ("_regex",)

    _MAX_KEYWORDS = 2000

    def __init__(self, keys: list[bytes], fold: bool) -> None:
        options = re2.Options()
        options.log_errors = False
        options.never_capture = True
        options.case_sensitive = not fold
        options.max_mem = 64 << 20
        self._regex = re2.compile(b"|".join(re2.escape(k) for k in keys), options)

    @classmethod
    def of(cls, keys: list[str], fold: bool) -> _Prefilter | None:
        raw = [k.encode("ascii") for k in keys]
        if not raw or len(raw) > cls._MAX_KEYWORDS or any(b"\n" in k or b"\x00" in k for k in raw):
            return None
        return cls(raw, fold)

    def texts(self, doc: Doc) -> list[int]:
        """Indices of the texts of `doc` with an occurrence, in order."""
        found: list[int] = []
        view = doc.view
        ends = doc.ends
        pos = 0
        while (hit := next_span(self._regex, view, pos)) is not None:
            i = doc.segment_index(hit[0])
            found.append(i)
            pos = max(ends[i] + 1, hit[0] + 1)  # one occurrence is enough: on to the next text
        return found
