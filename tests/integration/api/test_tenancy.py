"""A tenant sees only its own jobs: another tenant's job is a 404 on every route, never a 403."""

from __future__ import annotations

import pytest

from gateway.jobs import JobStatus
from gateway.store.base import JobChanges
from tests.integration.api.conftest import Gateway, Tenant, assert_error

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_other_tenants_job_is_404_everywhere(gw: Gateway, tenant: Tenant, other: Tenant) -> None:
    created = await tenant.http.post("/v1/jobs", json={"message_input": "private"})
    job_id = created.json()["job_id"]
    await gw.store.transition(
        job_id,
        (JobStatus.PROCESSING_INBOUND, JobStatus.AWAITING_RESPONSE),
        now=gw.runtime.clock.now(),
        changes=JobChanges(inbound={"verdict": "allowed", "message": "private", "matches": []}),
    )
    for method, path, body in (
        ("GET", f"/v1/jobs/{job_id}", None),
        ("GET", f"/v1/jobs/{job_id}/deliveries", None),
        ("POST", f"/v1/jobs/{job_id}/response", {"message_output": "x"}),
        ("DELETE", f"/v1/jobs/{job_id}", None),
    ):
        r = await other.http.request(method, path, json=body)
        assert_error(r, 404, "not_found")
        assert "private" not in r.text

    assert (await other.http.get("/v1/jobs")).json() == {"jobs": [], "next_cursor": None}
    # A cursor from someone else's list reveals nothing either.
    page = (await other.http.get("/v1/jobs", params={"cursor": f"job_{'z' * 26}"})).json()
    assert page == {"jobs": [], "next_cursor": None}

    mine = (await tenant.http.get(f"/v1/jobs/{job_id}")).json()
    assert mine["status"] == "awaiting_response"
    assert (
        await tenant.http.post(f"/v1/jobs/{job_id}/response", json={"message_output": "x"})
    ).status_code == 202
