"""Retry delays follow the schedule with bounded jitter; Retry-After is read leniently but safely."""

from __future__ import annotations

import email.utils
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.delivery.retry import next_delay, parse_retry_after

SCHEDULE = (5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0, 7200.0)


def test_next_delay_walks_the_schedule_then_stops() -> None:
    assert [next_delay(a, SCHEDULE, 0.0) for a in range(1, 9)] == [*SCHEDULE, None]


def test_next_delay_jitter_stays_within_bounds_and_varies() -> None:
    rng = random.Random(7)
    delays = [next_delay(2, SCHEDULE, 0.2, rng) for _ in range(2000)]
    values = [d for d in delays if d is not None]
    assert len(values) == 2000
    assert min(values) >= 24.0
    assert max(values) <= 36.0
    assert max(values) - min(values) > 10  # actually spread out, not constant
    assert 29 < sum(values) / len(values) < 31


def test_next_delay_is_reproducible_with_a_seeded_rng() -> None:
    a = [next_delay(i, SCHEDULE, 0.2, random.Random(1)) for i in range(1, 8)]
    b = [next_delay(i, SCHEDULE, 0.2, random.Random(1)) for i in range(1, 8)]
    assert a == b


def test_next_delay_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        next_delay(0, SCHEDULE, 0.2)
    with pytest.raises(ValueError):
        next_delay(1, SCHEDULE, 1.5)
    assert next_delay(1, (), 0.2) is None


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 5 ", 5.0),
        ("0", 0.0),
        ("-3", 0.0),
        ("1.5", 1.5),
        ("+7", 7.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("inf", None),
        ("nan", None),
        ("1e3", None),
        ("12 34", None),
        ("٣", None),
        ("Wed, 32 Foo 2015 07:28:00 GMT", None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_parse_retry_after_http_date() -> None:
    future = email.utils.formatdate(NOW + 90, usegmt=True)
    past = email.utils.formatdate(NOW - 90, usegmt=True)
    assert parse_retry_after(future, NOW) == pytest.approx(90.0)
    assert parse_retry_after(past, NOW) == 0.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:15:00 -0000", NOW) == pytest.approx(1700000100 - NOW)


@given(st.text(max_size=60))
def test_parse_retry_after_never_raises(value: str) -> None:
    result = parse_retry_after(value, NOW)
    assert result is None or result >= 0
