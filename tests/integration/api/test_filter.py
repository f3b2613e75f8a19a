"""POST /v1/filter: the rule engine on one text, with the tenant's policies."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import Tenant, assert_error

pytestmark = pytest.mark.asyncio(loop_scope="module")

CARD = "4111 1111 1111 1111"


async def test_redacts_a_card_number(tenant: Tenant) -> None:
    text = f"my card is {CARD}, thanks"
    r = await tenant.http.post("/v1/filter", json={"direction": "inbound", "text": text})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"verdict", "message", "matches"}
    assert body["verdict"] == "redacted" and "4111" not in body["message"]
    match = body["matches"][0]
    assert match["action"] == "redact" and match["rule"].startswith("pii.")
    assert text[match["start"] : match["end"]] == CARD


async def test_allows_clean_text_in_both_directions(tenant: Tenant) -> None:
    for direction in ("inbound", "outbound"):
        r = await tenant.http.post(
            "/v1/filter", json={"direction": direction, "text": "hello there", "policy": "default"}
        )
        assert r.json() == {"verdict": "allowed", "message": "hello there", "matches": []}


async def test_nul_is_scanned_not_refused(tenant: Tenant) -> None:
    r = await tenant.http.post("/v1/filter", json={"direction": "inbound", "text": f"a\u0000b {CARD}"})
    assert r.status_code == 200, r.text
    assert r.json()["verdict"] == "redacted"


async def test_large_text_is_scanned_too(tenant: Tenant) -> None:
    text = "lorem ipsum " * 8000 + CARD  # > 64 KiB: scanned in a worker thread
    r = await tenant.http.post("/v1/filter", json={"direction": "outbound", "text": text})
    assert r.status_code == 200, r.text
    assert r.json()["verdict"] == "redacted" and CARD not in r.json()["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"direction": "sideways", "text": "x"}, "direction"),
        ({"text": "x"}, "direction"),
        ({"direction": "inbound"}, "text"),
        ({"direction": "inbound", "text": None}, "text"),
        ({"direction": "inbound", "text": 42}, "text"),
        ({"direction": "inbound", "text": "x", "policy": "no-such-policy"}, "policy"),
        ({"direction": "inbound", "text": "x", "policy": 1}, "policy"),
        ({"direction": "inbound", "text": "x", "extra": True}, "extra"),
    ],
)
async def test_bad_requests_are_422(tenant: Tenant, body: dict[str, Any], field: str) -> None:
    error = assert_error(await tenant.http.post("/v1/filter", json=body), 422, "invalid_argument")
    assert field in {d["field"] for d in error["details"]}, error


async def test_lone_surrogate_is_422(tenant: Tenant) -> None:
    raw = b'{"direction": "inbound", "text": "lone \\ud800 surrogate"}'
    r = await tenant.http.post("/v1/filter", content=raw, headers={"content-type": "application/json"})
    error = assert_error(r, 422, "invalid_argument")
    assert error["details"][0]["field"] == "text" and "surrogate" in error["message"]


async def test_malformed_json_is_400(tenant: Tenant) -> None:
    r = await tenant.http.post(
        "/v1/filter", content=b'{"direction": ', headers={"content-type": "application/json"}
    )
    assert_error(r, 400, "invalid_argument")
