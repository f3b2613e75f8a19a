"""The one clock. Expiry, backoff and leases read time through `Clock.now()` so tests can move it."""

from __future__ import annotations

import time
from datetime import UTC, datetime


class Clock:
    """Wall-clock seconds since the epoch, plus an offset tests may advance."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def rfc3339(ts: float | None) -> str | None:
    """Epoch seconds -> RFC 3339 UTC with millisecond precision and a `Z`."""
    if ts is None:
        return None
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
