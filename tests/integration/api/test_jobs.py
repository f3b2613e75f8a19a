"""POST/GET/DELETE /v1/jobs and friends, over real HTTP against a real SQLite store."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway import ids
from gateway.jobs import DeliveryState, JobStatus
from gateway.store.base import Attempt, JobChanges, NewDelivery
from tests.integration.api.conftest import Gateway, Tenant, assert_error

pytestmark = pytest.mark.asyncio(loop_scope="module")

S = JobStatus
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ALLOWED = {"verdict": "allowed", "message": "hello", "matches": []}
VIEW_FIELDS = {
    "job_id",
    "status",
    "mode",
    "policy",
    "signature_scheme",
    "created_at",
    "updated_at",
    "expires_at",
    "metadata",
    "webhook_url",
    "inbound",
    "outbound",
    "delivery",
    "error",
}


async def create(tenant: Tenant, **body: Any) -> dict[str, Any]:
    body.setdefault("message_input", "hello")
    r = await tenant.http.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job: dict[str, Any] = r.json()
    return job


def _on_disk(needle: bytes, *paths: Path) -> bool:
    return any(needle in p.read_bytes() for p in paths if p.exists())


@pytest.fixture
def clock_guard(gw: Gateway) -> Iterator[None]:
    """Tests that move the shared server's clock put it back."""
    offset = gw.runtime.clock.offset
    yield
    gw.runtime.clock.offset = offset


# ---- create ---------------------------------------------------------------------------------


async def test_create_returns_202_location_and_secret(gw: Gateway, tenant: Tenant) -> None:
    r = await tenant.http.post(
        "/v1/jobs", json={"message_input": "hi", "metadata": {"user": 7}, "expires_in_seconds": 60}
    )
    assert r.status_code == 202, r.text
    body = r.json()
    assert set(body) == {"job_id", "status", "mode", "created_at", "expires_at", "webhook_secret"}
    assert r.headers["location"] == f"/v1/jobs/{body['job_id']}"
    assert "idempotent-replayed" not in r.headers
    assert body["status"] == "processing_inbound" and body["mode"] == "separate"
    assert RFC3339.match(body["created_at"]) and RFC3339.match(body["expires_at"])
    secret = body["webhook_secret"]
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) >= 24

    job = await gw.store.get_job(tenant.name, body["job_id"])
    assert job is not None and job.secret_enc is not None
    assert job.expires_at - job.created_at == pytest.approx(60)
    assert job.metadata == {"user": 7} and job.webhook_url is None
    # Stored only sealed, bound to the job id.
    assert gw.runtime.box.decrypt(job.secret_enc, aad=job.id.encode()).decode() == secret
    db = Path(gw.runtime.settings.database_url.removeprefix("sqlite:///"))
    assert not _on_disk(secret.encode(), db, db.with_name(db.name + "-wal"))


async def test_metadata_integers_come_back_exactly_or_are_refused(gw: Gateway, tenant: Tenant) -> None:
    """An integer beyond 64 bits would be read as a float and echoed changed: it is a 422 (send it
    as a string), and the widest integers that fit come back digit for digit."""
    headers = {"content-type": "application/json"}
    wide = b'{"message_input": "hi", "metadata": {"id": 123456789012345678901234567890}}'
    r = await tenant.http.post("/v1/jobs", content=wide, headers=headers)
    error = assert_error(r, 422, "invalid_argument")
    assert "64 bits" in error["message"]
    listed = await tenant.http.get("/v1/jobs")
    assert listed.json()["jobs"] == []  # nothing was created
    edge = b'{"message_input": "hi", "metadata": {"max": 18446744073709551615, "min": -9223372036854775808}}'
    r = await tenant.http.post("/v1/jobs", content=edge, headers=headers)
    assert r.status_code == 202, r.text
    got = await tenant.http.get(f"/v1/jobs/{r.json()['job_id']}")
    assert b'"max":18446744073709551615' in got.content and b'"min":-9223372036854775808' in got.content


async def test_create_combined_and_legacy_message(gw: Gateway, tenant: Tenant) -> None:
    combined = await create(tenant, message_output="the answer")
    assert combined["mode"] == "combined"
    job = await gw.store.get_job(tenant.name, combined["job_id"])
    assert job is not None and job.input_text == "hello" and job.output_text == "the answer"

    r = await tenant.http.post("/v1/jobs", json={"message": "old style"})
    assert r.status_code == 202, r.text
    legacy = r.json()
    stored = await gw.store.get_job(tenant.name, legacy["job_id"])
    assert stored is not None and stored.input_text == "old style" and legacy["mode"] == "separate"


