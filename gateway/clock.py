"""The one clock. Expiry, backoff and leases read time through `Clock.now()` so tests can move it."""

from __future__ import annotations

import math
import time


class Clock:
    """Wall-clock seconds since the epoch, plus an offset tests may advance."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


# The last whole second formatted: a job's timestamps mostly fall in the same second, and formatting
# through datetime costs ~5 µs against ~0.6 µs for this (it runs several times per job).
_last_second: tuple[int, str] = (-1, "")


def rfc3339(ts: float | None) -> str | None:
    """Epoch seconds -> RFC 3339 UTC with millisecond precision (truncated) and a `Z`."""
    global _last_second
    if ts is None:
        return None
    second = math.floor(ts)
    cached = _last_second
    if cached[0] == second:
        prefix = cached[1]
    else:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
        _last_second = (second, prefix)
    return f"{prefix}{min(int((ts - second) * 1000), 999):03d}Z"
