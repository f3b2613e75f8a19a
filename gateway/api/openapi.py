"""The OpenAPI 3.1 description of the API, served at /openapi.json.

Written by hand next to the handlers rather than generated, because the handlers validate by hand;
a test checks that it is a valid document, that it names exactly the routes the app serves, and
that real responses match the schemas it declares (what a schema-driven fuzzer relies on).
Every operation also has a `default` response in the error envelope, so no status a client can
see (405 from routing, 500) goes undescribed.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.jobs import JobStatus

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


_TIMESTAMP: Schema = {"type": "string", "format": "date-time", "description": "RFC 3339, UTC"}
_JOB_ID: Schema = {"type": "string", "pattern": "^job_[0-9a-hjkmnp-tv-z]{26}$"}
# Stored text: PostgreSQL cannot hold NUL characters (a 422). Lone surrogates are refused too.
_TEXT: Schema = {"type": "string", "pattern": "^[^\\u0000]*$"}
_POLICY_NAME: Schema = {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$"}

_SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "details"],
                "properties": {
                    "code": {
                        "type": "string",
                        "description": "unauthenticated, not_found, invalid_argument, payload_too_large, "
                        "conflict, invalid_state, job_expired, rate_limited, method_not_allowed, "
                        "internal, unavailable",
                    },
                    "message": {"type": "string"},
                    "details": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "description": "{field, problem} for bad input; {rule, problem} for a bad policy",
                        },
                    },
                },
            }
        },
    },
    "JobCreate": {
        "type": "object",
        "additionalProperties": False,
        "description": "Give exactly one of message_input or the legacy message. Strings must not "
        "contain NUL characters or lone surrogates (422). null means absent for optional fields.",
        "oneOf": [{"required": ["message_input"]}, {"required": ["message"]}],
        "properties": {
            "message_input": {**_TEXT, "description": "the prompt; filtered by the inbound rules"},
            "message": {**_TEXT, "description": "legacy name of message_input"},
            "message_output": {
                "type": ["string", "null"],
                "pattern": _TEXT["pattern"],
                "description": "the LLM answer; present means combined mode",
            },
            "webhook_url": {
                "type": ["string", "null"],
                "format": "uri",
                "maxLength": 4096,
                "description": "http(s) only; private and loopback addresses are refused (422)",
            },
            "expires_in_seconds": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 604800,
                "default": 3600,
            },
            "metadata": {
                "type": ["object", "null"],
                "description": "echoed in webhooks and GET; at most 16 KiB as JSON",
            },
            "policy": {"type": ["string", "null"], "pattern": _TEXT["pattern"], "default": "default"},
            "signature_scheme": {"enum": ["v1", "v1a", None], "default": "v1"},
        },
    },
    "JobCreated": {
        "type": "object",
        "required": ["job_id", "status", "mode", "created_at", "expires_at", "webhook_secret"],
        "properties": {
            "job_id": _JOB_ID,
            "status": {"const": "processing_inbound"},
            "mode": {"enum": ["separate", "combined"]},
            "created_at": _TIMESTAMP,
            "expires_at": _TIMESTAMP,
            "webhook_secret": {
                "type": "string",
                "pattern": "^whsec_",
                "description": "returned only here: store it to verify webhook signatures",
            },
            "webhook_public_key": {
                "type": "string",
                "pattern": "^whpk_",
                "description": "with signature_scheme v1a: the ed25519 key that verifies v1a signatures",
            },
        },
    },
    "Match": {
        "type": "object",
        "required": ["rule"],
        "properties": {
            "rule": {"type": "string"},
            "category": {"type": "string"},
            "action": {"type": "string", "description": "block, redact, strip or flag"},
            "start": {"type": "integer"},
            "end": {"type": "integer"},
            "score": {"type": ["number", "null"]},
        },
    },
    "Verdict": {
        "type": "object",
        "required": ["verdict", "message", "matches"],
        "properties": {
            "verdict": {"enum": ["allowed", "redacted", "blocked"]},
            "message": {"type": ["string", "null"], "description": "the filtered text; null when blocked"},
            "matches": {"type": "array", "items": _ref("Match")},
        },
    },
    "Delivery": {
        "type": "object",
        "required": ["attempts", "last_attempt_at", "last_status_code", "next_attempt_at", "last_error"],
        "properties": {
            "attempts": {"type": "integer", "minimum": 0},
            "last_attempt_at": _nullable(_TIMESTAMP),
            "last_status_code": {"type": ["integer", "null"]},
            "next_attempt_at": _nullable(_TIMESTAMP),
            "last_error": {"type": ["string", "null"]},
        },
    },
    "Job": {
        "type": "object",
        "required": [
            "job_id",
            "status",
            "mode",
            "policy",
            "created_at",
            "updated_at",
            "expires_at",
            "metadata",
            "webhook_url",
            "inbound",
            "outbound",
            "delivery",
            "error",
        ],
        "properties": {
            "job_id": _JOB_ID,
            "status": {"enum": [s.value for s in JobStatus]},
            "mode": {"enum": ["separate", "combined"]},
            "policy": {"type": "string"},
            "signature_scheme": {"enum": ["v1", "v1a"]},
            "created_at": _TIMESTAMP,
            "updated_at": _TIMESTAMP,
            "expires_at": _TIMESTAMP,
            "metadata": {"type": "object"},
            "webhook_url": {"type": ["string", "null"]},
            "inbound": _nullable(_ref("Verdict")),
            "outbound": _nullable(_ref("Verdict")),
            "delivery": _nullable(_ref("Delivery")),
            "error": _nullable(
                {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                }
            ),
        },
    },
    "JobList": {
        "type": "object",
        "required": ["jobs", "next_cursor"],
        "properties": {
            "jobs": {"type": "array", "items": _ref("Job")},
            "next_cursor": {"anyOf": [_JOB_ID, {"type": "null"}]},
        },
    },
    "ResponseSubmit": {
        "type": "object",
        "additionalProperties": False,
        "required": ["message_output"],
        "properties": {"message_output": _TEXT},
    },
    "Attempts": {
        "type": "object",
        "required": ["attempts"],
        "properties": {
            "attempts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": [
                        "event",
                        "webhook_id",
                        "attempt",
                        "started_at",
                        "duration_ms",
                        "status_code",
                        "error",
                        "next_attempt_at",
                    ],
                    "properties": {
                        "event": {"type": "string"},
                        "webhook_id": {"type": "string"},
                        "attempt": {"type": "integer", "minimum": 1},
                        "started_at": _TIMESTAMP,
                        "duration_ms": {"type": "number", "minimum": 0},
                        "status_code": {"type": ["integer", "null"]},
                        "error": {"type": ["string", "null"]},
                        "next_attempt_at": _nullable(_TIMESTAMP),
                    },
                },
            }
        },
    },
    "FilterRequest": {
        "type": "object",
        "additionalProperties": False,
        "required": ["direction", "text"],
        "properties": {
            "direction": {"enum": ["inbound", "outbound"]},
            "text": {"type": "string"},
            "policy": {"type": ["string", "null"], "default": "default"},
        },
    },
    "PolicySource": {
        "type": "object",
        "description": "The same shape as a config/policies/*.toml file",
    },
    "PolicySummary": {
        "type": "object",
        "required": ["name", "source", "updated_at"],
        "properties": {
            "name": {"type": "string"},
            "source": {"enum": ["tenant", "file"]},
            "updated_at": _nullable(_TIMESTAMP),
        },
    },
    "PolicyList": {
        "type": "object",
        "required": ["policies"],
        "properties": {"policies": {"type": "array", "items": _ref("PolicySummary")}},
    },
    "Policy": {
        "type": "object",
        "required": ["name", "source", "updated_at", "policy"],
        "properties": {
            "name": {"type": "string"},
            "source": {"enum": ["tenant", "file"]},
            "updated_at": _nullable(_TIMESTAMP),
            "policy": {
                "anyOf": [_ref("PolicySource"), {"type": "null"}],
                "description": "null for a file policy",
            },
        },
    },
    "PolicyDeleted": {
        "type": "object",
        "required": ["name", "deleted"],
        "properties": {"name": {"type": "string"}, "deleted": {"const": True}},
    },
    "Queue": {
        "type": "object",
        "required": ["depth", "oldest_age_seconds"],
        "properties": {
            "depth": {"type": "integer", "minimum": 0},
            "oldest_age_seconds": {"type": "number", "minimum": 0},
            "retrying": {"type": "integer", "minimum": 0},
        },
    },
    "QueueHealth": {
        "type": "object",
        "required": ["status", "queues", "checked_at"],
        "properties": {
            "status": {"enum": ["ok", "degraded"]},
            "queues": {
                "type": "object",
                "required": ["processing_inbound", "processing_outbound", "awaiting_response", "delivering"],
                "properties": {
                    "processing_inbound": _ref("Queue"),
                    "processing_outbound": _ref("Queue"),
                    "awaiting_response": _ref("Queue"),
                    "delivering": {"allOf": [_ref("Queue"), {"required": ["retrying"]}]},
                },
            },
            "checked_at": _TIMESTAMP,
        },
    },
}

_RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer", "minimum": 1}, "description": "seconds"}}

_ERRORS: dict[int, tuple[str, dict[str, Any]]] = {
    400: ("The body is not valid JSON (or TOML)", {}),
    401: (
        "Missing or unknown API key",
        {"WWW-Authenticate": {"schema": {"type": "string"}}},
    ),
    404: ("No such job or resource for this tenant", {}),
    409: ("conflict (Idempotency-Key reused), invalid_state or job_expired", {}),
    413: ("The body is larger than GATEWAY_MAX_BODY_BYTES", {}),
    422: ("invalid_argument: details name each field and problem", {}),
    429: ("rate_limited", _RETRY_AFTER),
    503: ("The database is unavailable", _RETRY_AFTER),
}


def _json(schema: Schema) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error(status: int) -> dict[str, Any]:
    description, headers = _ERRORS[status]
    out: dict[str, Any] = {"description": description, "content": _json(_ref("Error"))}
    if headers:
        out["headers"] = headers
    return out


def _op(
    summary: str,
    ok: tuple[int, str, Schema],
    errors: tuple[int, ...],
    *,
    auth: bool = True,
    body: dict[str, Any] | None = None,
    params: list[dict[str, Any]] | None = None,
    ok_headers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status, description, schema = ok
    success: dict[str, Any] = {"description": description, "content": _json(schema)}
    if ok_headers:
        success["headers"] = ok_headers
    codes = set(errors) | {413, 503}
    if auth:
        codes |= {401, 429}
    if body is not None:
        codes |= {400, 422}
    responses: dict[str, Any] = {str(status): success}
    responses.update({str(code): _error(code) for code in sorted(codes)})
    responses["default"] = {"description": "Any other error (405, 500)", "content": _json(_ref("Error"))}
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    op["security"] = [{"bearerAuth": []}] if auth else []
    if body is not None:
        op["requestBody"] = body
    if params:
        op["parameters"] = params
    return op


def _json_body(schema_name: str) -> dict[str, Any]:
    return {"required": True, "content": _json(_ref(schema_name))}


_JOB_ID_PARAM = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
_POLICY_PARAM = {"name": "name", "in": "path", "required": True, "schema": _POLICY_NAME}
_PLAIN_OK = (200, "OK", {"type": "object"})


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "LLM webhook gateway",
            "version": "1",
            "description": "Filters LLM prompts and answers through rule sets and delivers the result "
            "by signed webhook (Standard Webhooks).",
        },
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            "schemas": _SCHEMAS,
        },
        "security": [{"bearerAuth": []}],
        "paths": {
            "/v1/jobs": {
                "post": _op(
                    "Create a job",
                    (202, "Accepted (or replayed for a repeated Idempotency-Key)", _ref("JobCreated")),
                    (409,),
                    body=_json_body("JobCreate"),
                    params=[
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "schema": {
                                "type": "string",
                                "minLength": 1,
                                "maxLength": 255,
                                "pattern": "^[ -~]+$",
                            },
                        }
                    ],
                    ok_headers={
                        "Location": {"schema": {"type": "string"}, "description": "/v1/jobs/{job_id}"},
                        "Idempotent-Replayed": {
                            "schema": {"const": "true"},
                            "description": "present when this answers a repeated Idempotency-Key",
                        },
                    },
                ),
                "get": _op(
                    "List jobs, newest first",
                    (200, "A page of jobs", _ref("JobList")),
                    (422,),
                    params=[
                        {"name": "status", "in": "query", "schema": {"enum": [s.value for s in JobStatus]}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                        },
                        {
                            "name": "cursor",
                            "in": "query",
                            "description": "next_cursor of the previous page",
                            "schema": {"type": "string", "pattern": "^(job_[0-9a-hjkmnp-tv-z]{26})?$"},
                        },
                    ],
                ),
            },
            "/v1/jobs/{job_id}": {
                "parameters": [_JOB_ID_PARAM],
                "get": _op("Get a job", (200, "The job", _ref("Job")), (404,)),
                "delete": _op("Cancel a job", (200, "The cancelled job", _ref("Job")), (404, 409)),
            },
            "/v1/jobs/{job_id}/response": {
                "parameters": [_JOB_ID_PARAM],
                "post": _op(
                    "Submit the LLM response of a separate-mode job",
                    (202, "Accepted: the job as GET shows it", _ref("Job")),
                    (404, 409),
                    body=_json_body("ResponseSubmit"),
                ),
            },
            "/v1/jobs/{job_id}/deliveries": {
                "parameters": [_JOB_ID_PARAM],
                "get": _op("Webhook attempts of a job", (200, "Every attempt", _ref("Attempts")), (404,)),
            },
            "/v1/filter": {
                "post": _op(
                    "Filter one text now, with no job",
                    (200, "The verdict", _ref("Verdict")),
                    (),
                    body=_json_body("FilterRequest"),
                ),
            },
            "/v1/policies": {
                "get": _op("List policies", (200, "Tenant and file policies", _ref("PolicyList")), ()),
            },
            "/v1/policies/{name}": {
                "parameters": [_POLICY_PARAM],
                "get": _op("Get a policy", (200, "The policy", _ref("Policy")), (404,)),
                "put": _op(
                    "Create or replace a tenant policy",
                    (200, "Stored", _ref("Policy")),
                    (),
                    body={
                        "required": True,
                        "content": {
                            "application/json": {"schema": _ref("PolicySource")},
                            "application/toml": {"schema": {"type": "string"}},
                        },
                    },
                ),
                "delete": _op("Delete a tenant policy", (200, "Deleted", _ref("PolicyDeleted")), (404,)),
            },
            "/healthz": {
                "get": _op(
                    "Liveness",
                    (
                        200,
                        "Alive",
                        {"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}},
                    ),
                    (),
                    auth=False,
                )
            },
            "/readyz": {
                "get": _op(
                    "Readiness: the database answers",
                    (
                        200,
                        "Ready",
                        {
                            "type": "object",
                            "required": ["status"],
                            "properties": {"status": {"const": "ready"}},
                        },
                    ),
                    (),
                    auth=False,
                )
            },
            "/api/v1/health/queues": {
                "get": _op("Queue depths and ages", (200, "Queue health", _ref("QueueHealth")), ()),
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "security": [{"bearerAuth": []}, {}],
                    "responses": {
                        "200": {
                            "description": "Prometheus text format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "401": _error(401),
                        "413": _error(413),
                        "429": _error(429),
                        "503": _error(503),
                        "default": {"description": "Any other error", "content": _json(_ref("Error"))},
                    },
                }
            },
            "/openapi.json": {
                "get": _op("This document", (200, "OpenAPI 3.1", {"type": "object"}), (), auth=False),
            },
        },
    }


_DOCUMENT = orjson.dumps(document())


async def openapi_json(request: Request) -> Response:
    return Response(_DOCUMENT, media_type="application/json")
