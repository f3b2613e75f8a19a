"""What every detector shares: the rule description, the finding tuple and the scanned document.

A `Doc` holds one text or a whole batch joined into a single string. Scanning a batch as one
string is what makes the engine fast: each regex walks the batch once in C instead of being called
once per text, and the engine pays Python-level work only where something matched. Detectors must
therefore never look across a segment boundary; `Doc.bounds` gives them the segment around an
offset for any context window they need, and the engine rescans alone any text a match crossed.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import re2

try:
    _UNANCHORED: Any = re2._re2.RE2.Anchor.UNANCHORED
except AttributeError:  # pragma: no cover - a future re2 without these internals
    _UNANCHORED = None

#: (start, end, rule id, score): char offsets into `Doc.text`. A plain tuple because detectors
#: create many of them and the engine only sorts and groups them.
Finding = tuple[int, int, str, float]

#: Joins batch texts. Newlines keep line-anchored patterns behaving as they would at a text's
#: edge; the NUL in between is something no detector pattern consumes.
SEPARATOR = "\n\x00\n"
_SEP_BYTES = SEPARATOR.encode()
_SURROGATES = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """A rule a pack offers: its id, category, the entity type it finds and its placeholder."""

    id: str
    category: str
    type: str
    placeholder: str
    description: str


class Detector(Protocol):
    """A compiled pack: it knows its rules and finds them in a document."""

    category: str

    @property
    def rules(self) -> tuple[RuleInfo, ...]: ...

    def find(self, doc: Doc) -> list[Finding]: ...


def clean_text(text: str) -> str:
    """Replace lone surrogates by U+FFFD, char for char, so the text encodes as UTF-8.

    Offsets stay valid because each surrogate becomes exactly one replacement character.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text)
    return text


class Doc:
    """One or more texts joined by `SEPARATOR`, with offset bookkeeping for the detectors."""

    __slots__ = ("_byte_starts", "_data", "_lower", "_view", "ascii", "ends", "segments", "starts", "text")

    def __init__(self, texts: Sequence[str]) -> None:
        cleaned = [clean_text(t) for t in texts]
        self.segments: list[str] = cleaned
        starts: list[int] = []
        ends: list[int] = []
        pos = 0
        step = len(SEPARATOR)
        for t in cleaned:
            starts.append(pos)
            pos += len(t)
            ends.append(pos)
            pos += step
        self.starts = starts
        self.ends = ends
        self.text: str = cleaned[0] if len(cleaned) == 1 else SEPARATOR.join(cleaned)
        self.ascii: bool = self.text.isascii()
        self._data: bytes | None = None
        self._view: bytes | None = None
        self._byte_starts: list[int] | None = None
        self._lower: str | None = None

    @property
    def view(self) -> bytes:
        """The document as ASCII bytes, one byte per character (anything else becomes "?").

        Offsets into it are offsets into `text`, so RE2 patterns that only care about ASCII
        (digits, keys, tokens) can run on it with no offset conversion at all.
        """
        if self._view is None:
            self._view = self.text.encode("ascii", errors="replace")
        return self._view

    @property
    def data(self) -> bytes:
        """The document as UTF-8, for the RE2 patterns (which work on bytes without copying)."""
        if self._data is None:
            if self.ascii:
                self._data = self.view
            else:
                parts = [t.encode("utf-8") for t in self.segments]
                bstarts: list[int] = []
                pos = 0
                for p in parts:
                    bstarts.append(pos)
                    pos += len(p) + len(_SEP_BYTES)
                self._byte_starts = bstarts
                self._data = _SEP_BYTES.join(parts)
        return self._data

    @property
    def lower(self) -> str:
        """A lower-cased copy with the same length, for case-insensitive keyword automata."""
        if self._lower is None:
            low = self.text.lower()
            if len(low) != len(self.text):  # e.g. "İ" lowers to two characters: keep it as is
                low = "".join(c if len(c.lower()) != 1 else c.lower() for c in self.text)
            self._lower = low
        return self._lower

    def char(self, byte_offset: int) -> int:
        """Convert an offset into `data` to an offset into `text`."""
        if self.ascii:
            return byte_offset
        if self._byte_starts is None:
            _ = self.data
        assert self._byte_starts is not None
        i = bisect.bisect_right(self._byte_starts, byte_offset) - 1
        bstart = self._byte_starts[i]
        seg = self.segments[i]
        if seg.isascii():
            return self.starts[i] + (byte_offset - bstart)
        seg_bytes = len(seg.encode("utf-8"))
        rel = byte_offset - bstart
        if rel >= seg_bytes:  # inside the separator that follows
            return self.ends[i] + (rel - seg_bytes)
        data = self.data
        return self.starts[i] + len(data[bstart:byte_offset].decode("utf-8", errors="replace"))

    def segment_index(self, pos: int) -> int:
        """Which text `pos` lies in (the one before it when `pos` is in a separator)."""
        if len(self.starts) == 1:
            return 0
        return bisect.bisect_right(self.starts, pos) - 1

    def bounds(self, pos: int) -> tuple[int, int]:
        """The (start, end) of the text around `pos`: context windows must stay inside it."""
        if len(self.starts) == 1:
            return 0, self.ends[0]
        i = bisect.bisect_right(self.starts, pos) - 1
        return self.starts[i], self.ends[i]


