"""Shortcuts in the engine against the plain computation they replace: same answer on any text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from rules import CompiledPolicy
from rules.detectors import pii

# Words the phone-label patterns know, glued and spaced in every way, with non-ASCII letters
# next to them (where Python's Unicode word boundary and an ASCII-only one would disagree).
_LABEL_PIECES = st.sampled_from(
    ["phone", "tel.", "tel", "my number", "your no", "call", "order", "ssn", "id", "ref", "box",
     "téléphone", "teléfono", "é", "ß", "ü", "_", "-", ":", " ", "  ", "\n", "1", "x", "no", "my"]
)  # fmt: skip
_WINDOWS = st.lists(_LABEL_PIECES, max_size=12).map("".join) | st.text(max_size=48)


def _label_before_reference(window: str) -> tuple[int, int]:
    pos = neg = -1
    for m in pii._LABELS.finditer(window):
        if m.lastgroup == "pos":
            pos = m.end()
        else:
            neg = m.end()
    return pos, neg


@settings(max_examples=400, deadline=None)
@given(_WINDOWS)
def test_phone_labels_found_with_re2_are_the_ones_python_finds(window: str) -> None:
    assert pii._label_before(window) == _label_before_reference(window)


@settings(max_examples=400, deadline=None)
@given(_WINDOWS.map(str.lower))
def test_phone_labels_on_lower_cased_windows(window: str) -> None:
    assert pii._label_before(window) == _label_before_reference(window)


_LOCAL_TAIL = re.compile(r"[\w!#$%&'*+/=?^`{|}~.-]{1,64}\Z")
_LOCAL_CHARS = st.sampled_from([*"ab.-_+=!#'é 1\n@ß", "x" * 30])


@settings(max_examples=400, deadline=None)
@given(st.lists(_LOCAL_CHARS, max_size=20).map("".join), st.integers(0, 80))
def test_email_local_part_start_is_the_leftmost_search_result(before: str, seg_start: int) -> None:
    """The reversed-window match in `_email` finds where a search for the local part starts."""
    text = before + "@example.com"
    at = len(before)
    seg_start = min(seg_start, at)
    expected = _LOCAL_TAIL.search(text, max(seg_start, at - 64), at)
    found: list[tuple[int, int, str, float]] = []
    pii.PiiDetector()._email(text, at, seg_start, len(text), found)
    if expected is None:
        assert found == []
    else:
        start = expected.start()
        while start < at and text[start] == ".":
            start += 1
        if found:
            assert found[0][0] == start
        else:  # rejected for a reason after the local part (a dot before "@", nothing left)
            assert start == at or text[at - 1] == "."


def test_phone_labels_count_only_as_whole_words_next_to_non_ascii_letters(
    pii_policy: CompiledPolicy,
) -> None:
    def found(text: str) -> list[tuple[str, float]]:
        return [(m.rule, m.score) for m in pii_policy.scan(text, "inbound").matches]

    assert found("Ñ phone 020 7946 0958") == [("pii.phone", 0.85)]  # labelled
    assert found("Ñphone 020 7946 0958") == [("pii.phone", 0.7)]  # no label: the number alone
    assert found("order 020 7946 0958") == []  # an order number
    assert found("Ñorder 020 7946 0958") == [("pii.phone", 0.7)]  # "Ñorder" is not "order"
