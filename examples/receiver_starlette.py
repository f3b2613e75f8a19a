"""A webhook receiver for the gateway, in Starlette.

    WEBHOOK_SECRETS_DIR=./webhook-secrets uvicorn examples.receiver_starlette:app --port 9000

It does what every receiver should, in this order:

1. Read the raw body. The signature covers the exact bytes, so verify those, never re-serialised JSON.
2. Find the job's secret. The gateway makes one `whsec_` secret per job and shows it once, in the
   answer to `POST /v1/jobs`; whoever created the job keeps it under the job id (here: one file per job
   in `WEBHOOK_SECRETS_DIR`, as `examples/backend_client.py` writes them; in production, your database).
   The job id is read from the body before verifying, so it is validated before it is used.
3. Verify the signature and the timestamp (`gateway.client.verify_webhook`: constant-time comparison,
   5 minutes of tolerance), or answer 401.
4. Deduplicate on `webhook-id`. It is the same on every retry of one (job, event), so a webhook that was
   already accepted gets a 200 and is not processed twice. (Here an in-memory LRU; in production a
   unique key in your database, written in the same transaction as the work.)
5. Queue the event and answer at once. The gateway gives up on an attempt after
   `GATEWAY_WEBHOOK_TIMEOUT_SECONDS` (15 s by default) and retries, so slow work belongs in the background.

Answers: 202 accepted, 200 duplicate, 400 malformed, 401 not authentic, 503 + `Retry-After` when the
secret is not known yet or the queue is full (the gateway honours `Retry-After` and tries again).

Settings (environment): `WEBHOOK_SECRETS_DIR` (default `./webhook-secrets`), `WEBHOOK_TOLERANCE_SECONDS`
(default 300), `RECEIVER_EVENTS_FILE` (optional: every processed event is appended there as a JSON line,
which stands in for "do the work").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from gateway.client import WebhookVerificationError, verify_webhook

log = logging.getLogger("receiver")

SECRETS_DIR = Path(os.environ.get("WEBHOOK_SECRETS_DIR", "webhook-secrets"))
TOLERANCE_SECONDS = int(os.environ.get("WEBHOOK_TOLERANCE_SECONDS", "300"))
EVENTS_FILE = os.environ.get("RECEIVER_EVENTS_FILE")
JOB_ID = re.compile(r"job_[0-9a-z]{1,64}")
MAX_BODY_BYTES = 1024 * 1024


class SeenIds:
    """The webhook-ids already accepted, newest kept: a bounded stand-in for a database unique key."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity

    def __contains__(self, webhook_id: object) -> bool:
        return webhook_id in self._ids

    def add(self, webhook_id: str) -> None:
        self._ids[webhook_id] = None
        self._ids.move_to_end(webhook_id)
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)


seen = SeenIds()
queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=10_000)


def secret_for(job_id: str) -> str | None:
    """The job's `whsec_` secret as the backend stored it, or None if it has not (yet)."""
    try:
        return (SECRETS_DIR / job_id).read_text().strip() or None
    except FileNotFoundError:
        return None


def problem(status: int, message: str, **headers: str) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


async def receive_webhook(request: Request) -> Response:
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        return problem(413, "body too large")
    try:
        unverified = json.loads(body)
        job_id = unverified["job_id"]
    except (ValueError, TypeError, KeyError):
        return problem(400, "not a gateway webhook")
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        return problem(400, "not a gateway job id")

    secret = secret_for(job_id)
    if secret is None:
        # Unknown job: forged, or the backend has not stored the secret yet. A 503 with Retry-After
        # makes the gateway try again shortly instead of waiting for its next scheduled retry.
        return problem(503, "unknown job", **{"Retry-After": "1"})
    try:
        verify_webhook(body, request.headers, secret, tolerance_seconds=TOLERANCE_SECONDS)
    except WebhookVerificationError as exc:
        log.warning("rejected webhook for %s: %s", job_id, exc)
        return problem(401, "signature verification failed")

    webhook_id = request.headers["webhook-id"]
    if webhook_id in seen:
        return JSONResponse({"status": "duplicate"}, status_code=200)
    payload: dict[str, Any] = unverified  # verified now
    try:
        queue.put_nowait({"webhook_id": webhook_id, **payload})
    except asyncio.QueueFull:
        return problem(503, "busy", **{"Retry-After": "5"})
    seen.add(webhook_id)  # only once it is safely queued: a 503 above must not count as "seen"
    return JSONResponse({"status": "accepted"}, status_code=202)


async def handle_event(event: dict[str, Any]) -> None:
    """The real work goes here: for `job.awaiting_response`, call your LLM with
    `event["data"]["inbound"]["message"]` (the filtered prompt) and POST the answer to
    `/v1/jobs/{job_id}/response`; for `job.completed`, show `data.outbound.message` to the user;
    for `*_blocked`, tell the user why (`data.*.matches`), never with the blocked text."""
    log.info("%s %s (%s)", event["event"], event["job_id"], event["webhook_id"])
    if EVENTS_FILE:
        line = json.dumps(event, separators=(",", ":")) + "\n"
        await asyncio.to_thread(_append, Path(EVENTS_FILE), line)


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(line)


async def worker() -> None:
    while True:
        event = await queue.get()
        try:
            await handle_event(event)
        except Exception:  # one bad event must not stop the worker
            log.exception("failed to handle %s", event.get("webhook_id"))
        finally:
            queue.task_done()


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    task = asyncio.create_task(worker())
    try:
        yield
    finally:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(queue.join(), timeout=10)  # finish what was accepted
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


app = Starlette(
    routes=[
        Route("/webhooks/gateway", receive_webhook, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ],
    lifespan=lifespan,
)

if __name__ == "__main__":
    import uvicorn

    logging.basicConfig(level=logging.INFO)
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "9000")))
