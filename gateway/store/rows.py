"""What both stores share: JSON columns, the row -> record mappers, and the queue names.

Both stores select job, delivery and attempt columns in the same order (their `job_columns`,
`delivery_columns` and attempt queries), so one mapper per record serves both: an sqlite3 tuple
and an asyncpg Record are both indexed by position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.jobs import DeliveryState, JobStatus, Mode
from gateway.store.base import Attempt, Delivery, DeliverySummary, Job

Row = Sequence[Any]

# A cancelled or expired job's webhooks stop; a blocked or finished job's notices run their course.
STOPS_DELIVERY = frozenset({JobStatus.CANCELLED, JobStatus.EXPIRED})
QUEUES = ("processing_inbound", "processing_outbound", "awaiting_response", "delivering")
JOB_COLUMN_COUNT = 22


def to_json(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def from_json(value: str | bytes | None) -> Any:
    return None if value is None else orjson.loads(value)


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
