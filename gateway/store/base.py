"""The Store seam: every query the API, the pipeline and the sweeper need, and nothing else.

SQLite and PostgreSQL implement it; one conformance suite (tests/integration/store/test_conformance.py)
runs against both. Rules every implementation keeps:

- A status change is a compare-and-set on the expected old status (and, for a worker, on the lease
  owner): it returns False when the row was not in that state, and then changes nothing.
- A claim hands a row to one owner until `lease` seconds pass; the claim column (`run_at` for jobs,
  `due_at` for deliveries) is pushed to the lease's end, so a row whose owner died becomes due again
  by itself and the claim query needs no separate "lease expired" branch.
- Terminal jobs never change status again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.jobs import DeliveryState, JobStatus, Mode


class StoreError(Exception):
    """The database could not do the work (locked, full, unreachable): the API answers 503."""


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    attempts: int
    last_attempt_at: float | None
    last_status_code: int | None
    next_attempt_at: float | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    tenant_id: str
    status: JobStatus
    mode: Mode
    policy: str
    input_text: str | None
    output_text: str | None
    inbound: dict[str, Any] | None
    outbound: dict[str, Any] | None
    webhook_url: str | None
    secret_enc: bytes | None
    signing_key_enc: bytes | None
    metadata: dict[str, Any]
    created_at: float
    updated_at: float
    expires_at: float
    finished_at: float | None
    error_code: str | None
    error_message: str | None
    idem_key: str | None
    idem_hash: str | None
    lease_owner: str | None
    delivery: DeliverySummary | None = None


@dataclass(frozen=True, slots=True)
class NewJob:
    id: str
    tenant_id: str
    mode: Mode
    policy: str
    input_text: str
    output_text: str | None
    webhook_url: str | None
    secret_enc: bytes | None
    signing_key_enc: bytes | None
    metadata: Mapping[str, Any]
    created_at: float
    expires_at: float
    idem_key: str | None = None
    idem_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    delivery_id: str
    job_id: str
    event: str
    attempt: int
    started_at: float
    duration_ms: float
    status_code: int | None
    error: str | None
    response_excerpt: str | None
    next_attempt_at: float | None


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """One webhook message: the same id and body on every retry (receivers dedupe on the id)."""

    id: str
    event: str
    url: str
    body: bytes
    deadline: float


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str
    job_id: str
    tenant_id: str
    event: str
    url: str
    body: bytes
    state: DeliveryState
    attempts: int
    deadline: float
    created_at: float
    secret_enc: bytes | None
    signing_key_enc: bytes | None
    job_status: JobStatus


@dataclass(frozen=True, slots=True)
class QueueStat:
    depth: int
    oldest_since: float | None


@dataclass(frozen=True, slots=True)
class QueueStats:
    queues: dict[str, QueueStat]
    retrying: int


@dataclass(frozen=True, slots=True)
class JobChanges:
    """Columns a transition may set besides the status. None leaves a column as it is."""

    input_text: str | None = None
    output_text: str | None = None
    clear_input: bool = False
    clear_output: bool = False
    inbound: Mapping[str, Any] | None = None
    outbound: Mapping[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """What filtering a job decided (gateway/plan.py): the statuses it moves through (`path[0]` is
    the status it was filtered in), the columns it records, and the webhooks it queues."""

    path: tuple[JobStatus, ...]
    changes: JobChanges
    deliveries: tuple[NewDelivery, ...] = ()


def expiry_changes(status: JobStatus) -> JobChanges:
    """What a job records when it expires (the sweeper, or a request that finds it overdue)."""
    return JobChanges(
        error_code="job_expired",
        error_message=f"the job did not finish before expires_at (it was {status.value})",
    )


@dataclass(frozen=True, slots=True)
class PolicyRecord:
    name: str
    source: dict[str, Any]
    updated_at: float


@dataclass(frozen=True, slots=True)
class CasResult:
    """Outcome of an API-driven compare-and-set: ok, or why not (with the job as it now is)."""

    ok: bool
    job: Job | None = None


class Store(Protocol):
    # lifecycle
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> None: ...

    def on_work(self, callback: Callable[[str], None]) -> None:
        """Call `callback("jobs")` / `callback("deliveries")` when another process makes work due
        (PostgreSQL: LISTEN/NOTIFY). Stores that cannot signal do nothing: workers poll."""
        ...

    # tenants, API keys, policies
    async def add_api_key(self, tenant_id: str, key_hash: str, now: float) -> str: ...
    async def tenant_for_key(self, key_hash: str) -> str | None: ...
    async def revoke_api_key(self, key_hash: str, now: float) -> bool:
        """Revoke a live key; False when no live key has this hash (unknown or revoked already)."""
        ...

    async def count_api_keys(self) -> int: ...
    async def put_policy(self, tenant_id: str, name: str, source: Mapping[str, Any], now: float) -> None: ...
    async def get_policy(self, tenant_id: str, name: str) -> PolicyRecord | None: ...
    async def list_policies(self, tenant_id: str) -> list[PolicyRecord]: ...
    async def delete_policy(self, tenant_id: str, name: str) -> bool: ...

    # jobs
    async def create_job(
        self,
        job: NewJob,
        *,
        claim_for: str | None,
        lease: float,
        idempotency_ttl: float,
        filtered: FilterOutcome | None = None,
    ) -> tuple[Job, bool]:
        """Insert a job in `processing_inbound`. With an idempotency key already used by the tenant
        within `idempotency_ttl`, insert nothing and return (that job, False). With `claim_for`, the
        new job is already leased to that worker (saves a claim round-trip on the hot path).

        With `filtered` (the request filtered the job already), the same write stores the job at
        `filtered.path[-1]` with `filtered.changes` applied, exactly as `transition` would, and
        queues `filtered.deliveries`, leased to `claim_for` when given, else due at once."""
        ...

    async def get_job(self, tenant_id: str, job_id: str) -> Job | None: ...
    async def list_jobs(
        self, tenant_id: str, *, status: JobStatus | None, limit: int, before_id: str | None
    ) -> list[Job]: ...
    async def list_attempts(self, tenant_id: str, job_id: str) -> list[Attempt]: ...

    async def transition(
        self,
        job_id: str,
        path: Sequence[JobStatus],
        *,
        now: float,
        owner: str | None = None,
        changes: JobChanges = JobChanges(),
        deliveries: Sequence[NewDelivery] = (),
        claim_for: str | None = None,
        lease: float = 0.0,
    ) -> bool:
        """CAS from path[0] to path[-1] (every hop checked against the table); with `owner`, only
        while that worker holds the lease. Inserts `deliveries` in the same transaction (pre-claimed
        by `claim_for` if given). A runnable target status is claimable at once, or leased to
        `claim_for`."""
        ...

    async def submit_response(
        self,
        tenant_id: str,
        job_id: str,
        output_text: str,
        *,
        now: float,
        claim_for: str | None,
        lease: float,
    ) -> CasResult: ...

    async def cancel_job(self, tenant_id: str, job_id: str, *, now: float) -> CasResult: ...

    # workers
    async def claim_jobs(self, owner: str, *, now: float, lease: float, limit: int) -> list[Job]: ...
    async def claim_deliveries(
        self, owner: str, *, now: float, lease: float, limit: int
    ) -> list[Delivery]: ...
    async def renew_leases(
        self, owner: str, job_ids: Sequence[str], delivery_ids: Sequence[str], *, until: float
    ) -> None: ...
    async def release_leases(
        self, owner: str, job_ids: Sequence[str], delivery_ids: Sequence[str], *, now: float
    ) -> None: ...

    async def record_attempt(
        self,
        attempt: Attempt,
        *,
        owner: str,
        state: DeliveryState,
        now: float,
        job_path: Sequence[JobStatus] | None = None,
        job_changes: JobChanges = JobChanges(),
    ) -> bool:
        """Log one attempt and move the delivery to `state` (pending = retry at
        attempt.next_attempt_at), only while `owner` holds it; in the same transaction apply
        `job_path` to the job (e.g. delivering -> completed). False when the lease was lost."""
        ...

    async def drop_overdue_delivery(
        self, delivery_id: str, job_id: str, tenant_id: str, *, owner: str, now: float
    ) -> bool:
        """A webhook `owner` holds came due only after its job's `expires_at` (a worker was down
        or late): it is not sent. A job that is not finished yet expires here, as the sweeper
        would expire it, which stops this webhook and the job's others; else (a blocked job's
        notice) the webhook alone ends `failed`. False when nothing changed (the lease was lost)."""
        ...

    # sweeper and health
    async def expire_due(self, *, now: float, limit: int) -> list[str]: ...
    async def purge_finished(self, *, before: float, limit: int) -> int: ...
    async def queue_stats(self) -> QueueStats: ...
