"""Literal strings a regular expression cannot match without: cheap tests that prove "no match".

`required_atoms(pattern)` returns a set of strings such that every match of `pattern` contains at
least one of them as a substring (compared the way `re.IGNORECASE` compares characters), or None
when no such set is known. It reads the pattern with Python's own parser, the way RE2's prefilter
does for its patterns: a concatenation needs the atoms of any one of its parts (the most selective
is kept), an alternation needs one of its branches' atoms, and short alternatives of literals
multiply out into whole words ("ignor" + "e"|"ez" -> "ignore", "ignorez").

`folded_atoms(pattern)` and `fold(text)` make the test a plain substring search: when no folded
atom occurs in a folded stretch of text, the pattern does not match in that stretch either.
"""

from __future__ import annotations

from typing import Any

try:  # Python's own regex parser (CPython 3.11+); without it there are no shortcuts, only searches
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _c = _p = None

_MAX_EXACT = 64  # multiplying out literal alternatives stops beyond this many strings
_MAX_CLASS = 8  # a character class with at most this many characters counts as alternatives

_Exact = set[str] | None


def _cross(a: _Exact, b: _Exact) -> _Exact:
    if a is None or b is None or len(a) * len(b) > _MAX_EXACT:
        return None
    return {x + y for x in a for y in b}


def _best(candidates: list[_Exact]) -> _Exact:
    """The most selective usable set: longest shortest atom, then fewest atoms."""
    best: _Exact = None
    for c in candidates:
        if not c or "" in c:
            continue
        if best is None or (min(map(len, c)), -len(c)) > (min(map(len, best)), -len(best)):
            best = c
    return best


def _sequence(items: Any) -> tuple[_Exact, _Exact]:
    """(the exact strings the whole sequence matches or None, its best atoms or None)."""
    run: _Exact = {""}
    whole = True
    candidates: list[_Exact] = []
    for op, av in items:
        exact, atoms = _item(op, av)
        candidates.append(atoms)
        joined = _cross(run, exact)
        if joined is None:
            whole = False
            candidates.append(run)
            run = exact
        else:
            run = joined
    candidates.append(run)
    return (run if whole else None), _best(candidates)


def _item(op: Any, av: Any) -> tuple[_Exact, _Exact]:
    if op is _c.LITERAL:
        return {chr(av)}, None
    if op is _c.IN:
        chars: set[str] = set()
        for o, v in av:
            if o is _c.LITERAL:
                chars.add(chr(v))
            elif o is _c.RANGE and v[1] - v[0] < _MAX_CLASS:
                chars.update(map(chr, range(v[0], v[1] + 1)))
            else:  # negation, categories (\w, \s, ...), wide ranges
                return None, None
        return (chars, None) if len(chars) <= _MAX_CLASS else (None, None)
    if op is _c.SUBPATTERN:
        return _sequence(av[3].data)
    if op is _c.BRANCH:
        exacts: list[_Exact] = []
        atoms: list[_Exact] = []
        for branch in av[1]:
            exact, best = _sequence(branch.data)
            exacts.append(exact)
            atoms.append(_best([best, exact]))
        union: _Exact = None
        if all(e is not None for e in exacts):
            union = set().union(*exacts)  # type: ignore[arg-type]
            if len(union) > _MAX_EXACT:
                union = None
        either = None if any(a is None for a in atoms) else set().union(*atoms)  # type: ignore[arg-type]
        return union, either
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        low, high, sub = av
        exact, best = _sequence(sub.data)
        if low == 0:
            if high == 1 and exact is not None:
                return exact | {""}, None
            return None, None
        best = _best([best, exact])
        return (exact, best) if low == high == 1 else (None, best)
    if op is _c.AT:  # ^, $, \b: zero-width
        return {""}, None
    return None, None  # any character, categories, look-around, back-references, ...


def required_atoms(pattern: str, flags: int = 0) -> frozenset[str] | None:
    """Strings one of which every match of `pattern` contains (see the module docstring)."""
    try:
        atoms = _sequence(_p.parse(pattern, flags).data)[1]
    except Exception:  # pragma: no cover - a parser that changed shape: no shortcut
        return None
    return frozenset(atoms) if atoms else None


