"""Schemathesis against our own /openapi.json, served by a real `gateway serve` process.

Every operation gets schema-valid and schema-violating requests (schemathesis' positive and negative
generation), authenticated with a bearer key. The server must never answer 5xx, and every answer
must be one the document declares: status code, content type, body schema and headers.

Not enabled on purpose:
- `positive_data_acceptance`: the schema cannot say everything the handlers refuse (a policy name
  the tenant does not have, 5.0 where JSON Schema's "integer" also accepts it) so schema-valid
  requests are legitimately refused with 4xx;
- `use_after_free`: DELETE /v1/jobs/{id} cancels a job, it does not remove it, so a GET after a
  DELETE is rightly a 200.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.api.openapi import document
from tests.acceptance.harness import Server
from tests.hostile.conftest import assert_alive, running

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


@schemathesis.serializer("application/toml")
def _toml(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    """PUT /v1/policies/{name} also takes TOML; the schema calls it a string, sent as is."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def st_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # Private webhook URLs refused, as in production: generated URLs never make the server
    # deliver to loopback.
    root: Path = tmp_path_factory.mktemp("schemathesis")
    with running(root, GATEWAY_WEBHOOK_ALLOW_PRIVATE_NETWORKS="false") as server:
        yield server
        assert_alive(server)


# Loaded from the same `document()` the server serves (a test below holds the two equal), rather
# than with `schemathesis.pytest.from_fixture`: that lazy loader reads `Function._nodeid`, which
# pytest 9.2 no longer has (schemathesis 4.32.5). The requests still go to the live server.
schema = schemathesis.openapi.from_dict(document())


def test_served_document_is_the_one_fuzzed(st_server: Server) -> None:
    response = httpx.get(f"{st_server.base}/openapi.json", timeout=5)
    assert response.status_code == 200
    assert response.json() == orjson.loads(orjson.dumps(document()))


SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _call(case: schemathesis.Case[Any], server: Server) -> int:
    response = case.call_and_validate(
        base_url=server.base,
        headers={"Authorization": f"Bearer {server.api_key}"},
        checks=CHECKS,
        timeout=10,
    )
    return int(response.status_code)


@schema.parametrize()
@SETTINGS
def test_api_conforms_to_its_openapi_document(case: schemathesis.Case[Any], st_server: Server) -> None:
    _call(case, st_server)


def _new_job(server: Server, combined: bool) -> str:
    body = {"message_input": "hi, mail me at jane@example.com"}
    if combined:
        body["message_output"] = "sure"
    response = httpx.post(
        f"{server.base}/v1/jobs",
        json=body,
        headers={"Authorization": f"Bearer {server.api_key}"},
        timeout=5,
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


@schema.include(path_regex=r"\{job_id\}").parametrize()
@SETTINGS
def test_job_operations_on_real_jobs_conform(case: schemathesis.Case[Any], st_server: Server) -> None:
    """The same checks with a job that exists (random ids only ever reach the 404 path): a fresh
    job per example, so GET, DELETE, the response and the delivery log meet every status a
    running job passes through (workers are on)."""
    # A combined job without a webhook completes at once; a separate one waits for its response,
    # which is what POST .../response and DELETE need to succeed.
    combined = case.operation.method.upper() == "GET"
    case.path_parameters["job_id"] = _new_job(st_server, combined)
    _call(case, st_server)
