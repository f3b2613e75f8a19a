"""Reading and checking request bodies at the edge, by hand.

By hand rather than with a model library because the contract's rules are precise and a little
unusual: booleans are not integers, `null` means "absent" for optional fields, unknown fields are
named in the error, and every string anywhere in a body (keys included) must be storable in
PostgreSQL, which cannot hold NUL characters, and encodable as UTF-8, which lone surrogates are not.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from typing import Any, NoReturn

import orjson
from starlette.requests import Request

from gateway.api.errors import field_problem, invalid

_NUL_PROBLEM = "contains a NUL character (\\u0000), which the database cannot store"
_SURROGATE_PROBLEM = "contains a lone UTF-16 surrogate, which is not valid Unicode text"


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # orjson refuses these too; 1e400 must not become a stored null
        raise ValueError(f"{text} is out of range")
    return value


#: 19 digits or more: the only way to write an integer orjson cannot hold (beyond -2**63..2**64-1)
_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def _check_wide_integers(raw: bytes, parsed: Any) -> None:
    """orjson reads an integer beyond 64 bits as a float, silently: metadata would come back
    changed (123456789012345678901234567890 as 1.2345678901234568e+29). The stdlib keeps it exact;
    where the two readings differ, such an integer was there, and it is refused, not altered."""
    try:
        exact = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):  # not for the stdlib to judge: keep orjson's reading
        return
    if exact != parsed:
        raise invalid(
            "the request body holds an integer beyond 64 bits, which would not come back exactly;"
            " send it as a string"
        )


def parse_json(raw: bytes) -> Any:
    """Parse a body; malformed JSON is a 400. A string with a lone surrogate escape is valid JSON
    that orjson refuses, so those bodies are parsed again with the stdlib to answer 422 instead."""
    if not raw.strip():
        raise invalid("the request body is empty; send a JSON object", status=400)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        first_error = str(exc)
    else:
        if _LONG_NUMBER.search(raw) is not None:
            _check_wide_integers(raw, parsed)
        return parsed
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        raise invalid(f"the request body is not valid JSON: {first_error}", status=400) from None


_SURROGATE_ESCAPES = tuple(b"\\ud" + digit for digit in (b"8", b"9", b"a", b"b", b"c", b"d", b"e", b"f"))


def _plainly_storable(raw: bytes) -> bool:
    """True when the parsed JSON text `raw` cannot hold a string `check_strings` would refuse, so
    the walk over every string can be skipped. A parsed body is valid UTF-8 (both parsers insist),
    so a bad string can only come from an escape: `\\u0000` (a raw NUL is invalid JSON) or a
    surrogate `\\ud800`-`\\udfff` (a valid pair lands here too and is checked the slow way, as
    is an escaped backslash before `u0000`: false positives only cost the walk).

    `find`, not `in`: `bytes.__contains__` first tries its argument as an integer and builds (and
    throws away) a TypeError for every bytes needle."""
    if raw.find(b"\\u") < 0:
        return True
    lowered = raw.lower()
    return lowered.find(b"\\u0000") < 0 and not any(lowered.find(e) >= 0 for e in _SURROGATE_ESCAPES)


def check_strings(value: Any, root: str = "", *, allow_nul: bool = False) -> None:
    """422 unless every string (and object key) in `value` is well-formed Unicode and, unless
    `allow_nul` (for text that is only scanned, never stored), free of NUL characters."""
    stack: list[tuple[str, Any]] = [(root, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            _check_text(path or "body", item, allow_nul=allow_nul)
        elif isinstance(item, Mapping):
            for key, child in item.items():
                child_path = f"{path}.{key}" if path else str(key)
                if isinstance(key, str):
                    _check_text(child_path, key, what="the field name", allow_nul=allow_nul)
                stack.append((child_path, child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(item))


def _check_text(path: str, text: str, what: str = "", *, allow_nul: bool = False) -> None:
    problem = text_problem(text, allow_nul=allow_nul)
    if problem is not None:
        problem = f"{what} {problem}" if what else problem
        shown = _printable(path)
        raise invalid(f"{shown}: {problem}", [field_problem(shown, problem)])


def text_problem(text: str, *, allow_nul: bool = False) -> str | None:
    """Why `text` cannot be stored (or scanned: the engine works on UTF-8), or None. `encode`
    finds surrogates at C speed."""
    if not allow_nul and "\x00" in text:
        return _NUL_PROBLEM
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_PROBLEM
    return None


def _printable(path: str) -> str:
    """A field path that can itself be serialised (keys may hold the very characters refused)."""
    return path.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


async def read_object(
    request: Request, allowed: Collection[str], *, allow_nul: bool = False
) -> dict[str, Any]:
    """The body as a JSON object with only `allowed` fields and only storable strings."""
    raw = await request.body()
    body = parse_json(raw)
    return check_object(body, allowed, allow_nul=allow_nul, raw=raw)


def check_object(
    body: Any, allowed: Collection[str], *, allow_nul: bool = False, raw: bytes | None = None
) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid(
            f"the request body must be a JSON object, not {json_type(body)}",
            [field_problem("body", f"expected an object, got {json_type(body)}")],
        )
    if raw is None or not _plainly_storable(raw):
        check_strings(body, allow_nul=allow_nul)
    unknown = sorted(k for k in body if k not in allowed)
    if unknown:
        raise invalid(
            f"unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
            [field_problem(k, "unknown field") for k in unknown],
        )
    return body


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


class Problems:
    """Collects field problems so one 422 names all of them, not just the first."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    @property
    def fields(self) -> set[str]:
        return {str(item["field"]) for item in self.items}

    def add(self, field: str, problem: str, **extra: Any) -> None:
        self.items.append(field_problem(field, problem, **extra))

    def raise_if_any(self) -> None:
        if self.items:
            first = self.items[0]
            more = f" (and {len(self.items) - 1} more)" if len(self.items) > 1 else ""
            raise invalid(f"{first['field']}: {first['problem']}{more}", self.items)


def optional_str(
    body: Mapping[str, Any], name: str, problems: Problems, *, nullable: bool = True
) -> str | None:
    """The string field `name`, or None when absent (or null, when `nullable`); else a problem."""
    if name not in body:
        return None
    value = body[name]
    if isinstance(value, str) or (value is None and nullable):
        return value
    problems.add(name, f"must be a string, got {json_type(value)}")
    return None