async def test_create_with_webhook_and_v1a_keypair(gw: Gateway, tenant: Tenant) -> None:
    body = await create(tenant, webhook_url="https://hooks.example.com/in", signature_scheme="v1a")
    assert body["webhook_public_key"].startswith("whpk_")
    job = await gw.store.get_job(tenant.name, body["job_id"])
    assert job is not None and job.signing_key_enc is not None
    private = gw.runtime.box.decrypt(job.signing_key_enc, aad=job.id.encode()).decode()
    seed = base64.b64decode(private.removeprefix("whsk_"))
    public = (
        Ed25519PrivateKey.from_private_bytes(seed)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    assert body["webhook_public_key"] == "whpk_" + base64.b64encode(public).decode()

    view = (await tenant.http.get(f"/v1/jobs/{body['job_id']}")).json()
    assert view["signature_scheme"] == "v1a" and view["webhook_url"] == "https://hooks.example.com/in"
    assert view["delivery"] == {
        "attempts": 0,
        "last_attempt_at": None,
        "last_status_code": None,
        "next_attempt_at": None,
        "last_error": None,
    }


async def test_create_counts_metric(gw: Gateway, tenant: Tenant) -> None:
    counter = gw.runtime.metrics.jobs_created.labels("combined")
    before = counter._value.get()
    await create(tenant, message_output="x")
    assert counter._value.get() == before + 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "message_input"),
        ({"message_output": "only output"}, "message_input"),
        ({"message_input": "a", "message": "b"}, "message"),
        ({"message_input": "a", "message": None}, "message"),
        ({"message_input": None}, "message_input"),
        ({"message_input": "a", "policy": ""}, "policy"),
        ({"message_input": 5}, "message_input"),
        ({"message_input": "a", "message_output": ["x"]}, "message_output"),
        ({"message_input": "a", "expires_in_seconds": 0}, "expires_in_seconds"),
        ({"message_input": "a", "expires_in_seconds": 604801}, "expires_in_seconds"),
        ({"message_input": "a", "expires_in_seconds": True}, "expires_in_seconds"),
        ({"message_input": "a", "expires_in_seconds": 60.0}, "expires_in_seconds"),
        ({"message_input": "a", "expires_in_seconds": "60"}, "expires_in_seconds"),
        ({"message_input": "a", "metadata": []}, "metadata"),
        ({"message_input": "a", "metadata": "x"}, "metadata"),
        ({"message_input": "a", "metadata": {"big": "x" * 16400}}, "metadata"),
        ({"message_input": "a", "policy": 3}, "policy"),
        ({"message_input": "a", "signature_scheme": "v2"}, "signature_scheme"),
        ({"message_input": "a", "webhook_url": 7}, "webhook_url"),
        ({"message_input": "a", "surprise": 1}, "surprise"),
    ],
)
async def test_create_rejects_bad_fields(tenant: Tenant, body: dict[str, Any], field: str) -> None:
    error = assert_error(await tenant.http.post("/v1/jobs", json=body), 422, "invalid_argument")
    assert field in {d["field"] for d in error["details"]}, error


async def test_unknown_fields_are_all_named(tenant: Tenant) -> None:
    r = await tenant.http.post("/v1/jobs", json={"message_input": "a", "zeta": 1, "alpha": 2})
    error = assert_error(r, 422, "invalid_argument")
    assert "alpha" in error["message"] and "zeta" in error["message"]
    assert [d["field"] for d in error["details"]] == ["alpha", "zeta"]


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("ftp://hooks.example.com/x", "webhook_url_invalid"),
        ("https://user:pw@hooks.example.com/x", "webhook_url_invalid"),
        ("http://127.0.0.1:8080/hook", "webhook_url_forbidden"),
        ("http://169.254.169.254/latest/meta-data", "webhook_url_forbidden"),
        ("http://localhost/hook", "webhook_url_forbidden"),
    ],
)
async def test_create_refuses_webhook_urls(tenant: Tenant, url: str, code: str) -> None:
    r = await tenant.http.post("/v1/jobs", json={"message_input": "a", "webhook_url": url})
    error = assert_error(r, 422, "invalid_argument")
    assert error["details"] == [
        {"field": "webhook_url", "problem": error["details"][0]["problem"], "code": code}
    ]


