"""Per-tenant policies through the API: set, read, list, delete, and used by jobs and /v1/filter."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from gateway import policies as policies_module
from tests.integration.api.conftest import Gateway, Tenant, assert_error

pytestmark = pytest.mark.asyncio(loop_scope="module")

CARD = "4111 1111 1111 1111"
ACME: dict[str, Any] = {
    "description": "block talk about competitors",
    "inbound": {
        "packs": ["pii", "custom"],
        "custom": [{"id": "custom.competitors", "keywords": ["globex"], "action": "block"}],
    },
    "outbound": {"packs": ["pii"]},
}
ACME_TOML = """
description = "block talk about competitors"
[inbound]
packs = ["pii", "custom"]
[[inbound.custom]]
id = "custom.competitors"
keywords = ["globex"]
action = "block"
[outbound]
packs = ["pii"]
"""


async def scan(tenant: Tenant, text: str, policy: str = "default") -> dict[str, Any]:
    r = await tenant.http.post("/v1/filter", json={"direction": "inbound", "text": text, "policy": policy})
    assert r.status_code == 200, r.text
    verdict: dict[str, Any] = r.json()
    return verdict


async def test_file_policies_are_listed_and_readable(tenant: Tenant) -> None:
    listed = (await tenant.http.get("/v1/policies")).json()
    assert {"name": "default", "source": "file", "updated_at": None} in listed["policies"]
    r = await tenant.http.get("/v1/policies/default")
    assert r.status_code == 200
    assert r.json() == {"name": "default", "source": "file", "updated_at": None, "policy": None}


async def test_put_get_list_use_and_delete(tenant: Tenant) -> None:
    r = await tenant.http.put("/v1/policies/acme", json=ACME)
    assert r.status_code == 200, r.text
    stored = r.json()
    assert stored["name"] == "acme" and stored["source"] == "tenant" and stored["policy"] == ACME
    assert (await tenant.http.get("/v1/policies/acme")).json() == stored
    names = {p["name"]: p["source"] for p in (await tenant.http.get("/v1/policies")).json()["policies"]}
    assert names["acme"] == "tenant" and names["default"] == "file"

    blocked = await scan(tenant, "we beat Globex on price", "acme")
    assert blocked["verdict"] == "blocked" and blocked["message"] is None
    assert blocked["matches"][0]["rule"] == "custom.competitors"
    job = await tenant.http.post("/v1/jobs", json={"message_input": "hi", "policy": "acme"})
    assert job.status_code == 202, job.text

    r = await tenant.http.delete("/v1/policies/acme")
    assert r.status_code == 200 and r.json() == {"name": "acme", "deleted": True}
    assert_error(await tenant.http.delete("/v1/policies/acme"), 404, "not_found")
    assert_error(await tenant.http.get("/v1/policies/acme"), 404, "not_found")
    r = await tenant.http.post("/v1/filter", json={"direction": "inbound", "text": "x", "policy": "acme"})
    assert_error(r, 422, "invalid_argument")


async def test_put_toml(tenant: Tenant) -> None:
    r = await tenant.http.put(
        "/v1/policies/acme-toml", content=ACME_TOML.encode(), headers={"content-type": "application/toml"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["policy"] == ACME
    assert (await scan(tenant, "globex!", "acme-toml"))["verdict"] == "blocked"


async def test_tenant_policy_shadows_the_file_policy_for_that_tenant_only(
    tenant: Tenant, other: Tenant
) -> None:
    assert (await scan(tenant, f"card {CARD}"))["verdict"] == "redacted"  # warms the cache
    lenient: dict[str, Any] = {"inbound": {"packs": []}, "outbound": {"packs": []}}
    assert (await tenant.http.put("/v1/policies/default", json=lenient)).status_code == 200
    assert (await scan(tenant, f"card {CARD}"))["verdict"] == "allowed"  # at once, not after a TTL
    assert (await scan(other, f"card {CARD}"))["verdict"] == "redacted"
    assert (await tenant.http.get("/v1/policies/default")).json()["source"] == "tenant"
    assert (await other.http.get("/v1/policies/default")).json()["source"] == "file"

    assert (await tenant.http.delete("/v1/policies/default")).status_code == 200
    assert (await scan(tenant, f"card {CARD}"))["verdict"] == "redacted"
    # The file policy itself cannot be deleted through the API.
    assert_error(await tenant.http.delete("/v1/policies/default"), 404, "not_found")


async def test_other_tenants_policy_is_invisible(tenant: Tenant, other: Tenant) -> None:
    assert (await tenant.http.put("/v1/policies/private-one", json=ACME)).status_code == 200
    assert_error(await other.http.get("/v1/policies/private-one"), 404, "not_found")
    assert_error(await other.http.delete("/v1/policies/private-one"), 404, "not_found")
    names = {p["name"] for p in (await other.http.get("/v1/policies")).json()["policies"]}
    assert "private-one" not in names
    r = await other.http.post("/v1/jobs", json={"message_input": "x", "policy": "private-one"})
    assert_error(r, 422, "invalid_argument")


async def test_invalid_policy_is_422_naming_the_rule(tenant: Tenant) -> None:
    bad = {
        "inbound": {
            "packs": ["pii", "custom"],
            "custom": [{"id": "custom.broken", "regex": "(unclosed", "action": "block"}],
        },
        "outbound": {"packs": ["pii", "nope"]},
    }
    r = await tenant.http.put("/v1/policies/broken", json=bad)
    error = assert_error(r, 422, "invalid_argument")
    rules = {d["rule"] for d in error["details"]}
    assert all(set(d) == {"rule", "problem"} for d in error["details"])
    assert any("custom.broken" in rule for rule in rules), error
    assert any("nope" in d["rule"] or "nope" in d["problem"] for d in error["details"]), error
    assert error["details"][0]["rule"] in error["message"]
    assert_error(await tenant.http.get("/v1/policies/broken"), 404, "not_found")


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b"{nope", "application/json", 400),
        (b"[1, 2]", "application/json", 422),
        (b"inbound = [", "application/toml", 400),
        (b'{"inbound": {"packs": ["pii\\u0000"]}}', "application/json", 422),
        (b'{"unknown_top": 1}', "application/json", 422),
    ],
)
async def test_bad_policy_bodies(tenant: Tenant, content: bytes, content_type: str, status: int) -> None:
    r = await tenant.http.put(
        "/v1/policies/whatever", content=content, headers={"content-type": content_type}
    )
    assert_error(r, status, "invalid_argument")


@pytest.mark.parametrize("name", ["Upper", "has space", "x" * 65, "dot.ted"])
async def test_bad_policy_names(tenant: Tenant, name: str) -> None:
    error = assert_error(await tenant.http.put(f"/v1/policies/{name}", json=ACME), 422, "invalid_argument")
    assert error["details"][0]["field"] == "name"
    assert_error(await tenant.http.get(f"/v1/policies/{name}"), 404, "not_found")
    assert_error(await tenant.http.delete(f"/v1/policies/{name}"), 404, "not_found")


def _record_compiles(monkeypatch: pytest.MonkeyPatch, what: Callable[[], Any] | None = None) -> list[Any]:
    """Spy on the registry's compiles: each appends the policy's name, or `what()` when given."""
    seen: list[Any] = []
    real = policies_module.compile_policy

    def spy(source: Any, name: str = "default") -> Any:
        seen.append(name if what is None else what())
        return real(source, name)

    monkeypatch.setattr(policies_module, "compile_policy", spy)
    return seen


async def test_tenant_policies_are_compiled_off_the_event_loop_and_once_per_put(
    gw: Gateway, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiling a policy takes tens of milliseconds: on the loop it would stall every request of
    every tenant meanwhile. The put's compile is the one the next scan uses."""
    loop_thread = threading.get_ident()
    compiled_on = _record_compiles(monkeypatch, threading.get_ident)
    assert (await tenant.http.put("/v1/policies/acme-once", json=ACME)).status_code == 200
    assert (await scan(tenant, "globex is cheaper", "acme-once"))["verdict"] == "blocked"
    assert (await scan(tenant, "card " + CARD, "acme-once"))["verdict"] == "redacted"
    assert len(compiled_on) == 1 and loop_thread not in compiled_on

    # Written by another instance (straight into the store): compiled on first use, off the loop.
    await gw.store.put_policy(tenant.name, "acme-elsewhere", ACME, gw.runtime.clock.now())
    assert (await scan(tenant, "globex is cheaper", "acme-elsewhere"))["verdict"] == "blocked"
    assert len(compiled_on) == 2 and loop_thread not in compiled_on


