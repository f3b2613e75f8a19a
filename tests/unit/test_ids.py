from __future__ import annotations

import base64
import re

from hypothesis import given
from hypothesis import strategies as st

from gateway import ids


def test_job_ids_sort_by_creation_time() -> None:
    made = [ids.job_id(1_700_000_000 + i / 1000) for i in range(50)]
    assert made == sorted(made)
    assert all(re.fullmatch(r"job_[0-9a-hjkmnp-tv-z]{26}", j) for j in made)


def test_webhook_id_is_one_per_job_and_event() -> None:
    """Derived, so a job re-run after a crash re-sends under the same id."""
    a = ids.webhook_id_for("job_1", "job.completed")
    assert a == ids.webhook_id_for("job_1", "job.completed")
    assert a != ids.webhook_id_for("job_1", "job.awaiting_response")
    assert a != ids.webhook_id_for("job_2", "job.completed")
    assert re.fullmatch(r"msg_[0-9a-hjkmnp-tv-z]{26}", a)


def test_base32_matches_the_digit_by_digit_definition() -> None:
    from gateway.ids import _ALPHABET, _b32

    def slow(value: int, length: int) -> str:
        out = []
        for _ in range(length):
            out.append(_ALPHABET[value & 31])
            value >>= 5
        return "".join(reversed(out))

    for value in (0, 1, 31, 32, 2**127 + 12345, 2**130 - 1, 0x1234_5678_9ABC_DEF0_1122_3344_5566_7788):
        assert _b32(value, 26) == slow(value, 26)


def test_ids_made_in_one_millisecond_keep_creation_order() -> None:
    """GET /v1/jobs lists newest first by id: jobs created in the same millisecond must not
    come back in random order."""
    made = [ids.job_id(1_700_000_000.0) for _ in range(200)]
    assert made == sorted(made) and len(set(made)) == 200


@given(
    st.integers(min_value=1, max_value=30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, 32**n - 1)))
)
def test_b32_matches_rfc4648_base32_mapped_to_crockford(case: tuple[int, int]) -> None:
    length, value = case
    groups = (length + 7) // 8
    rfc = base64.b32encode(value.to_bytes(groups * 5, "big")).decode("ascii")[-length:]
    expected = rfc.translate(
        str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789abcdefghjkmnpqrstvwxyz")
    )
    assert ids._b32(value, length) == expected