async def test_create_unknown_policy(tenant: Tenant) -> None:
    r = await tenant.http.post("/v1/jobs", json={"message_input": "a", "policy": "no-such-policy"})
    error = assert_error(r, 422, "invalid_argument")
    assert "unknown policy" in error["message"]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"message_input": "a\\u0000b"}',
        b'{"message_input": "\\ud800"}',
        b'{"message_input": "ok", "metadata": {"deep": ["x", "\\udfff y"]}}',
        b'{"message_input": "ok", "metadata": {"k\\u0000": 1}}',
        b'{"message_input": "ok", "webhook_url": "https://e.com/\\u0000"}',
    ],
)
async def test_nul_and_lone_surrogates_are_422(tenant: Tenant, raw: bytes) -> None:
    r = await tenant.http.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
    error = assert_error(r, 422, "invalid_argument")
    assert "NUL" in error["message"] or "surrogate" in error["message"]


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"",
        b"   ",
        b'{"a": NaN}',
        b"\xff\xfe",
        b'{"a": 1',
        b'{"message_input": "x", "metadata": {"n": 1e400}}',
        b'{"message_input": "\\ud800", "metadata": {"n": 1e400}}',
    ],
)
async def test_malformed_json_is_400(tenant: Tenant, raw: bytes) -> None:
    r = await tenant.http.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
    assert_error(r, 400, "invalid_argument")


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"42", b"null"])
async def test_non_object_body_is_422(tenant: Tenant, raw: bytes) -> None:
    r = await tenant.http.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
    error = assert_error(r, 422, "invalid_argument")
    assert error["details"][0]["field"] == "body"


# ---- idempotency ----------------------------------------------------------------------------


async def test_idempotent_replay_returns_the_first_response(gw: Gateway, tenant: Tenant) -> None:
    headers = {"Idempotency-Key": "order-42"}
    body = {"message_input": "once", "metadata": {"a": 1, "b": 2}, "signature_scheme": "v1a"}
    first = await tenant.http.post("/v1/jobs", json=body, headers=headers)
    assert first.status_code == 202, first.text
    # Same body with other key order and spacing: the same request.
    raw = b'{ "signature_scheme":"v1a", "metadata": {"b": 2, "a": 1}, "message_input": "once" }'
    second = await tenant.http.post(
        "/v1/jobs", content=raw, headers={**headers, "content-type": "application/json"}
    )
    assert second.status_code == 202, second.text
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["location"] == first.headers["location"]
    assert second.json() == first.json()
    jobs = (await tenant.http.get("/v1/jobs")).json()["jobs"]
    assert [j["job_id"] for j in jobs] == [first.json()["job_id"]]

    different = await tenant.http.post("/v1/jobs", json={"message_input": "twice"}, headers=headers)
    assert_error(different, 409, "conflict")


async def test_idempotency_key_is_per_tenant(tenant: Tenant, other: Tenant) -> None:
    headers = {"Idempotency-Key": "shared-key"}
    mine = await tenant.http.post("/v1/jobs", json={"message_input": "x"}, headers=headers)
    theirs = await other.http.post("/v1/jobs", json={"message_input": "x"}, headers=headers)
    assert mine.status_code == theirs.status_code == 202
    assert mine.json()["job_id"] != theirs.json()["job_id"]
    assert "idempotent-replayed" not in theirs.headers


async def test_replay_after_status_change_still_answers_as_created(gw: Gateway, tenant: Tenant) -> None:
    headers = {"Idempotency-Key": "k-status"}
    first = await tenant.http.post("/v1/jobs", json={"message_input": "x"}, headers=headers)
    job_id = first.json()["job_id"]
    await gw.store.transition(job_id, (S.PROCESSING_INBOUND, S.AWAITING_RESPONSE), now=gw.runtime.clock.now())
    again = await tenant.http.post("/v1/jobs", json={"message_input": "x"}, headers=headers)
    assert again.status_code == 202 and again.json() == first.json()


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there"])
async def test_bad_idempotency_key_is_422(tenant: Tenant, key: str) -> None:
    r = await tenant.http.post(
        "/v1/jobs", json={"message_input": "x"}, headers={b"Idempotency-Key": key.encode("latin-1")}
    )
    error = assert_error(r, 422, "invalid_argument")
    assert error["details"][0]["field"] == "Idempotency-Key"


