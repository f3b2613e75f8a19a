"""POST /v1/filter: the rule engine on one text, with no job and nothing stored."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.api.auth import authenticate, runtime_of
from gateway.api.bodies import Problems, optional_str, read_object
from gateway.api.errors import invalid
from gateway.api.responses import JSONResponse

DIRECTIONS = ("inbound", "outbound")
FILTER_FIELDS = frozenset({"direction", "text", "policy"})


async def filter_text(request: Request) -> Response:
    tenant = await authenticate(request)
    # NUL is fine here: nothing is stored, and a NUL may be exactly what a prompt hides behind.
    body = await read_object(request, FILTER_FIELDS, allow_nul=True)
    problems = Problems()
    direction = body.get("direction")
    if direction not in DIRECTIONS:
        problems.add("direction", "must be inbound or outbound")
    text = optional_str(body, "text", problems, nullable=False)
    if text is None and "text" not in problems.fields:
        problems.add("text", "is required")
    policy_name = optional_str(body, "policy", problems)
    if policy_name is None:
        policy_name = "default"
    problems.raise_if_any()
    assert text is not None and isinstance(direction, str)

    runtime = runtime_of(request)
    compiled = await runtime.policies.get(tenant, policy_name)
    if compiled is None:
        raise invalid(
            f"unknown policy {policy_name!r}",
            [{"field": "policy", "problem": f"unknown policy {policy_name!r}"}],
        )
    verdict = await runtime.offload.scan(text, compiled.scan, text, direction)
    return JSONResponse(verdict.to_dict())
