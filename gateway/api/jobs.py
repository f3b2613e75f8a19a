"""The /v1/jobs resource: create (with idempotency), read, list, answer, cancel, delivery log.

Every write goes through one store call that is itself a compare-and-set, so the API never reads a
status and then acts on it: a 409 always describes the job as the failed write found it.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.requests import Request
from starlette.responses import Response

from gateway import ids, plan
from gateway.api.auth import authenticate, runtime_of
from gateway.api.bodies import Problems, json_type, optional_str, read_object
from gateway.api.errors import ApiError, invalid, not_found
from gateway.api.responses import JSONResponse
from gateway.api.views import attempt_view, is_job_id, job_view
from gateway.clock import rfc3339
from gateway.crypto import PUBLIC_KEY_PREFIX, SIGNING_KEY_PREFIX, new_signing_keypair, new_webhook_secret
from gateway.delivery.ssrf import UrlRefused, check_url
from gateway.jobs import TERMINAL, JobStatus, Mode
from gateway.store.base import Job, NewJob

DEFAULT_EXPIRES_IN = 3600
MAX_EXPIRES_IN = 7 * 24 * 3600
MAX_METADATA_BYTES = 16 * 1024
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 200
MAX_IDEMPOTENCY_KEY = 255
MAX_ECHOED_ID = 64  # characters of an unknown job id a 404 repeats
SIGNATURE_SCHEMES = ("v1", "v1a")

CREATE_FIELDS = frozenset(
    {
        "message_input",
        "message",
        "message_output",
        "webhook_url",
        "expires_in_seconds",
        "metadata",
        "policy",
        "signature_scheme",
    }
)
RESPONSE_FIELDS = frozenset({"message_output"})


@dataclass(frozen=True, slots=True)
class _CreateRequest:
    input_text: str
    output_text: str | None
    webhook_url: str | None
    expires_in: int
    metadata: dict[str, Any]
    policy: str
    signature_scheme: str


def _parse_create(body: dict[str, Any], allow_private: bool) -> _CreateRequest:
    """Check every field and report all problems in one 422, so a client fixes them in one go."""
    problems = Problems()
    # Not nullable: `{"message_input": "a", "message": null}` is "both", as the schema says.
    message_input = optional_str(body, "message_input", problems, nullable=False)
    legacy = optional_str(body, "message", problems, nullable=False)
    output = optional_str(body, "message_output", problems)
    if message_input is not None and legacy is not None:
        problems.add("message", "send message_input or the legacy message, not both")
    input_text = message_input if message_input is not None else legacy
    if input_text is None and "message_input" not in problems.fields and "message" not in problems.fields:
        if output is not None:
            problems.add("message_input", "is required when message_output is given (combined mode)")
        else:
            problems.add("message_input", "is required")

    webhook_url = optional_str(body, "webhook_url", problems)
    if webhook_url is not None:
        try:
            check_url(webhook_url, allow_private=allow_private)
        except UrlRefused as exc:
            problems.add("webhook_url", exc.message, code=exc.code)

    expires_in = DEFAULT_EXPIRES_IN
    raw_expires = body.get("expires_in_seconds")
    if raw_expires is not None:
        if isinstance(raw_expires, bool) or not isinstance(raw_expires, int):
            problems.add("expires_in_seconds", f"must be an integer, got {json_type(raw_expires)}")
        elif not 1 <= raw_expires <= MAX_EXPIRES_IN:
            problems.add("expires_in_seconds", f"must be between 1 and {MAX_EXPIRES_IN}")
        else:
            expires_in = raw_expires

    metadata: dict[str, Any] = {}
    raw_metadata = body.get("metadata")
    if raw_metadata is not None:
        if not isinstance(raw_metadata, dict):
            problems.add("metadata", f"must be an object, got {json_type(raw_metadata)}")
        else:
            try:
                size = len(orjson.dumps(raw_metadata))
            except orjson.JSONEncodeError:  # nested deeper than the encoder goes (254 levels)
                problems.add("metadata", "is nested too deeply")
            else:
                if size > MAX_METADATA_BYTES:
                    problems.add("metadata", f"must be at most {MAX_METADATA_BYTES} bytes as JSON")
                else:
                    metadata = raw_metadata

    policy = optional_str(body, "policy", problems)
    if policy is None:
        policy = "default"

    scheme = body.get("signature_scheme")
    if scheme is None:
        scheme = "v1"
    elif scheme not in SIGNATURE_SCHEMES:
        problems.add("signature_scheme", "must be v1 (HMAC-SHA256) or v1a (ed25519)")

    problems.raise_if_any()
    assert input_text is not None
    return _CreateRequest(
        input_text=input_text,
        output_text=output,
        webhook_url=webhook_url,
        expires_in=expires_in,
        metadata=metadata,
        policy=policy,
        signature_scheme=str(scheme),
    )


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY or not all(" " <= c <= "~" for c in key):
        raise invalid(
            f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters",
            [{"field": "Idempotency-Key", "problem": "must be 1-255 printable ASCII characters"}],
        )
    return key


def request_hash(body: dict[str, Any]) -> str:
    """Of the parsed body with sorted keys, so whitespace and key order do not make a retry a
    "different" request."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _public_key_of(private: str) -> str:
    seed = base64.b64decode(private.removeprefix(SIGNING_KEY_PREFIX))
    public = (
        Ed25519PrivateKey.from_private_bytes(seed)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return PUBLIC_KEY_PREFIX + base64.b64encode(public).decode("ascii")


def _created_body(job: Job, secret: str, public_key: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "job_id": job.id,
        # The status as it was when created: a replay answers exactly what the first call did.
        "status": JobStatus.PROCESSING_INBOUND.value,
        "mode": job.mode.value,
        "created_at": rfc3339(job.created_at),
        "expires_at": rfc3339(job.expires_at),
        "webhook_secret": secret,
    }
    if public_key is not None:
        body["webhook_public_key"] = public_key
    return body


async def create_job(request: Request) -> Response:
    """202 with the job's one-time secret; a repeated Idempotency-Key replays the first answer.

    The webhook secret is made even for a poll-only job: a client may add a receiver later in its
    own design, and a replay must be able to answer exactly what the first call did. It is sealed
    under the job id, so the plain secret exists only in this response.
    """
    tenant = await authenticate(request)
    runtime = runtime_of(request)
    settings = runtime.settings
    idem_key = _idempotency_key(request)
    body = await read_object(request, CREATE_FIELDS)
    req = _parse_create(body, settings.webhook_allow_private_networks)
    policy = await runtime.policies.get(tenant, req.policy)
    if policy is None:
        raise invalid(
            f"unknown policy {req.policy!r}",
            [{"field": "policy", "problem": f"unknown policy {req.policy!r}"}],
        )

    now = runtime.clock.now()
    job_id = ids.job_id(now)
    aad = job_id.encode()
    secret = new_webhook_secret()
    public_key: str | None = None
    signing_key_enc: bytes | None = None
    if req.signature_scheme == "v1a":
        private, public_key = new_signing_keypair()
        signing_key_enc = runtime.box.encrypt(private.encode(), aad=aad)
    mode = Mode.COMBINED if req.output_text is not None else Mode.SEPARATE
    new = NewJob(
        id=job_id,
        tenant_id=tenant,
        mode=mode,
        policy=req.policy,
        input_text=req.input_text,
        output_text=req.output_text,
        webhook_url=req.webhook_url,
        secret_enc=runtime.box.encrypt(secret.encode(), aad=aad),
        signing_key_enc=signing_key_enc,
        metadata=req.metadata,
        created_at=now,
        expires_at=now + req.expires_in,
        idem_key=idem_key,
        idem_hash=request_hash(body) if idem_key is not None else None,
    )
    filtered = None
    if len(req.input_text) + len(req.output_text or "") <= settings.inline_filter_max_chars:
        # Small enough to filter right here: the job is stored filtered, its webhook queued, in the
        # create's one write; no worker has to claim it and write again.
        texts = plan.texts_to_scan(JobStatus.PROCESSING_INBOUND, new.mode, req.input_text, req.output_text)
        verdicts = await runtime.offload.scan_texts(policy, texts, runtime.metrics)
        inbound, outbound = plan.split_verdicts(JobStatus.PROCESSING_INBOUND, verdicts, None)
        filtered = plan.plan(new, JobStatus.PROCESSING_INBOUND, inbound=inbound, outbound=outbound, now=now)
    claim_for = runtime.local_owner
    job, created = await runtime.store.create_job(
        new,
        claim_for=claim_for,
        lease=settings.lease_seconds,
        idempotency_ttl=settings.idempotency_ttl_seconds,
        filtered=filtered,
    )
    headers = {"Location": f"/v1/jobs/{job.id}"}
    if created:
        if filtered is None:
            runtime.job_ready(job)
        else:
            runtime.job_filtered(job, filtered, claimed_by=claim_for, now=now)
        runtime.metrics.jobs_created.labels(mode.value).inc()
        return JSONResponse(_created_body(job, secret, public_key), status_code=202, headers=headers)

    if job.idem_hash != new.idem_hash:
        raise ApiError(
            409,
            "conflict",
            "this Idempotency-Key was already used with a different request body",
            [{"field": "Idempotency-Key", "problem": f"already used for job {job.id} with another body"}],
        )
    replay_aad = job.id.encode()
    assert job.secret_enc is not None, "every job is created with a sealed webhook secret"
    replay_secret = runtime.box.decrypt(job.secret_enc, aad=replay_aad).decode()
    replay_public = None
    if job.signing_key_enc is not None:
        replay_public = _public_key_of(runtime.box.decrypt(job.signing_key_enc, aad=replay_aad).decode())
    headers["Idempotent-Replayed"] = "true"
    return JSONResponse(_created_body(job, replay_secret, replay_public), status_code=202, headers=headers)


def _no_job(job_id: str) -> ApiError:
    """404 naming the id asked for, cut short: a path can be kilobytes long, and an error message
    that echoes it whole helps only whoever probes with it."""
    shown = job_id if len(job_id) <= MAX_ECHOED_ID else job_id[:MAX_ECHOED_ID] + "..."
    return not_found(f"no job {shown!r}")


def _path_job_id(request: Request) -> str:
    job_id: str = request.path_params["job_id"]
    if not is_job_id(job_id):
        raise _no_job(job_id)
    return job_id


async def get_job(request: Request) -> Response:
    tenant = await authenticate(request)
    job_id = _path_job_id(request)
    job = await runtime_of(request).store.get_job(tenant, job_id)
    if job is None:
        raise _no_job(job_id)
    return JSONResponse(job_view(job))


async def submit_response(request: Request) -> Response:
    tenant = await authenticate(request)
    job_id = _path_job_id(request)
    body = await read_object(request, RESPONSE_FIELDS)
    problems = Problems()
    text = optional_str(body, "message_output", problems, nullable=False)
    if text is None and not problems.items:
        problems.add("message_output", "is required")
    problems.raise_if_any()
    assert text is not None

    runtime = runtime_of(request)
    now = runtime.clock.now()
    result = await runtime.store.submit_response(
        tenant, job_id, text, now=now, claim_for=runtime.local_owner, lease=runtime.settings.lease_seconds
    )
    job = result.job
    if job is None:
        raise _no_job(job_id)
    if result.ok:
        runtime.job_ready(job)
        return JSONResponse(job_view(job), status_code=202)
    if job.status is JobStatus.EXPIRED or (job.status not in TERMINAL and job.expires_at <= now):
        raise ApiError(409, "job_expired", f"job {job_id} has expired; it no longer takes a response")
    raise ApiError(
        409,
        "invalid_state",
        f"job {job_id} is {job.status.value}; a response is accepted only in awaiting_response",
        [{"field": "status", "problem": f"is {job.status.value}", "status": job.status.value}],
    )


async def list_jobs(request: Request) -> Response:
    """Newest first. The cursor is the last id of the previous page: ids sort by creation time, so
    paging is an index range scan that stays stable while new jobs arrive (they sort before it)."""
    tenant = await authenticate(request)
    params = request.query_params
    problems = Problems()

    status: JobStatus | None = None
    raw_status = params.get("status")
    if raw_status is not None:  # strict: `?status=` is a mistake, not "any status"
        try:
            status = JobStatus(raw_status)
        except ValueError:
            problems.add("status", f"must be one of {', '.join(s.value for s in JobStatus)}")

    limit = DEFAULT_LIST_LIMIT
    raw_limit = params.get("limit")
    if raw_limit is not None:
        if raw_limit.isascii() and raw_limit.isdigit() and 1 <= int(raw_limit) <= MAX_LIST_LIMIT:
            limit = int(raw_limit)
        else:
            problems.add("limit", f"must be an integer between 1 and {MAX_LIST_LIMIT}")

    cursor = params.get("cursor") or None
    if cursor is not None and not is_job_id(cursor):
        problems.add("cursor", "is not a cursor this API returned (next_cursor)")
    problems.raise_if_any()

    jobs = await runtime_of(request).store.list_jobs(tenant, status=status, limit=limit + 1, before_id=cursor)
    page = jobs[:limit]
    next_cursor = page[-1].id if len(jobs) > limit else None
    return JSONResponse({"jobs": [job_view(j) for j in page], "next_cursor": next_cursor})


async def cancel_job(request: Request) -> Response:
    tenant = await authenticate(request)
    job_id = _path_job_id(request)
    runtime = runtime_of(request)
    result = await runtime.store.cancel_job(tenant, job_id, now=runtime.clock.now())
    job = result.job
    if job is None:
        raise _no_job(job_id)
    if result.ok:
        return JSONResponse(job_view(job))
    if job.status is JobStatus.EXPIRED:
        raise ApiError(409, "job_expired", f"job {job_id} has already expired")
    if job.status in TERMINAL:
        raise ApiError(
            409,
            "invalid_state",
            f"job {job_id} is already {job.status.value}; only a job that has not finished can be cancelled",
            [{"field": "status", "problem": f"is {job.status.value}", "status": job.status.value}],
        )
    raise ApiError(409, "conflict", f"job {job_id} changed while it was being cancelled; retry")


async def list_deliveries(request: Request) -> Response:
    """Reads the job first: an unknown job is a 404, not an empty log that would look like "no
    attempts yet" (and another tenant's job must be indistinguishable from an unknown one)."""
    tenant = await authenticate(request)
    job_id = _path_job_id(request)
    store = runtime_of(request).store
    if await store.get_job(tenant, job_id) is None:
        raise _no_job(job_id)
    attempts = await store.list_attempts(tenant, job_id)
    return JSONResponse({"attempts": [attempt_view(a) for a in attempts]})
