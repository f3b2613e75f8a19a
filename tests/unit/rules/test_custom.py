"""The custom pack: tenant keyword lists (Aho-Corasick) and regexes (RE2)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rules import CompiledPolicy, PolicyError, compile_policy
from rules.detectors.base import Doc
from rules.detectors.custom import CustomDetector, CustomRule


def policy_with(*rules: dict[str, object]) -> CompiledPolicy:
    return compile_policy({"inbound": {"packs": ["custom"], "custom": list(rules)}}, "tenant")


def test_keywords_match_whole_words_case_insensitively() -> None:
    policy = policy_with(
        {"id": "custom.competitors", "keywords": ["acme corp", "Globex"], "action": "redact"}
    )
    verdict = policy.scan("We met ACME Corp and globex, not acmecorp or Globexian.", "inbound")
    assert verdict.message == "We met [COMPETITORS] and [COMPETITORS], not acmecorp or Globexian."


def test_case_sensitive_and_substring_options() -> None:
    policy = policy_with(
        {
            "id": "custom.code",
            "keywords": ["ZX"],
            "case_sensitive": True,
            "whole_word": False,
            "action": "block",
        }
    )
    assert policy.scan("model aZXb", "inbound").verdict == "blocked"
    assert policy.scan("model zx", "inbound").verdict == "allowed"


def test_non_ascii_keywords() -> None:
    policy = policy_with({"id": "custom.city", "keywords": ["Zürich"], "action": "flag"})
    verdict = policy.scan("Office in ZÜRICH and zürich", "inbound")
    assert verdict.verdict == "allowed"
    assert [verdict.message[m.start : m.end] for m in verdict.matches if verdict.message] == [
        "ZÜRICH",
        "zürich",
    ]


def test_regex_rule_with_placeholder() -> None:
    policy = policy_with(
        {"id": "custom.ticket", "regex": "TICKET-[0-9]{6}", "action": "redact", "placeholder": "[T]"}
    )
    assert policy.scan("see TICKET-123456 and TICKET-12", "inbound").message == "see [T] and TICKET-12"


def test_regex_is_case_insensitive_unless_asked() -> None:
    loose = policy_with({"id": "custom.a", "regex": "secret project", "action": "block"})
    strict = policy_with(
        {"id": "custom.a", "regex": "secret project", "action": "block", "case_sensitive": True}
    )
    assert loose.scan("the SECRET Project", "inbound").verdict == "blocked"
    assert strict.scan("the SECRET Project", "inbound").verdict == "allowed"


def test_default_action_is_flag() -> None:
    verdict = policy_with({"id": "custom.watch", "keywords": ["merger"]}).scan("merger talks", "inbound")
    assert verdict.verdict == "allowed" and [m.action for m in verdict.matches] == ["flag"]


def test_pathological_regex_stays_linear() -> None:
    policy = policy_with({"id": "custom.redos", "regex": "(a+)+$", "action": "flag"})
    text = "a" * 50_000 + "!"
    start = time.perf_counter()
    policy.scan(text, "inbound")
    assert time.perf_counter() - start < 1.0  # a backtracking engine would take years


@pytest.mark.parametrize(
    ("regex", "problem"),
    [
        ("(?<=a)b", "RE2 cannot compile"),
        ("(a", "RE2 cannot compile"),
        ("a*", "empty string"),
        ("x|", "empty string"),
    ],
)
def test_bad_regex_is_a_policy_error_naming_the_rule(regex: str, problem: str) -> None:
    with pytest.raises(PolicyError) as exc:
        policy_with({"id": "custom.bad", "regex": regex})
    (error,) = exc.value.errors
    assert error["rule"] == "custom.bad" and problem in error["problem"]


def test_large_keyword_lists_compile_and_match() -> None:
    words = [f"term{i:05d}" for i in range(20_000)]
    policy = policy_with({"id": "custom.many", "keywords": words, "action": "redact", "placeholder": "[X]"})
    assert policy.scan("a term12345 b term99999", "inbound").message == "a [X] b term99999"


# --- the keyword prefilter -------------------------------------------------------------------------

ALPHABET = "aAbBcC _-.?*+()[]\\|^$\n\x00é"
KEYWORD = st.text(ALPHABET, min_size=1, max_size=6).filter(lambda k: k.strip() == k and k)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(KEYWORD, min_size=1, max_size=5),
    st.booleans(),
    st.booleans(),
    st.lists(st.text(ALPHABET, max_size=24), min_size=1, max_size=6),
)
def test_the_prefilter_never_hides_an_occurrence(
    keywords: list[str], case_sensitive: bool, whole_word: bool, texts: list[str]
) -> None:
    """The RE2 prefilter that picks the texts the automaton walks finds exactly what walking the
    whole batch finds, for every keyword shape (regex metacharacters, "?" that the ASCII view
    also has for non-ASCII characters, newlines and NUL that turn the prefilter off)."""
    rule = CustomRule(
        id="custom.k", placeholder="[K]", keywords=tuple(dict.fromkeys(keywords)),
        case_sensitive=case_sensitive, whole_word=whole_word,
    )  # fmt: skip
    fast = CustomDetector([rule])
    full = CustomDetector([rule])
    full._automata = tuple((a, fold, ascii_only, None) for a, fold, ascii_only, _ in full._automata)
    doc = Doc(texts)
    assert sorted(fast.find(doc)) == sorted(full.find(doc))
    for text in texts:
        assert sorted(fast.find(Doc([text]))) == sorted(full.find(Doc([text])))
