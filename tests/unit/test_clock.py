"""rfc3339: the timestamp format of every API response and webhook body."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gateway.clock import rfc3339


def _reference(ts: float) -> str:
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))  # up to 2100
def test_matches_datetime_formatting(ts: float) -> None:
    # datetime rounds to the microsecond first; compare where that cannot carry into the millisecond
    if abs(ts * 1000 - round(ts * 1000)) > 1e-3:
        assert rfc3339(ts) == _reference(ts)


def test_seconds_in_turn_and_back_do_not_reuse_a_stale_prefix() -> None:
    assert rfc3339(1_700_000_000.5) == "2023-11-14T22:13:20.500Z"
    assert rfc3339(1_700_000_001.25) == "2023-11-14T22:13:21.250Z"
    assert rfc3339(1_700_000_000.999_9) == "2023-11-14T22:13:20.999Z"
    assert rfc3339(0.0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(None) is None
