"""What filtering decides for a job: the statuses it moves through, what it records, which webhook
it queues. Pure functions, shared by the two places a job is filtered:

- `POST /v1/jobs`, for jobs whose texts are small (`GATEWAY_INLINE_FILTER_MAX_CHARS`, 8192 by
  default: a typical exchange costs about 0.1 ms of rule engine): the request filters them and
  the create's one write stores the job already at its next status with its webhook queued (no
  claim, no second write);
- the worker, for everything else (large texts, answers posted to `/response`, jobs whose process
  died before finishing them).

Either way the job takes the same path and queues the same webhook under the same id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gateway import ids
from gateway.jobs import JobStatus, Mode, WebhookEvent
from gateway.store.base import FilterOutcome, JobChanges, NewDelivery
from gateway.webhooks import event_body
from rules import CompiledPolicy

log = logging.getLogger("gateway.pipeline")

S = JobStatus


class JobFields(Protocol):
    """What a plan reads of a job (a stored `Job` or a `NewJob` about to be stored)."""

    @property
    def id(self) -> str: ...
    @property
    def mode(self) -> Mode: ...
    @property
    def webhook_url(self) -> str | None: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def expires_at(self) -> float: ...


def fail_closed(rule: str, message: str) -> dict[str, Any]:
    """The verdict recorded when a job cannot be filtered: blocked, never let through unfiltered."""
    return {
        "verdict": "blocked",
        "message": None,
        "matches": [
            {"rule": rule, "category": "gateway", "action": "block", "start": 0, "end": 0, "score": 1.0}
        ],
        "error": message,
    }


BLOCKED = "blocked"


def safe_scan(
    policy: CompiledPolicy | None, text: str | None, direction: str
) -> tuple[dict[str, Any], float]:
    """Filter one text; any failure is a block (fail closed), never an exception. Returns the
    verdict and the seconds the engine took (the helper process sends both back)."""
    if policy is None:
        return fail_closed("gateway.policy_unavailable", "the job's policy no longer exists"), 0.0
    if text is None:
        return fail_closed("gateway.missing_text", f"no {direction} text to filter"), 0.0
    started = time.perf_counter()
    try:
        verdict = policy.scan(text, direction).to_dict()
    except Exception:
        log.exception("filter crashed on a %s message", direction)
        verdict = fail_closed("gateway.filter_error", "the filter failed on this message")
    return verdict, time.perf_counter() - started


def scan_chain(
    policy: CompiledPolicy | None, texts: Sequence[tuple[str | None, str]]
) -> list[tuple[dict[str, Any], float]]:
    """`safe_scan` of each (text, direction) in order, stopping after the first blocked verdict
    (see `texts_to_scan`): what the filter process and the event loop both run."""
    out = []
    for text, direction in texts:
        verdict, seconds = safe_scan(policy, text, direction)
        out.append((verdict, seconds))
        if verdict["verdict"] == BLOCKED:
            break
    return out


def texts_to_scan(
    status: JobStatus, mode: Mode, input_text: str | None, output_text: str | None
) -> list[tuple[str | None, str]]:
    """What filtering a job in `status` scans, in order, as (text, direction). The scan stops after
    the first blocked verdict: a combined job's answer is filtered only if its prompt passed."""
    if status is S.PROCESSING_OUTBOUND:
        return [(output_text, "outbound")]
    texts: list[tuple[str | None, str]] = [(input_text, "inbound")]
    if mode is Mode.COMBINED:
        texts.append((output_text, "outbound"))
    return texts


def split_verdicts(
    status: JobStatus, verdicts: Sequence[dict[str, Any]], stored_inbound: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(inbound, outbound) for `plan`, from the verdicts of `texts_to_scan`'s texts."""
    if status is S.PROCESSING_OUTBOUND:
        return stored_inbound, verdicts[0]
    return verdicts[0], verdicts[1] if len(verdicts) > 1 else None


def plan(
    job: JobFields,
    status: JobStatus,
    *,
    inbound: dict[str, Any] | None,
    outbound: dict[str, Any] | None,
    now: float,
) -> FilterOutcome:
    """The write that follows filtering a job in `status` (processing_inbound or processing_outbound).

    `inbound` is the prompt's verdict (fresh when `status` is processing_inbound, else the stored
    one); `outbound` the answer's, when `texts_to_scan` had it filtered."""
    path: list[JobStatus] = [status]
    changes: dict[str, Any] = {}
    event: WebhookEvent | None = None
    if status is S.PROCESSING_INBOUND:
        assert inbound is not None
        changes.update(inbound=inbound, clear_input=True)
        if inbound["verdict"] == BLOCKED:
            path.append(S.INBOUND_BLOCKED)
            event = WebhookEvent.INBOUND_BLOCKED
        elif job.mode is Mode.SEPARATE:
            path.append(S.AWAITING_RESPONSE)
            event = WebhookEvent.AWAITING_RESPONSE
        else:
            path.append(S.PROCESSING_OUTBOUND)
    if path[-1] is S.PROCESSING_OUTBOUND:
        assert outbound is not None
        changes.update(outbound=outbound, clear_output=True)
        if outbound["verdict"] == BLOCKED:
            path.append(S.OUTBOUND_BLOCKED)
            event = WebhookEvent.OUTBOUND_BLOCKED
        else:
            path.append(S.DELIVERING)
            event = WebhookEvent.COMPLETED
            if job.webhook_url is None:
                path.append(S.COMPLETED)
    deliveries: tuple[NewDelivery, ...] = ()
    if job.webhook_url is not None and event is not None:
        body = event_body(event, job.id, job.metadata, now=now, inbound=inbound, outbound=outbound)
        wid = ids.webhook_id_for(job.id, event.value)
        deliveries = (NewDelivery(wid, event.value, job.webhook_url, body, deadline=job.expires_at),)
    return FilterOutcome(tuple(path), JobChanges(**changes), deliveries)