def compile_re2(pattern: bytes, *, capture: bool = False) -> Any:
    """Compile an RE2 bytes pattern for the fixed packs (errors are bugs, so they raise)."""
    options = re2.Options()
    options.log_errors = False
    options.never_capture = not capture
    options.max_mem = 64 << 20  # room for the DFA of a joined pattern; allocated only as used
    return re2.compile(pattern, options)


def spans(regex: Any, data: bytes) -> Iterator[tuple[int, int]]:
    """Yield the (start, end) of each non-empty match of a compiled RE2 pattern in `data`.

    This drives the RE2 object under the `re2` module's `_Regexp` directly: the module's own
    `finditer` builds a Python match object per hit, which costs more than the scan itself when
    the engine only needs offsets. Falls back to `finditer` if the internals ever change.
    """
    raw = getattr(regex, "_regexp", None)
    if raw is None or _UNANCHORED is None:
        for m in regex.finditer(data):
            if m.end() > m.start():
                yield m.span()
        return
    match = raw.Match
    pos = 0
    end = len(data)
    while pos <= end:
        found = match(_UNANCHORED, data, pos, end)[0]
        s, e = found
        if s < 0:
            return
        if e > s:
            yield s, e
            pos = e
        else:
            pos = e + 1


def group_spans(regex: Any, data: bytes) -> Iterator[list[tuple[int, int]]]:
    """Like `spans`, for a pattern compiled with `capture=True`: yield every group's span.

    Unmatched groups have span (-1, -1); the first entry is the whole match.
    """
    raw = getattr(regex, "_regexp", None)
    if raw is None or _UNANCHORED is None:
        for m in regex.finditer(data):
            if m.end() > m.start():
                yield [m.span(i) for i in range(regex.groups + 1)]
        return
    match = raw.Match
    pos = 0
    end = len(data)
    while pos <= end:
        found = match(_UNANCHORED, data, pos, end)
        s, e = found[0]
        if s < 0:
            return
        if e > s:
            yield found
            pos = e
        else:
            pos = e + 1


def iter_view(regex: Any, doc: Doc) -> Iterator[tuple[int, int]]:
    """Spans of an RE2 pattern over `Doc.view`: they are char offsets into `Doc.text`."""
    return spans(regex, doc.view)


def iter_utf8(regex: Any, doc: Doc) -> Iterator[tuple[int, int]]:
    """Spans of an RE2 pattern over the UTF-8 `Doc.data`, converted to char offsets."""
    if doc.ascii:
        yield from spans(regex, doc.view)
        return
    char = doc.char
    for s, e in spans(regex, doc.data):
        yield char(s), char(e)
