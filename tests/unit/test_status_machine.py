"""The status machine: only the table's transitions happen, terminal statuses never change."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.jobs import (
    NON_TERMINAL,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    JobStatus,
    can_transition,
    check_path,
)

S = JobStatus


def test_contract_paths_are_legal() -> None:
    check_path([S.PROCESSING_INBOUND, S.AWAITING_RESPONSE, S.PROCESSING_OUTBOUND, S.DELIVERING, S.COMPLETED])
    check_path([S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING, S.COMPLETED])
    check_path([S.PROCESSING_INBOUND, S.INBOUND_BLOCKED])
    check_path([S.PROCESSING_OUTBOUND, S.OUTBOUND_BLOCKED])
    check_path([S.DELIVERING, S.FAILED])


def test_terminal_statuses_are_exactly_the_contracts() -> None:
    assert {
        S.INBOUND_BLOCKED,
        S.OUTBOUND_BLOCKED,
        S.COMPLETED,
        S.FAILED,
        S.EXPIRED,
        S.CANCELLED,
    } == TERMINAL


def test_every_non_terminal_status_can_expire_and_be_cancelled() -> None:
    for status in NON_TERMINAL:
        assert can_transition(status, S.EXPIRED)
        assert can_transition(status, S.CANCELLED)


def test_skipping_or_reversing_is_illegal() -> None:
    for path in (
        [S.AWAITING_RESPONSE, S.DELIVERING],
        [S.PROCESSING_INBOUND, S.COMPLETED],
        [S.COMPLETED, S.DELIVERING],
        [S.EXPIRED, S.PROCESSING_INBOUND],
    ):
        with pytest.raises(IllegalTransition):
            check_path(path)


@given(st.lists(st.sampled_from(list(JobStatus)), min_size=1, max_size=30))
def test_random_event_sequences_follow_the_table(events: list[JobStatus]) -> None:
    """Drive a job with random requested statuses: a request is applied only if the table allows it,
    and once terminal the status never changes again."""
    status = S.PROCESSING_INBOUND
    history = [status]
    for wanted in events:
        if can_transition(status, wanted):
            status = wanted
            history.append(status)
    for old, new in itertools.pairwise(history):
        assert new in TRANSITIONS[old]
    terminal_at = next((i for i, s in enumerate(history) if s in TERMINAL), None)
    if terminal_at is not None:
        assert terminal_at == len(history) - 1
