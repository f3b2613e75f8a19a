"""Turning matches into the message that travels on.

Every `redact` match is replaced by its placeholder and every `strip` match is removed. Matches that
overlap are merged first, and the merged span takes the placeholder of its longest member, so no
part of a matched span can survive next to a placeholder, and the outcome does not depend on the
order the detectors ran in.
"""

from __future__ import annotations

from collections.abc import Iterable

from rules.model import REDACT, STRIP

#: (start, end, action, placeholder, priority): priority breaks ties between equally long spans.
Edit = tuple[int, int, str, str, int]


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply redact/strip edits to `text` (offsets are into `text`)."""
    ordered = sorted(e for e in edits if e[2] in (REDACT, STRIP) and e[1] > e[0])
    if not ordered:
        return text
    if len(ordered) == 1:
        s, e, action, placeholder, _ = ordered[0]
        return text[:s] + (placeholder if action == REDACT else "") + text[e:]
    merged: list[tuple[int, int, str, tuple[int, int]]] = []  # start, end, replacement, (length, -priority)
    for s, e, action, placeholder, priority in ordered:
        replacement = placeholder if action == REDACT else ""
        rank = (e - s, -priority) if action == REDACT else (-1, 0)
        if merged and s < merged[-1][1]:
            ms, me, mrep, mrank = merged[-1]
            if rank > mrank:
                mrep, mrank = replacement, rank
            merged[-1] = (ms, max(me, e), mrep, mrank)
        else:
            merged.append((s, e, replacement, rank))
    parts: list[str] = []
    pos = 0
    for s, e, replacement, _ in merged:
        parts.append(text[pos:s])
        parts.append(replacement)
        pos = e
    parts.append(text[pos:])
    return "".join(parts)
