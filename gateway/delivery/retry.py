"""When to try a webhook again: the schedule with jitter, and the receiver's `Retry-After`.

Jitter spreads retries out, so a receiver that was down for a minute is not hit by every queued
webhook in the same second when it comes back.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import UTC
from email.utils import parsedate_to_datetime


def next_delay(
    attempt: int, schedule: Sequence[float], jitter: float, rng: random.Random | None = None
) -> float | None:
    """Seconds to wait after `attempt` attempts (1 after the first), or None when out of retries.

    The delay is `schedule[attempt - 1]` scaled by a uniform factor in [1 - jitter, 1 + jitter].
    """
    if attempt < 1:
        raise ValueError("attempt counts attempts already made, so it starts at 1")
    if not 0 <= jitter <= 1:
        raise ValueError("jitter must be between 0 and 1")
    if attempt > len(schedule):
        return None
    base = float(schedule[attempt - 1])
    if jitter == 0:
        return max(base, 0.0)
    factor = (rng if rng is not None else random).uniform(1 - jitter, 1 + jitter)
    return max(base * factor, 0.0)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """`Retry-After` as seconds from `now`: delay-seconds or an HTTP-date; a past time is 0.

    Garbage (or a value too absurd to be a delay) is None, meaning "use the schedule": a receiver's
    typo must not stall or speed up delivery.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.lstrip("+-").replace(".", "", 1).isdigit() and text.isascii():
        try:
            seconds = float(text)
        except ValueError:
            return None
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # "-0000" means UTC with no offset information
        when = when.replace(tzinfo=UTC)
    try:
        return max(when.timestamp() - now, 0.0)
    except (OverflowError, OSError, ValueError):
        return None