# ---- get ------------------------------------------------------------------------------------


async def test_get_job_view(tenant: Tenant) -> None:
    created = await create(tenant, metadata={"trace": "abc"}, policy="default")
    r = await tenant.http.get(f"/v1/jobs/{created['job_id']}")
    assert r.status_code == 200
    view = r.json()
    assert set(view) == VIEW_FIELDS
    assert view["job_id"] == created["job_id"] and view["status"] == "processing_inbound"
    assert view["created_at"] == created["created_at"] and view["expires_at"] == created["expires_at"]
    assert view["metadata"] == {"trace": "abc"} and view["policy"] == "default"
    assert view["inbound"] is None and view["outbound"] is None
    assert view["delivery"] is None and view["error"] is None
    assert created["webhook_secret"] not in r.text and "whsec_" not in r.text


@pytest.mark.parametrize("job_id", ["job_doesnotexist", "nope", "job_" + "0" * 26, "JOB_" + "A" * 26])
async def test_get_unknown_or_malformed_is_404(tenant: Tenant, job_id: str) -> None:
    assert_error(await tenant.http.get(f"/v1/jobs/{job_id}"), 404, "not_found")


async def test_view_of_later_statuses(gw: Gateway, tenant: Tenant) -> None:
    created = await create(tenant, webhook_url="https://hooks.example.com/x", message_output="answer")
    job_id = created["job_id"]
    now = gw.runtime.clock.now()
    redacted = {
        "verdict": "redacted",
        "message": "mail [EMAIL_ADDRESS]",
        "matches": [
            {"rule": "pii.email", "category": "pii", "action": "redact", "start": 5, "end": 16, "score": 1.0}
        ],
    }
    delivery = NewDelivery(
        id=ids.webhook_id(now),
        event="job.completed",
        url="https://hooks.example.com/x",
        body=b"{}",
        deadline=now + 60,
    )
    assert await gw.store.transition(
        job_id,
        (S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING),
        now=now,
        changes=JobChanges(inbound=redacted, outbound=ALLOWED),
        deliveries=[delivery],
    )
    claimed = await gw.store.claim_deliveries("w-test", now=now, lease=30, limit=100)
    assert delivery.id in {d.id for d in claimed}
    retry_at = now + 5
    assert await gw.store.record_attempt(
        Attempt(delivery.id, job_id, "job.completed", 1, now, 12.5, 503, "HTTP 503", None, retry_at),
        owner="w-test",
        state=DeliveryState.PENDING,
        now=now,
    )

    view = (await tenant.http.get(f"/v1/jobs/{job_id}")).json()
    assert view["status"] == "delivering" and view["mode"] == "combined"
    assert view["inbound"] == redacted and view["outbound"] == ALLOWED
    assert view["delivery"]["attempts"] == 1 and view["delivery"]["last_status_code"] == 503
    assert view["delivery"]["last_error"] == "HTTP 503"
    assert RFC3339.match(view["delivery"]["last_attempt_at"]) and RFC3339.match(
        view["delivery"]["next_attempt_at"]
    )

    log = (await tenant.http.get(f"/v1/jobs/{job_id}/deliveries")).json()["attempts"]
    assert log == [
        {
            "event": "job.completed",
            "webhook_id": delivery.id,
            "attempt": 1,
            "started_at": log[0]["started_at"],
            "duration_ms": 12.5,
            "status_code": 503,
            "error": "HTTP 503",
            "next_attempt_at": log[0]["next_attempt_at"],
        }
    ]

    # The second attempt fails for good: the job ends `failed` with an error object.
    await gw.store.claim_deliveries("w-test", now=retry_at + 1, lease=30, limit=100)
    assert await gw.store.record_attempt(
        Attempt(delivery.id, job_id, "job.completed", 2, retry_at + 1, 3.0, 410, "HTTP 410", None, None),
        owner="w-test",
        state=DeliveryState.FAILED,
        now=retry_at + 1,
        job_path=(S.DELIVERING, S.FAILED),
        job_changes=JobChanges(error_code="webhook_gone", error_message="the receiver answered 410"),
    )
    view = (await tenant.http.get(f"/v1/jobs/{job_id}")).json()
    assert view["status"] == "failed"
    assert view["error"] == {"code": "webhook_gone", "message": "the receiver answered 410"}
    assert view["delivery"]["attempts"] == 2 and view["delivery"]["next_attempt_at"] is None
    log = (await tenant.http.get(f"/v1/jobs/{job_id}/deliveries")).json()["attempts"]
    assert [a["attempt"] for a in log] == [1, 2] and log[1]["next_attempt_at"] is None


