"""Liveness, readiness, queue health and metrics."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.jobs import JobStatus
from tests.integration.api.conftest import Gateway, Tenant, assert_error, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")

QUEUES = {"processing_inbound", "processing_outbound", "awaiting_response", "delivering"}


async def test_healthz_and_readyz_need_no_auth(gw: Gateway) -> None:
    async with gw.client() as anon:
        r = await anon.get("/healthz")
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        r = await anon.get("/readyz")
        assert r.status_code == 200 and r.json() == {"status": "ready"}


async def test_queues_need_auth(gw: Gateway) -> None:
    async with gw.client() as anon:
        assert_error(await anon.get("/api/v1/health/queues"), 401, "unauthenticated")


async def test_queue_health_ok_then_degraded(tmp_path: Path) -> None:
    async with serve(tmp_path) as gw:
        _, key = await gw.new_key()
        async with gw.client(key) as c:
            empty = (await c.get("/api/v1/health/queues")).json()
            assert set(empty) == {"status", "queues", "checked_at"} and set(empty["queues"]) == QUEUES
            assert empty["status"] == "ok"
            for name, queue in empty["queues"].items():
                assert queue["depth"] == 0 and queue["oldest_age_seconds"] == 0
                assert ("retrying" in queue) == (name == "delivering")

            for _ in range(2):
                assert (await c.post("/v1/jobs", json={"message_input": "x"})).status_code == 202
            body = (await c.get("/api/v1/health/queues")).json()
            assert body["status"] == "ok" and body["queues"]["processing_inbound"]["depth"] == 2

            gw.runtime.clock.advance(gw.runtime.settings.queue_degraded_age_seconds + 1)
            body = (await c.get("/api/v1/health/queues")).json()
            assert body["status"] == "degraded"
            assert body["queues"]["processing_inbound"]["oldest_age_seconds"] > 60
            assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", body["checked_at"])


async def test_old_awaiting_response_is_not_degraded(tmp_path: Path) -> None:
    async with serve(tmp_path) as gw:
        _, key = await gw.new_key()
        async with gw.client(key) as c:
            job_id = (await c.post("/v1/jobs", json={"message_input": "x"})).json()["job_id"]
            path = (JobStatus.PROCESSING_INBOUND, JobStatus.AWAITING_RESPONSE)
            assert await gw.store.transition(job_id, path, now=gw.runtime.clock.now())
            gw.runtime.clock.advance(3600)
            body = (await c.get("/api/v1/health/queues")).json()
            assert body["status"] == "ok"
            assert body["queues"]["awaiting_response"]["depth"] == 1
            assert body["queues"]["awaiting_response"]["oldest_age_seconds"] >= 3600


async def test_metrics(gw: Gateway, tenant: Tenant) -> None:
    job_id = (await tenant.http.post("/v1/jobs", json={"message_input": "x"})).json()["job_id"]
    assert (await tenant.http.get(f"/v1/jobs/{job_id}")).status_code == 200
    assert (await tenant.http.get("/v1/jobs/nope")).status_code == 404
    assert (await tenant.http.get("/no/such/route")).status_code == 404
    async with gw.client() as anon:
        r = await anon.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'gateway_jobs_created_total{mode="separate"}' in text
    assert re.search(r'gateway_http_requests_total\{route="/v1/jobs/\{job_id\}",status="200"\} [1-9]', text)
    assert re.search(r'gateway_http_requests_total\{route="/v1/jobs/\{job_id\}",status="404"\} [1-9]', text)
    assert re.search(r'gateway_http_requests_total\{route="unmatched",status="404"\} [1-9]', text)
    assert job_id not in text  # templates, never concrete paths
    assert re.search(r'gateway_queue_depth\{queue="processing_inbound"\} [1-9]', text)
    assert 'gateway_queue_oldest_age_seconds{queue="delivering"} 0.0' in text


async def test_metrics_count_413_under_its_route(gw: Gateway) -> None:
    async with gw.client() as anon:
        r = await anon.post("/v1/filter", content=b"x" * (300 * 1024))
        assert r.status_code == 413
        text = (await anon.get("/metrics")).text
    assert re.search(r'gateway_http_requests_total\{route="/v1/filter",status="413"\} [1-9]', text)


async def test_metrics_can_require_auth(tmp_path: Path) -> None:
    async with serve(tmp_path, metrics_require_auth=True) as gw:
        _, key = await gw.new_key()
        async with gw.client() as anon, gw.client(key) as c:
            assert_error(await anon.get("/metrics"), 401, "unauthenticated")
            assert (await c.get("/metrics")).status_code == 200
            assert (await anon.get("/healthz")).status_code == 200