async def test_a_burst_after_a_policy_change_waits_for_one_compile(
    gw: Gateway, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiles = _record_compiles(monkeypatch)
    await gw.store.put_policy(tenant.name, "acme-burst", ACME, gw.runtime.clock.now())
    verdicts = await asyncio.gather(*(scan(tenant, "globex, again", "acme-burst") for _ in range(20)))
    assert [v["verdict"] for v in verdicts] == ["blocked"] * 20
    assert compiles == ["acme-burst"], len(compiles)


async def test_a_stored_policy_that_no_longer_compiles_is_not_compiled_again_and_again(
    gw: Gateway, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy stored before a rule change made it invalid falls back to the file policy of that
    name; the failed compile is remembered for that version, not retried on every use."""
    compiles = _record_compiles(monkeypatch)
    monkeypatch.setattr(gw.runtime.policies, "_ttl", 0.0)  # every use reads the store again
    broken = {"inbound": {"packs": ["no_such_pack"]}, "outbound": {"packs": ["pii"]}}
    await gw.store.put_policy(tenant.name, "default", broken, gw.runtime.clock.now())
    try:
        for _ in range(3):  # the file policy `default` answers: the card is redacted
            assert (await scan(tenant, "card " + CARD))["verdict"] == "redacted"
        assert compiles == ["default"], compiles

        # A new version is compiled (once) and used.
        await gw.store.put_policy(tenant.name, "default", ACME, gw.runtime.clock.now() + 1)
        for _ in range(2):
            assert (await scan(tenant, "globex is cheaper"))["verdict"] == "blocked"
        assert compiles == ["default", "default"], compiles
    finally:
        await gw.store.delete_policy(tenant.name, "default")