async def test_deliveries_empty_and_404(tenant: Tenant) -> None:
    created = await create(tenant)
    r = await tenant.http.get(f"/v1/jobs/{created['job_id']}/deliveries")
    assert r.status_code == 200 and r.json() == {"attempts": []}
    assert_error(await tenant.http.get(f"/v1/jobs/job_{'1' * 26}/deliveries"), 404, "not_found")
    assert_error(await tenant.http.get("/v1/jobs/garbage/deliveries"), 404, "not_found")


async def test_a_404_does_not_echo_a_long_id_whole(tenant: Tenant) -> None:
    probe = "x" * 4000
    for method in ("GET", "DELETE"):
        error = assert_error(await tenant.http.request(method, f"/v1/jobs/{probe}"), 404, "not_found")
        assert len(error["message"]) < 100 and error["message"].startswith("no job 'xxxx")
    short = assert_error(await tenant.http.get("/v1/jobs/job_missing"), 404, "not_found")
    assert short["message"] == "no job 'job_missing'"


# ---- response -------------------------------------------------------------------------------


async def awaiting(gw: Gateway, tenant: Tenant, **body: Any) -> str:
    job_id: str = (await create(tenant, **body))["job_id"]
    assert await gw.store.transition(
        job_id,
        (S.PROCESSING_INBOUND, S.AWAITING_RESPONSE),
        now=gw.runtime.clock.now(),
        changes=JobChanges(inbound=ALLOWED),
    )
    return job_id


async def test_submit_response(gw: Gateway, tenant: Tenant) -> None:
    job_id = await awaiting(gw, tenant)
    r = await tenant.http.post(f"/v1/jobs/{job_id}/response", json={"message_output": "the answer"})
    assert r.status_code == 202, r.text
    view = r.json()
    assert set(view) == VIEW_FIELDS
    assert view["status"] == "processing_outbound" and view["inbound"] == ALLOWED
    job = await gw.store.get_job(tenant.name, job_id)
    assert job is not None and job.output_text == "the answer"

    again = await tenant.http.post(f"/v1/jobs/{job_id}/response", json={"message_output": "again"})
    error = assert_error(again, 409, "invalid_state")
    assert "processing_outbound" in error["message"]


async def test_submit_response_too_early_is_invalid_state(tenant: Tenant) -> None:
    created = await create(tenant)
    r = await tenant.http.post(f"/v1/jobs/{created['job_id']}/response", json={"message_output": "x"})
    assert "processing_inbound" in assert_error(r, 409, "invalid_state")["message"]


async def test_submit_response_to_expired_job(gw: Gateway, tenant: Tenant, clock_guard: None) -> None:
    # Past expires_at but not swept yet: job_expired, and the job is expired from that answer on
    # (a GET straight after must not still say awaiting_response).
    job_id = await awaiting(gw, tenant, expires_in_seconds=30)
    gw.runtime.clock.advance(31)
    r = await tenant.http.post(f"/v1/jobs/{job_id}/response", json={"message_output": "late"})
    assert_error(r, 409, "job_expired")
    view = (await tenant.http.get(f"/v1/jobs/{job_id}")).json()
    assert view["status"] == "expired"
    assert view["error"]["code"] == "job_expired" and "awaiting_response" in view["error"]["message"]
    listed = (await tenant.http.get("/v1/jobs", params={"status": "awaiting_response"})).json()
    assert job_id not in [j["job_id"] for j in listed["jobs"]]
    r = await tenant.http.post(f"/v1/jobs/{job_id}/response", json={"message_output": "late"})
    assert_error(r, 409, "job_expired")
    assert_error(await tenant.http.delete(f"/v1/jobs/{job_id}"), 409, "job_expired")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "message_output"),
        ({"message_output": 5}, "message_output"),
        ({"message_output": "x", "extra": 1}, "extra"),
        ({"message_output": "nul\u0000"}, "message_output"),
    ],
)
async def test_submit_response_bad_body(
    gw: Gateway, tenant: Tenant, body: dict[str, Any], field: str
) -> None:
    job_id = await awaiting(gw, tenant)
    error = assert_error(
        await tenant.http.post(f"/v1/jobs/{job_id}/response", json=body), 422, "invalid_argument"
    )
    assert error["details"][0]["field"] == field


