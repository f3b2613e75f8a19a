"""Unicode tricks that hide words from patterns, and their undoing.

A zero-width space inside `bob@example.com` or `AKIAIOSFODNN7EXAMPLE`, a word spelled in tag
characters or full-width letters, a Cyrillic `о` inside a Latin word: each leaves the text
looking (or, to a model, reading) the same while no pattern matches it. `tricky_texts` finds the
texts of a document that hold such a trick, `normalize` undoes them with an offset map back to
the original, so a detector can scan the normalised text and report spans of the original.
"""

from __future__ import annotations

import re
import unicodedata

from rules.detectors.base import Doc, compile_re2, next_span

#: Where a text hides or disguises words: format characters (zero-width, bidi), tag characters,
#: variation selectors, full-width letters, and Cyrillic/Greek letters touching Latin ones
#: ("іgnore" with a Cyrillic і). Texts with a match are normalised before they are scanned.
_TRICKS = compile_re2(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef\uff10-\uff19\uff21-\uff3a"
    "\uff41-\uff5a]|[A-Za-z][\u0370-\u03ff\u0400-\u04ff]|[\u0370-\u03ff\u0400-\u04ff][A-Za-z]".encode()
)


#: Cyrillic and Greek letters that render like Latin ones ("іgnоre" with Cyrillic і and о).
_CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁԛԝАВЕКМНОРСТХІЈЅԌαοιρτνκΑΒΕΗΙΚΜΝΟΡΤΧΥΖ",
    "aeopcyxijsdqwABEKMHOPCTXIJSGaoiptvkABEHIKMNOPTXYZ",
)
_NORMALIZE_RUNS = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef\uff01-\uff5e"
    "\u0370-\u03ff\u0400-\u04ff]+"
)


#: A text with its tricks undone, and where each of its characters came from (see `normalize`).
Normalized = tuple[str, list[int]]


def normalize(text: str) -> Normalized:
    """Undo the Unicode tricks that hide words from patterns; return the text and an offset map.

    Format characters (zero-width, bidi, variation selectors) are dropped, Unicode tag characters
    are decoded to the ASCII they smuggle, full-width forms are folded, and Cyrillic/Greek
    look-alikes inside Latin words are mapped to Latin. `index[i]` is the position in `text` of
    normalised character i; `index[len]` is `len(text)`. Untouched stretches are copied whole.
    """
    out: list[str] = []
    index: list[int] = []
    n = len(text)
    pos = 0
    for run in _NORMALIZE_RUNS.finditer(text):
        start, end = run.span()
        out.append(text[pos:start])
        index.extend(range(pos, start))
        for i in range(start, end):
            c = text[i]
            o = ord(c)
            if 0xE0020 <= o <= 0xE007E:
                out.append(chr(o - 0xE0000))
            elif 0xFF01 <= o <= 0xFF5E:
                out.append(chr(o - 0xFEE0))
            elif 0x370 <= o <= 0x4FF:
                latin_near = (i > 0 and text[i - 1].isascii() and text[i - 1].isalpha()) or (
                    i + 1 < n and text[i + 1].isascii() and text[i + 1].isalpha()
                )
                out.append(c.translate(_CONFUSABLES) if latin_near else c)
            elif unicodedata.category(c) == "Cf" or 0xFE00 <= o <= 0xFE0F or 0xE0000 <= o <= 0xE01EF:
                continue
            else:
                out.append(c)
            index.append(i)
        pos = end
    out.append(text[pos:])
    index.extend(range(pos, n))
    index.append(n)
    return "".join(out), index


def tricky_texts(doc: Doc) -> dict[int, Normalized]:
    """The texts of `doc` that hold a Unicode trick (none when the document is ASCII), by index
    in order, each with its `normalize`d form: everyone who asks scans that form. Computed once
    per document, so the detectors and the engine share both the search and the normalising."""
    found = doc._tricky
    if found is None:
        found = {}
        if not doc.ascii:
            sub, picked = doc.nonascii()
            data = sub.data
            last = len(picked) - 1
            pos = 0
            while (hit := next_span(_TRICKS, data, pos)) is not None:
                j = sub.segment_index(sub.char(hit[0]))
                i = picked[j]
                found[i] = normalize(doc.segments[i])
                pos = len(data) if j == last else max(sub.byte_start(j + 1), hit[0] + 1)
        doc._tricky = found
    return found
