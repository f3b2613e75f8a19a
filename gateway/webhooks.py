"""Webhook bodies: built once when a delivery is queued, so every retry sends the same bytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.clock import rfc3339
from gateway.jobs import JobStatus, WebhookEvent

_STATUS_FOR_EVENT = {
    WebhookEvent.AWAITING_RESPONSE: JobStatus.AWAITING_RESPONSE,
    WebhookEvent.INBOUND_BLOCKED: JobStatus.INBOUND_BLOCKED,
    WebhookEvent.OUTBOUND_BLOCKED: JobStatus.OUTBOUND_BLOCKED,
    WebhookEvent.COMPLETED: JobStatus.COMPLETED,
}


def without_content(verdict: dict[str, Any] | None) -> dict[str, Any] | None:
    """A blocked exchange's notice carries the verdict and matches, never the text."""
    if verdict is None:
        return None
    return {"verdict": verdict["verdict"], "matches": verdict["matches"]}


def event_body(
    event: WebhookEvent,
    job_id: str,
    metadata: Mapping[str, Any],
    *,
    now: float,
    inbound: dict[str, Any] | None,
    outbound: dict[str, Any] | None,
) -> bytes:
    data: dict[str, Any]
    if event is WebhookEvent.AWAITING_RESPONSE:
        data = {"inbound": inbound}
    elif event is WebhookEvent.INBOUND_BLOCKED:
        data = {"inbound": without_content(inbound)}
    elif event is WebhookEvent.OUTBOUND_BLOCKED:
        data = {"inbound": without_content(inbound), "outbound": without_content(outbound)}
    else:
        data = {"inbound": inbound, "outbound": outbound}
    payload = {
        "event": event.value,
        "job_id": job_id,
        "status": _STATUS_FOR_EVENT[event].value,
        "timestamp": rfc3339(now),
        "metadata": metadata,
        "data": data,
    }
    return orjson.dumps(payload)
