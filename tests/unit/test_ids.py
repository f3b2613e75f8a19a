from __future__ import annotations

import re

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
