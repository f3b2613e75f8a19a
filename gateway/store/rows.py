"""What both stores share: JSON columns, the row -> record mappers, and the queue names.

Both stores select job, delivery and attempt columns in the same order (their `job_columns`,
`delivery_columns` and attempt queries), so one mapper per record serves both: an sqlite3 tuple
and an asyncpg Record are both indexed by position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.jobs import RUNNABLE, TERMINAL, DeliveryState, JobStatus, Mode, check_path
from gateway.store.base import Attempt, Delivery, DeliverySummary, FilterOutcome, Job, NewJob

Row = Sequence[Any]

# A cancelled or expired job's webhooks stop; a blocked or finished job's notices run their course.
STOPS_DELIVERY = frozenset({JobStatus.CANCELLED, JobStatus.EXPIRED})
QUEUES = ("processing_inbound", "processing_outbound", "awaiting_response", "delivering")
JOB_COLUMN_COUNT = 22


def to_json(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def from_json(value: str | bytes | None) -> Any:
    return None if value is None else orjson.loads(value)


@dataclass(frozen=True, slots=True)
class InitialState:
    """The columns a new job is stored with: `processing_inbound` with its texts, or, when the
    request filtered it already, the state `transition(filtered.path, filtered.changes)` would
    leave it in."""

    status: JobStatus
    input_text: str | None
    output_text: str | None
    inbound: Mapping[str, Any] | None
    outbound: Mapping[str, Any] | None
    finished_at: float | None
    run_at: float | None
    lease_owner: str | None
    error_code: str | None
    error_message: str | None

    def job(self, new: NewJob, *, now: float) -> Job:
        return Job(
            id=new.id,
            tenant_id=new.tenant_id,
            status=self.status,
            mode=new.mode,
            policy=new.policy,
            input_text=self.input_text,
            output_text=self.output_text,
            inbound=None if self.inbound is None else dict(self.inbound),
            outbound=None if self.outbound is None else dict(self.outbound),
            webhook_url=new.webhook_url,
            secret_enc=new.secret_enc,
            signing_key_enc=new.signing_key_enc,
            metadata=dict(new.metadata),
            created_at=now,
            updated_at=now,
            expires_at=new.expires_at,
            finished_at=self.finished_at,
            error_code=self.error_code,
            error_message=self.error_message,
            idem_key=new.idem_key,
            idem_hash=new.idem_hash,
            lease_owner=self.lease_owner,
            delivery=DeliverySummary(0, None, None, None, None) if new.webhook_url else None,
        )


def initial_state(
    new: NewJob, filtered: FilterOutcome | None, *, now: float, claim_for: str | None, lease: float
) -> InitialState:
    status = JobStatus.PROCESSING_INBOUND
    input_text: str | None = new.input_text
    output_text = new.output_text
    inbound = outbound = None
    error_code = error_message = None
    if filtered is not None:
        if filtered.path[0] is not JobStatus.PROCESSING_INBOUND:
            raise ValueError("a new job is filtered from processing_inbound")
        check_path(filtered.path)
        status = filtered.path[-1]
        ch = filtered.changes
        input_text = None if ch.clear_input else (ch.input_text if ch.input_text is not None else input_text)
        output_text = (
            None if ch.clear_output else (ch.output_text if ch.output_text is not None else output_text)
        )
        inbound, outbound = ch.inbound, ch.outbound
        error_code, error_message = ch.error_code, ch.error_message
    runnable = status in RUNNABLE
    return InitialState(
        status=status,
        input_text=input_text,
        output_text=output_text,
        inbound=inbound,
        outbound=outbound,
        finished_at=now if status in TERMINAL else None,
        run_at=(now + lease if claim_for else now) if runnable else None,
        lease_owner=claim_for if runnable else None,
        error_code=error_code,
        error_message=error_message,
    )


def row_to_job(r: Row, delivery: DeliverySummary | None = None) -> Job:
    return Job(
        id=r[0],
        tenant_id=r[1],
        status=JobStatus(r[2]),
        mode=Mode(r[3]),
        policy=r[4],
        input_text=r[5],
        output_text=r[6],
        inbound=from_json(r[7]),
        outbound=from_json(r[8]),
        webhook_url=r[9],
        secret_enc=r[10],
        signing_key_enc=r[11],
        metadata=from_json(r[12]) or {},
        created_at=r[13],
        updated_at=r[14],
        expires_at=r[15],
        finished_at=r[16],
        error_code=r[17],
        error_message=r[18],
        idem_key=r[19],
        idem_hash=r[20],
        lease_owner=r[21],
        delivery=delivery,
    )


def row_to_delivery(r: Row) -> Delivery:
    return Delivery(
        id=r[0],
        job_id=r[1],
        tenant_id=r[2],
        event=r[3],
        url=r[4],
        body=bytes(r[5]),
        state=DeliveryState(r[6]),
        attempts=r[7],
        deadline=r[8],
        created_at=r[9],
        secret_enc=r[10],
        signing_key_enc=r[11],
        job_status=JobStatus(r[12]),
    )


def row_to_attempt(r: Row) -> Attempt:
    return Attempt(
        delivery_id=r[0],
        job_id=r[1],
        event=r[2],
        attempt=r[3],
        started_at=r[4],
        duration_ms=r[5],
        status_code=r[6],
        error=r[7],
        response_excerpt=r[8],
        next_attempt_at=r[9],
    )