async def test_submit_response_unknown_job(tenant: Tenant) -> None:
    r = await tenant.http.post(f"/v1/jobs/job_{'2' * 26}/response", json={"message_output": "x"})
    assert_error(r, 404, "not_found")


# ---- list -----------------------------------------------------------------------------------


async def test_cursor_pagination_walks_every_job_once_newest_first(tenant: Tenant) -> None:
    made = [(await create(tenant, message_input=f"n{i}"))["job_id"] for i in range(7)]
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor is not None:
            params["cursor"] = cursor
        r = await tenant.http.get("/v1/jobs", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        assert set(page) == {"jobs", "next_cursor"} and len(page["jobs"]) <= 3
        seen += [j["job_id"] for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made)) and pages == 3


async def test_list_exact_page_has_no_next_cursor(tenant: Tenant) -> None:
    for _ in range(2):
        await create(tenant)
    page = (await tenant.http.get("/v1/jobs", params={"limit": 2})).json()
    assert len(page["jobs"]) == 2 and page["next_cursor"] is None


async def test_list_default_limit_and_views(tenant: Tenant) -> None:
    created = await create(tenant)
    page = (await tenant.http.get("/v1/jobs")).json()
    assert page["next_cursor"] is None and [j["job_id"] for j in page["jobs"]] == [created["job_id"]]
    assert set(page["jobs"][0]) == VIEW_FIELDS
    assert created["webhook_secret"] not in str(page) and "whsec_" not in str(page)


async def test_list_filters_by_status(gw: Gateway, tenant: Tenant) -> None:
    waiting = await awaiting(gw, tenant)
    await create(tenant)
    page = (await tenant.http.get("/v1/jobs", params={"status": "awaiting_response"})).json()
    assert [j["job_id"] for j in page["jobs"]] == [waiting]
    page = (await tenant.http.get("/v1/jobs", params={"status": "completed"})).json()
    assert page == {"jobs": [], "next_cursor": None}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"status": "sleeping"}, "status"),
        ({"status": ""}, "status"),
        ({"cursor": "garbage"}, "cursor"),
        ({"cursor": "job_" + "u" * 26}, "cursor"),
    ],
)
async def test_list_bad_params_are_422(tenant: Tenant, params: dict[str, str], field: str) -> None:
    error = assert_error(await tenant.http.get("/v1/jobs", params=params), 422, "invalid_argument")
    assert error["details"][0]["field"] == field


# ---- cancel ---------------------------------------------------------------------------------


async def test_cancel(gw: Gateway, tenant: Tenant) -> None:
    created = await create(tenant)
    r = await tenant.http.delete(f"/v1/jobs/{created['job_id']}")
    assert r.status_code == 200, r.text
    view = r.json()
    assert view["status"] == "cancelled" and set(view) == VIEW_FIELDS
    assert view["error"] is None  # CONTRACT §2: error is set for failed and expired only
    error = assert_error(await tenant.http.delete(f"/v1/jobs/{created['job_id']}"), 409, "invalid_state")
    assert "cancelled" in error["message"]


async def test_cancel_completed_is_409_and_unknown_is_404(gw: Gateway, tenant: Tenant) -> None:
    created = await create(tenant, message_output="x")
    assert await gw.store.transition(
        created["job_id"],
        (S.PROCESSING_INBOUND, S.PROCESSING_OUTBOUND, S.DELIVERING, S.COMPLETED),
        now=gw.runtime.clock.now(),
    )
    assert_error(await tenant.http.delete(f"/v1/jobs/{created['job_id']}"), 409, "invalid_state")
    assert_error(await tenant.http.delete(f"/v1/jobs/job_{'3' * 26}"), 404, "not_found")
    assert_error(await tenant.http.delete("/v1/jobs/not-a-job"), 404, "not_found")
