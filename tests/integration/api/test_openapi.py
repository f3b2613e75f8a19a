"""/openapi.json is a valid OpenAPI 3.1 document, names exactly the routes the app serves, and
the responses the app really sends match what it declares (a schema-driven fuzzer's oracle)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped,unused-ignore]
from openapi_spec_validator import validate
from starlette.routing import Route

from gateway.jobs import JobStatus
from gateway.store.base import JobChanges
from tests.integration.api.conftest import Gateway, Tenant

pytestmark = pytest.mark.asyncio(loop_scope="module")

METHODS = {"get", "put", "post", "delete", "patch"}
_ERROR = {"$ref": "#/components/schemas/Error"}


@pytest_asyncio.fixture(loop_scope="module")
async def doc(gw: Gateway) -> dict[str, Any]:
    async with gw.client() as anon:
        r = await anon.get("/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    spec: dict[str, Any] = r.json()
    return spec


async def test_document_is_valid_openapi_31(doc: dict[str, Any]) -> None:
    assert doc["openapi"].startswith("3.1")
    validate(doc)


async def test_document_names_exactly_the_served_routes(gw: Gateway, doc: dict[str, Any]) -> None:
    served = {
        (route.path, method.lower())
        for route in gw.app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    documented = {(path, m) for path, item in doc["paths"].items() for m in item if m in METHODS}
    assert served == documented


async def test_every_operation_documents_its_errors(doc: dict[str, Any]) -> None:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            codes = set(op["responses"])
            assert "default" in codes and {"413", "503"} <= codes, (path, method)
            if op.get("security", doc["security"]) and path != "/metrics":
                assert {"401", "429"} <= codes, (path, method)
            if "requestBody" in op:
                assert {"400", "422"} <= codes, (path, method)


class Conformance:
    """Checks each response against the operation and status the document declares for it."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.templates = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), path) for path in doc["paths"]
        ]
        self.seen: set[tuple[str, str, str]] = set()

    def _template(self, path: str) -> str:
        matches = [t for rx, t in self.templates if rx.match(path)]
        assert matches, f"{path} is not in the document"
        best: str = min(matches, key=lambda t: t.count("{"))
        return best  # a literal segment beats a parameter

    async def check(self, response: httpx.Response) -> None:
        await response.aread()
        request = response.request
        template = self._template(request.url.path)
        status = str(response.status_code)
        op = self.doc["paths"][template].get(request.method.lower())
        if op is None:  # a method the path does not take: a 405 in the envelope, like `default`
            assert status == "405" and "allow" in response.headers
            op = {"responses": {"default": {"content": {"application/json": {"schema": _ERROR}}}}}
        spec = op["responses"].get(status) or op["responses"]["default"]
        self.seen.add((request.method, template, status))
        media_type = response.headers["content-type"].split(";")[0]
        assert media_type in spec["content"], (request.method, template, status, media_type)
        for header in spec.get("headers", {}):
            if header.lower() not in {"idempotent-replayed"}:
                assert header.lower() in response.headers, (request.method, template, status, header)
        schema = spec["content"][media_type]["schema"]
        if media_type != "application/json":
            return
        validator = Draft202012Validator(
            {"components": self.doc["components"], "allOf": [schema]}, format_checker=FormatChecker()
        )
        errors = [e.message for e in validator.iter_errors(response.json())]
        assert not errors, (request.method, template, status, errors[:3])


@pytest_asyncio.fixture(loop_scope="module")
async def checked(
    gw: Gateway, tenant: Tenant, doc: dict[str, Any]
) -> AsyncIterator[tuple[httpx.AsyncClient, Conformance]]:
    conformance = Conformance(doc)
    hooks: dict[str, list[Callable[[httpx.Response], Awaitable[None]]]] = {"response": [conformance.check]}
    async with httpx.AsyncClient(
        base_url=gw.base_url, headers={"Authorization": f"Bearer {tenant.key}"}, event_hooks=hooks
    ) as client:
        yield client, conformance


async def test_responses_conform_to_the_document(
    gw: Gateway, checked: tuple[httpx.AsyncClient, Conformance]
) -> None:
    c, conformance = checked
    missing = f"/v1/jobs/job_{'5' * 26}"

    # jobs
    created = await c.post(
        "/v1/jobs",
        json={"message_input": "hi", "webhook_url": "https://hooks.example.com/", "signature_scheme": "v1a"},
        headers={"Idempotency-Key": "conf-1"},
    )
    job_id = created.json()["job_id"]
    await c.post(
        "/v1/jobs",
        json={"message_input": "hi", "webhook_url": "https://hooks.example.com/", "signature_scheme": "v1a"},
        headers={"Idempotency-Key": "conf-1"},
    )
    await c.post("/v1/jobs", json={"message_input": "other"}, headers={"Idempotency-Key": "conf-1"})  # 409
    await c.post("/v1/jobs", content=b"{oops", headers={"content-type": "application/json"})  # 400
    await c.post("/v1/jobs", json={"message": "x", "message_input": "y"})  # 422
    await c.post("/v1/jobs", content=b"x" * (300 * 1024))  # 413
    await c.get("/v1/jobs", params={"limit": 1})
    await c.get("/v1/jobs", params={"limit": 0})
    await c.get(f"/v1/jobs/{job_id}")
    await c.get(missing)
    await c.get(f"/v1/jobs/{job_id}/deliveries")
    await c.get(f"{missing}/deliveries")
    await c.post(f"/v1/jobs/{job_id}/response", json={"message_output": "x"})  # 409
    await c.post(f"{missing}/response", json={"message_output": "x"})  # 404
    await c.post(f"/v1/jobs/{job_id}/response", json={})  # 422
    waiting = (await c.post("/v1/jobs", json={"message_input": "w"})).json()["job_id"]
    await gw.store.transition(
        waiting,
        (JobStatus.PROCESSING_INBOUND, JobStatus.AWAITING_RESPONSE),
        now=gw.runtime.clock.now(),
        changes=JobChanges(inbound={"verdict": "allowed", "message": "w", "matches": []}),
    )
    await c.post(f"/v1/jobs/{waiting}/response", json={"message_output": "x"})  # 202
    await c.delete(f"/v1/jobs/{job_id}")
    await c.delete(f"/v1/jobs/{job_id}")  # 409
    await c.put("/v1/jobs")  # 405 -> default

    # filter and policies
    await c.post("/v1/filter", json={"direction": "inbound", "text": "card 4111 1111 1111 1111"})
    await c.post("/v1/filter", json={"direction": "sideways", "text": "x"})
    await c.get("/v1/policies")
    await c.get("/v1/policies/default")
    await c.get("/v1/policies/nothing-here")
    await c.delete("/v1/policies/nothing-here")
    await c.put("/v1/policies/BAD NAME", json={})

    # health and docs
    await c.get("/healthz")
    await c.get("/readyz")
    await c.get("/api/v1/health/queues")
    await c.get("/metrics")
    await c.get("/openapi.json")
    async with httpx.AsyncClient(base_url=gw.base_url, event_hooks={"response": [conformance.check]}) as anon:
        await anon.get("/v1/jobs")  # 401

    statuses = {s for _, _, s in conformance.seen}
    assert {"200", "202", "400", "401", "404", "405", "409", "413", "422"} <= statuses
