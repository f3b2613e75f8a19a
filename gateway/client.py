"""A small async client for the gateway's HTTP API, for the LLM backend's side of the exchange.

    async with GatewayClient("http://127.0.0.1:8080", api_key) as gw:
        job = await gw.create_job("user prompt", webhook_url="https://me.example/hooks")
        ...
        await gw.submit_response(job["job_id"], llm_answer)
        final = await gw.wait_for_job(job["job_id"])

Responses are returned as the API's JSON (plain dicts), so the client never lags behind new fields.
Every non-2xx answer raises `GatewayError` carrying the API's error envelope.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from gateway import __version__
from gateway.delivery.signing import DEFAULT_TOLERANCE_SECONDS, WebhookVerificationError, verify

TERMINAL_STATUSES: frozenset[str] = frozenset(
    {"inbound_blocked", "outbound_blocked", "completed", "failed", "expired", "cancelled"}
)

__all__ = ["TERMINAL_STATUSES", "GatewayClient", "GatewayError", "WebhookVerificationError", "verify_webhook"]


class GatewayError(Exception):
    """The gateway answered with an error: `{"error": {"code", "message", "details"}}`."""

    def __init__(self, status_code: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status_code} {code}: {message}")
        self.status_code = status_code
        self.code = code
        self.message = message
        self.details = details if details is not None else []


def _error_from(response: httpx.Response) -> GatewayError:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return GatewayError(
            response.status_code,
            str(error.get("code") or f"http_{response.status_code}"),
            str(error.get("message") or response.reason_phrase),
            error.get("details"),
        )
    text = response.text.strip()[:500]
    return GatewayError(response.status_code, f"http_{response.status_code}", text or response.reason_phrase)


def verify_webhook(
    body: bytes,
    headers: Mapping[str, str],
    secret: str,
    tolerance_seconds: int | None = DEFAULT_TOLERANCE_SECONDS,
) -> None:
    """Check a webhook the gateway sent you; raises `WebhookVerificationError` if it is not authentic."""
    verify(body, headers, secret=secret, tolerance_seconds=tolerance_seconds)


class GatewayClient:
    """Async client over one pooled `httpx.AsyncClient`; use it as an async context manager.

    `sleep` and `clock` are what `wait_for_job` waits with and measures its deadline by; tests pass
    fakes so polling runs instantly.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={
                "authorization": f"Bearer {api_key}",
                "user-agent": f"llm-webhook-gateway-client/{__version__}",
            },
            timeout=timeout,
            transport=transport,
        )
        self._sleep = sleep
        self._clock = clock

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        response = await self._http.request(method, path, json=json, params=params, headers=headers)
        if response.status_code >= 400:
            raise _error_from(response)
        if not response.content:
            return {}
        data = response.json()
        if not isinstance(data, dict):
            raise GatewayError(response.status_code, "invalid_response", "expected a JSON object")
        return data

    @staticmethod
    def _job_path(job_id: str, suffix: str = "") -> str:
        return f"/v1/jobs/{quote(job_id, safe='')}{suffix}"

    async def create_job(
        self,
        message_input: str,
        *,
        message_output: str | None = None,
        webhook_url: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        policy: str | None = None,
        expires_in_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Create a job; keep the returned `webhook_secret`, it is shown only this once."""
        body: dict[str, Any] = {"message_input": message_input}
        optional = {
            "message_output": message_output,
            "webhook_url": webhook_url,
            "metadata": dict(metadata) if metadata is not None else None,
            "policy": policy,
            "expires_in_seconds": expires_in_seconds,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        headers = {"idempotency-key": idempotency_key} if idempotency_key is not None else None
        return await self._request("POST", "/v1/jobs", json=body, headers=headers)

    async def get_job(self, job_id: str) -> dict[str, Any]:
        return await self._request("GET", self._job_path(job_id))

    async def submit_response(self, job_id: str, message_output: str) -> dict[str, Any]:
        return await self._request(
            "POST", self._job_path(job_id, "/response"), json={"message_output": message_output}
        )

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        return await self._request("DELETE", self._job_path(job_id))

    async def list_jobs(
        self, status: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, str | int] = {}
        if status is not None:
            params["status"] = status
        if limit is not None:
            params["limit"] = limit
        if cursor is not None:
            params["cursor"] = cursor
        return await self._request("GET", "/v1/jobs", params=params)

    async def get_deliveries(self, job_id: str) -> dict[str, Any]:
        return await self._request("GET", self._job_path(job_id, "/deliveries"))

    async def filter(self, text: str, direction: str, policy: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"text": text, "direction": direction}
        if policy is not None:
            body["policy"] = policy
        return await self._request("POST", "/v1/filter", json=body)

    async def wait_for_job(
        self,
        job_id: str,
        *,
        timeout: float = 600.0,  # noqa: ASYNC109 - a polling budget, not a cancellation scope
        statuses: Collection[str] | None = None,
        initial_delay: float = 2.0,
        max_delay: float = 30.0,
    ) -> dict[str, Any]:
        """Poll until the job's status is in `statuses` (default: any terminal status).

        Waits 2 s, then doubles up to 30 s between polls: prompt for jobs that finish quickly, gentle
        on the API for long ones. It never sleeps past the deadline; once that passes with the job
        still elsewhere, it raises `TimeoutError`. Prefer the webhook when you have one.
        """
        wanted = frozenset(statuses) if statuses is not None else TERMINAL_STATUSES
        deadline = self._clock() + timeout
        delay = initial_delay
        while True:
            job = await self.get_job(job_id)
            if job.get("status") in wanted:
                return job
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise TimeoutError(
                    f"job {job_id} is still {job.get('status')!r} after {timeout:g} s "
                    f"(waiting for {sorted(wanted)})"
                )
            await self._sleep(min(delay, remaining))
            delay = min(delay * 2, max_delay)
