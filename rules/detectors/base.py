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
from itertools import accumulate
from operator import add
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
_STEP = len(SEPARATOR)
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

    __slots__ = (
        "_byte_starts",
        "_data",
        "_last_char",
        "_lower",
        "_nonascii",
        "_tricky",
        "_view",
        "ascii",
        "ends",
        "segments",
        "starts",
        "text",
    )

    def __init__(self, texts: Sequence[str], _utf8: bytes | None = None) -> None:
        segments = list(texts)
        text = segments[0] if len(segments) == 1 else SEPARATOR.join(segments)
        self.ascii: bool = text.isascii()
        self._data: bytes | None = _utf8
        self._nonascii: tuple[Doc, list[int]] | None = None
        # see `rules.detectors.unhide.tricky_texts`: index -> (normalised text, offset map)
        self._tricky: dict[int, tuple[str, list[int]]] | None = None
        if not self.ascii and _utf8 is None:
            if len(segments) == 1:
                try:
                    self._data = text.encode("utf-8")
                except UnicodeEncodeError:  # lone surrogates: replaced char for char
                    text = clean_text(text)
                    segments = [text]
            elif self._split_off_nonascii(segments):  # cleaned some lone surrogates
                text = SEPARATOR.join(segments)
        self.segments: list[str] = segments
        self.text: str = text
        lengths = list(map(len, segments))
        starts = [0, *accumulate(map(_STEP.__add__, lengths))]
        starts.pop()
        self.starts: list[int] = starts
        self.ends: list[int] = list(map(add, starts, lengths))
        self._view: bytes | None = None
        self._byte_starts: list[int] | None = None
        # per text, the last (byte offset, chars from the text's start) converted: matches come in
        # order, so each conversion decodes only the gap since the previous one (linear, not
        # quadratic, in the number of matches)
        self._last_char: dict[int, tuple[int, int]] = {}
        self._lower: str | None = None

    def _split_off_nonascii(self, segments: list[str]) -> bool:
        """A batch with non-ASCII texts: build the sub-document of those texts (`nonascii`) from
        their own UTF-8, instead of encoding the whole batch, which is mostly ASCII and (with
        one character outside the BMP anywhere) 4 bytes per character as a `str`. Lone
        surrogates, which only non-ASCII texts can hold, are replaced in `segments` on the way;
        True if there were some."""
        picked = [i for i, t in enumerate(segments) if not t.isascii()]
        encoded: list[bytes] = []
        cleaned = False
        for i in picked:
            try:
                encoded.append(segments[i].encode("utf-8"))
            except UnicodeEncodeError:
                segments[i] = clean = clean_text(segments[i])
                encoded.append(clean.encode("utf-8"))
                cleaned = True
        self._nonascii = (Doc([segments[i] for i in picked], _SEP_BYTES.join(encoded)), picked)
        return cleaned

    @classmethod
    def single(cls, text: str) -> Doc:
        """`Doc([text])`, built without the batch bookkeeping (the engine's one-text path)."""
        doc = cls.__new__(cls)
        doc.ascii = ascii_ = text.isascii()
        doc._data = None
        if not ascii_:
            try:
                doc._data = text.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: replaced char for char
                text = clean_text(text)
        doc.segments = [text]
        doc.text = text
        doc.starts = [0]
        doc.ends = [len(text)]
        doc._view = None
        doc._byte_starts = None
        doc._last_char = {}
        doc._lower = None
        doc._nonascii = None
        doc._tricky = None
        return doc

    def nonascii(self) -> tuple[Doc, list[int]]:
        """The texts that are not pure ASCII, as their own document, and their indices here.

        Patterns that need real (UTF-8) characters only ever run on this sub-document: it is
        usually a small part of a batch, so encoding it and mapping offsets back stays cheap.
        """
        if self._nonascii is None:
            if self.ascii:
                self._nonascii = (Doc([""]), [])
            else:  # one text (a batch's sub-document is built with it)
                self._nonascii = (self, list(range(len(self.segments))))
        return self._nonascii

    @property
    def view(self) -> bytes:
        """The document as ASCII bytes, one byte per character (anything else becomes "?").

        Offsets into it are offsets into `text`, so RE2 patterns that only care about ASCII
        (digits, keys, tokens) can run on it with no offset conversion at all.
        """
        if self._view is None:
            if self.ascii or len(self.segments) == 1:
                self._view = self.text.encode("ascii", errors="replace")
            else:  # text by text: most are ASCII, copied as they are, not 4 bytes per character
                self._view = _SEP_BYTES.join([t.encode("ascii", "replace") for t in self.segments])
        return self._view

    @property
    def data(self) -> bytes:
        """The document as UTF-8, for RE2 patterns that need the real characters."""
        if self._data is None:
            self._data = self.view if self.ascii else self.text.encode("utf-8")
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
        if self._byte_starts is None:  # built on the first conversion only
            step = len(_SEP_BYTES)
            sizes = [len(t) if t.isascii() else len(t.encode("utf-8")) for t in self.segments]
            bstarts = [0, *accumulate(n + step for n in sizes)]
            bstarts.pop()
            self._byte_starts = bstarts
        i = bisect.bisect_right(self._byte_starts, byte_offset) - 1
        bstart = self._byte_starts[i]
        seg = self.segments[i]
        rel = byte_offset - bstart
        if seg.isascii():
            return self.starts[i] + rel
        last = self._last_char.get(i)
        if last is not None and last[0] <= byte_offset:
            n = last[1] + len(self.data[last[0] : byte_offset].decode("utf-8", errors="replace"))
        else:
            n = len(self.data[bstart:byte_offset].decode("utf-8", errors="replace"))
        self._last_char[i] = (byte_offset, n)
        if n > len(seg):  # inside the separator that follows
            return self.ends[i] + (rel - len(seg.encode("utf-8")))
        return self.starts[i] + n

    def byte_start(self, i: int) -> int:
        """Where text `i` starts in `data`."""
        if self.ascii:
            return self.starts[i]
        if self._byte_starts is None:
            self.char(0)  # builds them
        assert self._byte_starts is not None
        return self._byte_starts[i]

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


