"""The LLM backend's side of one exchange, with `gateway.client.GatewayClient` (separate mode).

    export GATEWAY_URL=http://127.0.0.1:8080 GATEWAY_API_KEY=gwk_...
    python examples/backend_client.py "Email me at jane@example.com about my order"

1. create a job with the user's prompt (the gateway filters it with the inbound rules);
2. keep the job's webhook secret, shown only in this answer, where the receiver can find it;
3. wait until the job is `awaiting_response` (polling 2 s, 4 s, 8 s ... up to 30 s apart);
4. call the LLM with the *filtered* prompt and submit its answer (filtered with the outbound rules);
5. wait for the final status and print it.

With `WEBHOOK_URL` set (e.g. `http://127.0.0.1:9000/webhooks/gateway`, `examples/receiver_starlette.py`),
the gateway also POSTs signed webhooks there, and the secret is written to `WEBHOOK_SECRETS_DIR/<job_id>`
(default `./webhook-secrets`) for the receiver. A backend that has a receiver would usually react to
`job.awaiting_response` there instead of polling; polling is the fallback that always works.

Prints the final job as one JSON line on standard output (progress goes to standard error) and exits 0
when the job completed, 1 when it ended any other way.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from gateway.client import TERMINAL_STATUSES, GatewayClient, GatewayError


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def call_llm(prompt: str) -> str:
    """Stand-in for your model call. It only ever sees the filtered prompt."""
    await asyncio.sleep(0)
    return f"Thanks for your message ({prompt!r}). Our team will get back to you today."


def store_secret(directory: Path, job_id: str, secret: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / job_id
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # readable by us only
    with os.fdopen(fd, "w") as f:
        f.write(secret)


async def run(prompt: str) -> dict[str, Any]:
    base_url = os.environ.get("GATEWAY_URL", "http://127.0.0.1:8080")
    api_key = os.environ["GATEWAY_API_KEY"]
    webhook_url = os.environ.get("WEBHOOK_URL") or None
    secrets_dir = Path(os.environ.get("WEBHOOK_SECRETS_DIR", "webhook-secrets"))

    async with GatewayClient(base_url, api_key) as gw:
        # An idempotency key makes "retry the create after a network error" safe: same job, same secret.
        job = await gw.create_job(
            prompt,
            webhook_url=webhook_url,
            metadata={"conversation": "example-1"},
            idempotency_key=str(uuid.uuid4()),
        )
        job_id = job["job_id"]
        if webhook_url:
            store_secret(secrets_dir, job_id, job["webhook_secret"])
        say(f"created {job_id} ({job['mode']} mode), expires {job['expires_at']}")

        job = await gw.wait_for_job(job_id, statuses={"awaiting_response", *TERMINAL_STATUSES})
        if job["status"] != "awaiting_response":
            say(f"{job_id} ended as {job['status']} before the LLM was asked")
            return job
        inbound = job["inbound"]
        say(f"inbound {inbound['verdict']}: {inbound['message']!r}")

        answer = await call_llm(inbound["message"])
        try:
            await gw.submit_response(job_id, answer)
        except GatewayError as exc:
            if exc.code in ("job_expired", "invalid_state"):  # expired or cancelled meanwhile
                say(f"{job_id} no longer takes a response: {exc.message}")
                return await gw.get_job(job_id)
            raise

        final = await gw.wait_for_job(job_id)
        outbound = final.get("outbound") or {}
        say(f"{job_id} is {final['status']}; outbound {outbound.get('verdict')}: {outbound.get('message')!r}")
        return final


def main() -> int:
    prompt = " ".join(sys.argv[1:]) or "Hello! Can you email me at jane.doe@example.com?"
    try:
        final = asyncio.run(run(prompt))
    except GatewayError as exc:
        say(f"gateway error: {exc}")
        return 2
    print(json.dumps(final), flush=True)
    return 0 if final["status"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
