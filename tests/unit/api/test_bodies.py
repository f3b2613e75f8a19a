"""The body checks' fast path: skipping the walk over every string must never let a bad one in."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.api.bodies import _plainly_storable, check_strings, parse_json
from gateway.api.errors import ApiError

# any code point, lone surrogates and NUL included
_text = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12,
)


def _encodings(value: Any) -> list[bytes]:
    """The ways a client may send it: escaped (stdlib default) and raw UTF-8 where that exists."""
    out = [json.dumps(value).encode()]
    with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate has no UTF-8 form
        out.append(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    with contextlib.suppress(TypeError):
        out.append(orjson.dumps(value))
    return out


def _refused(value: Any) -> bool:
    try:
        check_strings(value)
    except ApiError:
        return True
    return False


@given(st.dictionaries(_text, _json, max_size=5))
def test_fast_path_never_skips_a_body_the_walk_refuses(body: dict[str, Any]) -> None:
    for raw in _encodings(body):
        try:
            parsed = parse_json(raw)
        except ApiError:
            continue  # not parseable: refused before any string check
        if _plainly_storable(raw):
            assert not _refused(parsed), raw


@pytest.mark.parametrize(
    "raw",
    [b'{"a": "\\u0000"}', b'{"a": "\\uD800"}', b'{"\\udfff": 1}', b'{"a": ["x", {"b": "\\u0000"}]}'],
)
def test_escapes_that_need_the_walk_take_it(raw: bytes) -> None:
    assert not _plainly_storable(raw)


@pytest.mark.parametrize("raw", [b'{"a": "plain"}', '{"a": "é ✓ 😀"}'.encode(), b'{"a": "\\u00e9\\n"}'])
def test_ordinary_bodies_skip_the_walk(raw: bytes) -> None:
    assert _plainly_storable(raw)