# --- case-insensitive containment, the way `re.IGNORECASE` compares characters -------------------


def _fold_tables() -> tuple[dict[int, str], dict[int, str]] | None:
    """The two translation tables of `fold` (see there), or None without re's case fixes."""
    try:
        from re._casefix import _EXTRA_CASES  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - a Python without the table: callers use regexes
        return None
    parent: dict[int, int] = {}

    def root(c: int) -> int:
        while parent.get(c, c) != c:
            c = parent[c]
        return c

    for c, others in _EXTRA_CASES.items():
        for o in others:
            a, b = root(c), root(o)
            if a != b:
                parent[max(a, b)] = min(a, b)
    members = set(_EXTRA_CASES) | {o for others in _EXTRA_CASES.values() for o in others}
    fold = {c: chr(root(c)) for c in members if root(c) != c}
    return {0x130: "i"}, fold  # "İ".lower() is two characters; re compares its simple lower, "i"


_TABLES = _fold_tables()


def fold(text: str) -> str | None:
    """`text` with every character replaced by the representative of the characters that
    `re.IGNORECASE` treats as equal to it (same length), or None when this Python's `re` does not
    expose the table of case fixes. Then a pattern literal matches a stretch of text case-
    insensitively only if `fold(literal)` occurs in `fold(text)` at the same place.

    Python's re compares simple lower-case mappings, plus a table of characters that lower-case
    differently but still match ("s" and the long "ſ", "ı" and "i", the Greek sigmas); `str.lower`
    is the simple mapping for every character but "İ"."""
    if _TABLES is None:
        return None
    before, after = _TABLES
    return text.translate(before).lower().translate(after)


def folded_atoms(pattern: str, flags: int = 0) -> tuple[str, ...] | None:
    """The atoms of `pattern` passed through `fold`: test them with `in` against a folded text.
    None when the pattern has no atoms or case folding is not available."""
    atoms = required_atoms(pattern, flags)
    if atoms is None or _TABLES is None:
        return None
    folded = {fold(a) for a in atoms}
    return tuple(sorted(a for a in folded if a))


# --- first characters ------------------------------------------------------------------------------


def first_chars(pattern: str, flags: int = 0) -> frozenset[str] | None:
    """The characters a match of `pattern` can start with, or None when that is not a small known
    set (a category such as \\d, a negated class, case-insensitive letters, an empty match...)."""
    try:
        found = _first(_p.parse(pattern, flags).data, bool(flags & _c.SRE_FLAG_IGNORECASE))
    except Exception:  # pragma: no cover - a parser that changed shape: any first character
        return None
    return frozenset(found) if found else None


def _first(items: Any, ignore_case: bool) -> set[str] | None:
    """First characters of a sequence; None when unknown or when the sequence can be empty."""
    for op, av in items:
        if op is _c.AT:  # zero-width: the next item decides
            continue
        return _first_item(op, av, ignore_case)
    return None


def _first_item(op: Any, av: Any, ignore_case: bool) -> set[str] | None:
    if op is _c.LITERAL:
        c = chr(av)
        return None if ignore_case and c.lower() != c.upper() else {c}
    if op is _c.IN:
        chars: set[str] = set()
        for o, v in av:
            if o is _c.LITERAL:
                chars.add(chr(v))
            elif o is _c.RANGE and v[1] - v[0] < 128:
                chars.update(map(chr, range(v[0], v[1] + 1)))
            else:
                return None
        if ignore_case and any(c.lower() != c.upper() for c in chars):
            return None
        return chars
    if op is _c.SUBPATTERN:
        _, add, remove, sub = av
        ic = (ignore_case or bool(add & _c.SRE_FLAG_IGNORECASE)) and not remove & _c.SRE_FLAG_IGNORECASE
        return _first(sub.data, ic)
    if op is _c.BRANCH:
        union: set[str] = set()
        for branch in av[1]:
            found = _first(branch.data, ignore_case)
            if found is None:
                return None
            union |= found
        return union
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT) and av[0] >= 1:
        return _first(av[2].data, ignore_case)
    return None
