"""The `unicode` pack: characters that change what a model reads without changing what a human sees.

Zero-width and other invisible format characters split words so that filters miss them; bidi
overrides reorder text on screen ("Trojan Source"); Unicode tag characters (U+E0000 block) carry
whole ASCII messages invisibly. Each run of them is one match, meant to be stripped or blocked.

Legitimate uses are left alone: a zero-width joiner inside an emoji sequence or an Indic/Arabic
word, a variation selector after a symbol, the tag characters of a subdivision flag emoji.
"""

from __future__ import annotations

from rules.detectors.base import Doc, Finding, RuleInfo, compile_re2, iter_nonascii

CATEGORY = "unicode"

INVISIBLE = "unicode.invisible"
BIDI = "unicode.bidi"
TAGS = "unicode.tags"

RULES: tuple[RuleInfo, ...] = (
    RuleInfo(
        INVISIBLE, CATEGORY, "INVISIBLE_CHARACTER", "", "zero-width and other invisible format characters"
    ),
    RuleInfo(BIDI, CATEGORY, "BIDI_CONTROL", "", "bidirectional embedding / override / isolate controls"),
    RuleInfo(TAGS, CATEGORY, "TAG_CHARACTER", "", "Unicode tag characters (invisible ASCII smuggling)"),
)

_BIDI_CHARS = "\u202a-\u202e\u2066-\u2069"
_TAG_CHARS = "\U000e0000-\U000e007f"
_INVISIBLE_CHARS = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2060-\u2065\u206a-\u206f\u3164"
    "\ufeff\uffa0\ufff9-\ufffb\U0001d173-\U0001d17a\U000e0100-\U000e01ef\ufe00-\ufe0f"
)
_GATE = compile_re2(f"[{_BIDI_CHARS}{_TAG_CHARS}{_INVISIBLE_CHARS}]+".encode())
_BIDI = frozenset(chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_JOINERS = frozenset("\u200c\u200d\u200e\u200f")  # ZWNJ, ZWJ, LRM, RLM: needed by some scripts
_SELECTORS = frozenset(chr(c) for c in range(0xFE00, 0xFE10))
_BLACK_FLAG = "\U0001f3f4"


def _rule_of(c: str) -> str:
    if c in _BIDI:
        return BIDI
    if 0xE0000 <= ord(c) <= 0xE007F:
        return TAGS
    return INVISIBLE


def _legit(text: str, s: int, e: int, seg_start: int, seg_end: int) -> bool:
    """A single joiner or selector in a script or emoji that needs it; a flag's tag sequence."""
    run = text[s:e]
    prev = text[s - 1] if s > seg_start else ""
    nxt = text[e] if e < seg_end else ""
    if len(run) == 1 and run in _JOINERS:
        return bool(prev) and bool(nxt) and not prev.isascii() and not nxt.isascii()
    if len(run) == 1 and run in _SELECTORS:
        return bool(prev) and not prev.isascii()
    if prev == _BLACK_FLAG and run.endswith("\U000e007f") and 3 <= len(run) <= 8:
        return all(0xE0030 <= ord(c) <= 0xE007A for c in run[:-1])
    return False


class UnicodeDetector:
    """Finds runs of invisible, bidi-control and tag characters."""

    category = CATEGORY

    @property
    def rules(self) -> tuple[RuleInfo, ...]:
        return RULES

    def find(self, doc: Doc) -> list[Finding]:
        if doc.ascii:
            return []
        text = doc.text
        out: list[Finding] = []
        for s, e in iter_nonascii(_GATE, doc):
            seg_start, seg_end = doc.bounds(s)
            if _legit(text, s, e, seg_start, seg_end):
                continue
            # split the run where the kind of character changes: each kind is its own rule
            start = s
            kind = _rule_of(text[s])
            for i in range(s + 1, e):
                k = _rule_of(text[i])
                if k != kind:
                    out.append((start, i, kind, 1.0))
                    start, kind = i, k
            out.append((start, e, kind, 1.0))
        return out
