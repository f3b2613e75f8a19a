"""Job statuses and THE transition table: the status machine as data, consulted by every write.

Every status change in the store is a compare-and-set on the old status. The table below is the
only place that says which changes exist; `check_path` validates a multi-hop change (the pipeline
may take a combined-mode job through several statuses in one write) before it is attempted.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence


class JobStatus(enum.StrEnum):
    PROCESSING_INBOUND = "processing_inbound"
    INBOUND_BLOCKED = "inbound_blocked"
    AWAITING_RESPONSE = "awaiting_response"
    PROCESSING_OUTBOUND = "processing_outbound"
    OUTBOUND_BLOCKED = "outbound_blocked"
    DELIVERING = "delivering"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


S = JobStatus

_ALWAYS = frozenset({S.EXPIRED, S.CANCELLED})

TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.PROCESSING_INBOUND: frozenset({S.INBOUND_BLOCKED, S.AWAITING_RESPONSE, S.PROCESSING_OUTBOUND})
    | _ALWAYS,
    # -> failed: its `job.awaiting_response` webhook got a 410 or was refused (CONTRACT §4)
    S.AWAITING_RESPONSE: frozenset({S.PROCESSING_OUTBOUND, S.FAILED}) | _ALWAYS,
    S.PROCESSING_OUTBOUND: frozenset({S.OUTBOUND_BLOCKED, S.DELIVERING}) | _ALWAYS,
    S.DELIVERING: frozenset({S.COMPLETED, S.FAILED}) | _ALWAYS,
    S.INBOUND_BLOCKED: frozenset(),
    S.OUTBOUND_BLOCKED: frozenset(),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.EXPIRED: frozenset(),
    S.CANCELLED: frozenset(),
}

TERMINAL: frozenset[JobStatus] = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
NON_TERMINAL: frozenset[JobStatus] = frozenset(JobStatus) - TERMINAL

# Statuses a worker claims and runs the filter on.
RUNNABLE: tuple[JobStatus, ...] = (S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND)


class IllegalTransition(ValueError):
    """A change the table does not allow: a bug in the caller, never a race."""


def can_transition(old: JobStatus, new: JobStatus) -> bool:
    return new in TRANSITIONS[old]


def check_path(path: Sequence[JobStatus]) -> None:
    """Raise unless every hop of `path` is in the table (a path of one status is a no-op)."""
    if not path:
        raise IllegalTransition("empty path")
    for old, new in itertools.pairwise(path):
        if not can_transition(old, new):
            raise IllegalTransition(f"{old} -> {new} is not a legal transition")


class Mode(enum.StrEnum):
    SEPARATE = "separate"
    COMBINED = "combined"


class WebhookEvent(enum.StrEnum):
    AWAITING_RESPONSE = "job.awaiting_response"
    INBOUND_BLOCKED = "job.inbound_blocked"
    OUTBOUND_BLOCKED = "job.outbound_blocked"
    COMPLETED = "job.completed"


class DeliveryState(enum.StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
