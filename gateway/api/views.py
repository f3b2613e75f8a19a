"""Jobs and attempts as the API shows them. The one place that decides what a client sees, which
is why the secrets (`secret_enc`, `signing_key_enc`) and the raw texts are never read here."""

from __future__ import annotations

import re
from typing import Any

from gateway.clock import rfc3339
from gateway.jobs import JobStatus
from gateway.store.base import Attempt, Job

# `job_` + a ULID in gateway.ids' lowercase Crockford alphabet: checked before any database read,
# so a garbage id is a cheap 404 (or a 422 as a list cursor).
JOB_ID_RE = re.compile(r"job_[0-9a-hjkmnp-tv-z]{26}")

#: The statuses whose `error` is set (CONTRACT §2: `{code, message}` for failed and expired, else null)
_ERROR_STATUSES = frozenset({JobStatus.FAILED, JobStatus.EXPIRED})


def is_job_id(value: str) -> bool:
    return JOB_ID_RE.fullmatch(value) is not None


def job_view(job: Job) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "status": job.status.value,
        "mode": job.mode.value,
        "policy": job.policy,
        "signature_scheme": "v1a" if job.signing_key_enc is not None else "v1",
        "created_at": rfc3339(job.created_at),
        "updated_at": rfc3339(job.updated_at),
        "expires_at": rfc3339(job.expires_at),
        "metadata": job.metadata,
        "webhook_url": job.webhook_url,
        "inbound": job.inbound,
        "outbound": job.outbound,
        "delivery": _delivery_view(job),
        "error": _error_view(job),
    }


def _delivery_view(job: Job) -> dict[str, Any] | None:
    if job.webhook_url is None:
        return None
    d = job.delivery
    if d is None:
        return {
            "attempts": 0,
            "last_attempt_at": None,
            "last_status_code": None,
            "next_attempt_at": None,
            "last_error": None,
        }
    return {
        "attempts": d.attempts,
        "last_attempt_at": rfc3339(d.last_attempt_at),
        "last_status_code": d.last_status_code,
        "next_attempt_at": rfc3339(d.next_attempt_at),
        "last_error": d.last_error,
    }


def _error_view(job: Job) -> dict[str, str] | None:
    if job.status not in _ERROR_STATUSES or job.error_code is None:
        return None
    return {"code": job.error_code, "message": job.error_message or job.error_code.replace("_", " ")}


def attempt_view(attempt: Attempt) -> dict[str, Any]:
    return {
        "event": attempt.event,
        "webhook_id": attempt.delivery_id,
        "attempt": attempt.attempt,
        "started_at": rfc3339(attempt.started_at),
        "duration_ms": round(attempt.duration_ms, 3),
        "status_code": attempt.status_code,
        "error": attempt.error,
        "next_attempt_at": rfc3339(attempt.next_attempt_at),
    }