def compile_re2(pattern: bytes, *, capture: bool = False, view: bool = False) -> Any:
    """Compile an RE2 bytes pattern for the fixed packs (errors are bugs, so they raise).

    `view`: the pattern (ASCII) only ever runs on ASCII bytes such as `Doc.view`. It is then
    compiled for Latin-1, which on ASCII input matches exactly what UTF-8 mode does, without the
    branches UTF-8 mode adds for characters the input cannot hold (`\\W`, `[^.]`, `.` over
    multi-byte sequences; the Kelvin sign and long s that `(?i)` folds with k and s): a smaller
    program, whose DFA is cheaper to build.
    """
    options = _options(view, pattern)
    options.never_capture = not capture
    return re2.compile(pattern, options)


def _options(view: bool, *patterns: bytes) -> Any:
    if view and not all(p.isascii() for p in patterns):
        raise ValueError("a pattern for ASCII input must be ASCII itself")
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 64 << 20  # room for the DFA of a joined pattern; allocated only as used
    if view:
        options.encoding = re2.Options.Encoding.LATIN1
    return options


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


def next_span(regex: Any, data: bytes, pos: int, end: int = -1) -> tuple[int, int] | None:
    """The first non-empty match of a compiled RE2 pattern in data[pos:end], or None."""
    raw = getattr(regex, "_regexp", None)
    if end < 0:
        end = len(data)
    while pos <= end:
        if raw is None or _UNANCHORED is None:
            m = regex.search(data, pos, end)
            if m is None:
                return None
            s, e = m.span()
        else:
            s, e = raw.Match(_UNANCHORED, data, pos, end)[0]
            if s < 0:
                return None
        if e > s:
            return s, e
        pos = e + 1
    return None


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


