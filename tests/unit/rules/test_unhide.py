"""Entities hidden by Unicode tricks: an invisible character, tag characters or full-width letters
inside an address, a key or a tenant's keyword must not let it through, whichever direction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rules import CompiledPolicy, compile_policy
from rules.detectors.unhide import normalize

POLICY: CompiledPolicy = compile_policy(
    {
        # inbound as the default policy has it (the unicode pack strips), plus a keyword
        "inbound": {
            "packs": ["pii", "secrets", "prompt_injection", "unicode"],
            "custom": [{"id": "custom.codename", "keywords": ["bluebird"], "action": "redact"}],
        },
        # outbound as the default policy has it: no unicode pack at all
        "outbound": {"packs": ["pii", "secrets"]},
    },
    "unhide",
)

ENTITIES = [
    ("bob@example.com", "[EMAIL_ADDRESS]"),
    ("AKIAIOSFODNN7EXAMPLE", "[AWS_ACCESS_KEY]"),
    ("ghp_" + "Ab1" * 12, "[GITHUB_TOKEN]"),
    ("4111111111111111", "[CREDIT_CARD]"),
    ("536-22-1234", "[US_SSN]"),
]
HIDERS = ["\u200b", "\u200c", "\u2060", "\ufeff", "\u00ad", "\u202e", "\U000e0001"]


def _hide(entity: str, at: int, hider: str) -> str:
    return entity[:at] + hider + entity[at:]


def _visible(text: str) -> str:
    return normalize(text)[0]


@pytest.mark.parametrize("direction", ["inbound", "outbound"])
@pytest.mark.parametrize(("entity", "placeholder"), ENTITIES)
def test_an_invisible_character_inside_an_entity_does_not_hide_it(
    direction: str, entity: str, placeholder: str
) -> None:
    hidden = _hide(entity, len(entity) // 2, "\u200b")
    text = f"note: {hidden} thanks"
    verdict = POLICY.scan(text, direction)
    assert verdict.verdict == "redacted"
    assert verdict.message == f"note: {placeholder} thanks"
    (match,) = [m for m in verdict.matches if m.category != "unicode"]
    assert text[match.start : match.end] == hidden  # the span covers the invisible character


def test_tag_characters_and_full_width_letters_do_not_hide_an_email() -> None:
    tags = "".join(chr(0xE0000 + ord(c)) for c in "bob@example.com")
    full_width = "".join(chr(ord(c) + 0xFEE0) for c in "bob@example.com")
    for hidden in (tags, full_width):
        verdict = POLICY.scan(f"write to {hidden} today", "outbound")
        assert verdict.message == "write to [EMAIL_ADDRESS] today"


def test_a_tenant_keyword_split_by_an_invisible_character_is_still_found() -> None:
    verdict = POLICY.scan("project blue\u200bbird ships", "inbound")
    assert verdict.message == "project [CODENAME] ships"


def test_a_batch_finds_the_hidden_entity_of_each_text() -> None:
    texts = ["plain", "é mail bob\u200b@example.com", "AKIAIOSF\u2060ODNN7EXAMPLE", "ünïcödé only"]
    for direction in ("inbound", "outbound"):
        assert POLICY.scan_many(texts, direction) == [POLICY.scan(t, direction) for t in texts]
        assert POLICY.scan_many(texts, direction)[1].message == "é mail [EMAIL_ADDRESS]"


def test_legitimate_non_ascii_text_is_not_changed() -> None:
    # a joiner inside an emoji sequence and a Devanagari word are not tricks to report
    text = "नमस्ते 👩\u200d💻 team"
    assert POLICY.scan(text, "outbound").verdict == "allowed"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(ENTITIES),
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=40), st.sampled_from(HIDERS)), min_size=1, max_size=3
    ),
    st.sampled_from(["inbound", "outbound"]),
)
def test_no_placement_of_invisible_characters_leaks_an_entity(
    entity: tuple[str, str], hiders: list[tuple[int, str]], direction: str
) -> None:
    value, _ = entity
    hidden = value
    for at, hider in hiders:
        hidden = _hide(hidden, min(at, len(hidden) - 1), hider)
    verdict = POLICY.scan(f"x {hidden} y", direction)
    assert verdict.message is not None
    assert value not in _visible(verdict.message)
