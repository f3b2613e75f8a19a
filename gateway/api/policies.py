"""Per-tenant policies: the contract's "policies can be set per tenant through the API".

A tenant policy shadows the file policy of the same name for that tenant only. A PUT takes the same
shape as a `config/policies/*.toml` file, as JSON or as TOML (`Content-Type: application/toml`), and
is compiled before it is stored, so a bad policy is a 422 naming the rule, never a broken job later.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.api.auth import authenticate, runtime_of
from gateway.api.bodies import check_strings, json_type, parse_json
from gateway.api.errors import invalid, not_found
from gateway.api.responses import JSONResponse
from gateway.clock import rfc3339
from rules import PolicyError

NAME_RE = re.compile(r"[a-z0-9_-]{1,64}")
TOML_TYPES = ("application/toml", "application/x-toml", "text/toml", "text/x-toml")


def _name(request: Request) -> str | None:
    name: str = request.path_params["name"]
    return name if NAME_RE.fullmatch(name) else None


async def list_policies(request: Request) -> Response:
    tenant = await authenticate(request)
    runtime = runtime_of(request)
    entries: dict[str, dict[str, Any]] = {
        name: {"name": name, "source": "file", "updated_at": None} for name in runtime.policies.file_policies
    }
    for record in await runtime.store.list_policies(tenant):
        entries[record.name] = {
            "name": record.name,
            "source": "tenant",
            "updated_at": rfc3339(record.updated_at),
        }
    return JSONResponse({"policies": [entries[name] for name in sorted(entries)]})


async def get_policy(request: Request) -> Response:
    tenant = await authenticate(request)
    name = _name(request)
    if name is None:
        raise not_found("no such policy")
    runtime = runtime_of(request)
    record = await runtime.store.get_policy(tenant, name)
    if record is not None:
        return JSONResponse(
            {
                "name": name,
                "source": "tenant",
                "updated_at": rfc3339(record.updated_at),
                "policy": record.source,
            }
        )
    if name in runtime.policies.file_policies:
        return JSONResponse({"name": name, "source": "file", "updated_at": None, "policy": None})
    raise not_found(f"no policy {name!r}")


async def _read_source(request: Request) -> dict[str, Any]:
    raw = await request.body()
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    source: Any
    if media_type in TOML_TYPES:
        try:
            source = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise invalid(f"the request body is not valid TOML: {exc}", status=400) from None
    else:
        source = parse_json(raw)
        if not isinstance(source, dict):
            raise invalid(
                f"a policy must be an object, not {json_type(source)}",
                [{"field": "body", "problem": f"expected an object, got {json_type(source)}"}],
            )
    check_strings(source)
    return dict(source)


async def put_policy(request: Request) -> Response:
    tenant = await authenticate(request)
    name = _name(request)
    if name is None:
        raise invalid(
            "a policy name is 1 to 64 of a-z, 0-9, _ and -",
            [{"field": "name", "problem": "must match [a-z0-9_-]{1,64}"}],
        )
    source = await _read_source(request)
    runtime = runtime_of(request)
    try:
        compiled = await runtime.policies.compile(name, source)
    except PolicyError as exc:
        errors = list(exc.errors)
        first = errors[0] if errors else {"rule": "", "problem": str(exc)}
        where = f"rule {first['rule']}: " if first.get("rule") else ""
        raise invalid(f"the policy is invalid: {where}{first['problem']}", errors) from None
    now = runtime.clock.now()
    await runtime.store.put_policy(tenant, name, source, now)
    runtime.policies.remember(tenant, name, compiled, now)
    return JSONResponse({"name": name, "source": "tenant", "updated_at": rfc3339(now), "policy": source})


async def delete_policy(request: Request) -> Response:
    tenant = await authenticate(request)
    name = _name(request)
    runtime = runtime_of(request)
    if name is None or not await runtime.store.delete_policy(tenant, name):
        raise not_found(f"no tenant policy {request.path_params['name']!r}")
    runtime.policies.forget(tenant, name)
    return JSONResponse({"name": name, "deleted": True})