def anchor_set(patterns: Sequence[str], *, anchored: bool = True, view: bool = False) -> Any:
    """An RE2 set: `.Match(data)` lists every pattern matching at the start of `data`
    (`anchored`) or anywhere in it. `view` as for `compile_re2`."""
    encoded = [p.encode() for p in patterns]
    options = _options(view, *encoded)
    anchor = re2._re2.RE2.Anchor.ANCHOR_START if anchored else re2._re2.RE2.Anchor.UNANCHORED
    aset = re2._re2.Set(anchor, options)
    for pattern in encoded:
        if aset.Add(pattern) < 0:
            raise ValueError(f"RE2 cannot compile anchor {pattern!r}")
    if not aset.Compile():
        raise ValueError("RE2 cannot compile the anchor set")
    return aset


def iter_view(regex: Any, doc: Doc) -> Iterator[tuple[int, int]]:
    """Spans of an RE2 pattern over `Doc.view`: they are char offsets into `Doc.text`."""
    return spans(regex, doc.view)


def doc_spans(regex: Any, doc: Doc) -> Iterator[tuple[int, int]]:
    """Spans of an RE2 pattern over `Doc.view` (so: char offsets into `doc.text`).

    A match that runs past the end of its text (patterns with `\\W+` or `[^.]` can cross the
    separator) does not hide the start of the next text: the search resumes there, so a batch
    sees every match that texts scanned one by one would.
    """
    view = doc.view
    starts, ends = doc.starts, doc.ends
    last = len(starts) - 1
    pos = 0
    while (hit := next_span(regex, view, pos)) is not None:
        s, e = hit
        yield s, e
        pos = e
        if last:
            i = bisect.bisect_right(starts, s) - 1
            if e > ends[i] and i < last:
                pos = max(starts[i + 1], s + 1)  # always forward: never find the same match again


def indexed_spans(regex: Any, doc: Doc) -> Iterator[tuple[int, int, int]]:
    """`doc_spans` with the index of the text each span starts in: (start, end, index)."""
    raw = getattr(regex, "_regexp", None)
    if raw is None or _UNANCHORED is None:
        for s, e in doc_spans(regex, doc):
            yield s, e, doc.segment_index(s)
        return
    match = raw.Match  # next_span, inlined: this loop runs once per candidate
    view = doc.view
    starts, ends = doc.starts, doc.ends
    last = len(starts) - 1
    end = len(view)
    pos = 0
    while pos <= end:
        s, e = match(_UNANCHORED, view, pos, end)[0]
        if s < 0:
            return
        if e == s:
            pos = e + 1
            continue
        i = bisect.bisect_right(starts, s) - 1 if last else 0
        yield s, e, i
        pos = e
        if e > ends[i] and i < last:
            pos = max(starts[i + 1], s + 1)  # always forward: never find the same match again


def iter_utf8(regex: Any, doc: Doc) -> Iterator[tuple[int, int]]:
    """Spans of an RE2 pattern over the UTF-8 text, as char offsets into `doc.text`.

    ASCII texts are scanned in the view; the others in the non-ASCII sub-document, whose
    offsets are mapped back. Use it for patterns that must see real non-ASCII characters.
    """
    if doc.ascii:
        yield from doc_spans(regex, doc)
        return
    picked = doc.nonascii()[1]
    if len(picked) != len(doc.segments):
        nonascii = set(picked)
        for s, e in doc_spans(regex, doc):
            if doc.segment_index(s) not in nonascii:
                yield s, e
    yield from iter_nonascii(regex, doc)


def iter_nonascii(regex: Any, doc: Doc) -> Iterator[tuple[int, int]]:
    """Spans of an RE2 pattern in the non-ASCII texts only, as char offsets into `doc.text`."""
    if doc.ascii:
        return
    sub, picked = doc.nonascii()
    data = sub.data
    char = sub.char
    last = len(picked) - 1
    pos = 0
    while (hit := next_span(regex, data, pos)) is not None:
        bs, be = hit
        s, e = char(bs), char(be)
        j = sub.segment_index(s)
        shift = doc.starts[picked[j]] - sub.starts[j]
        yield s + shift, e + shift
        pos = be
        if e > sub.ends[j] and j < last:
            pos = max(sub.byte_start(j + 1), bs + 1)  # always forward
