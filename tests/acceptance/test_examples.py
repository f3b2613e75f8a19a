"""The examples under examples/ run end to end against a real gateway, so they cannot rot.

`examples/receiver_starlette.py` runs under uvicorn as a user would start it, and
`examples/backend_client.py` runs as a script; both only see the gateway over HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.delivery.signing import webhook_headers
from tests.acceptance.harness import REPO, Server, eventually, free_port

UVICORN = [sys.executable, "-m", "uvicorn", "examples.receiver_starlette:app"]


@dataclass
class ExampleReceiver:
    base: str
    secrets: Path
    events: Path

    def recorded(self) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines()]


@pytest.fixture(scope="module")
def gateway_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(root=Path(tmp_path_factory.mktemp("gateway")))
    with srv:
        yield srv


@pytest.fixture(scope="module")
def example_receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleReceiver]:
    root = Path(tmp_path_factory.mktemp("receiver"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "WEBHOOK_", "RECEIVER_"))}
    env.update(
        {"WEBHOOK_SECRETS_DIR": str(root / "secrets"), "RECEIVER_EVENTS_FILE": str(root / "events.jsonl")}
    )
    log_path = root / "receiver.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [*UVICORN, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"receiver exited early:\n{log_path.read_text()}")
            try:
                if httpx.get(f"{base}/healthz", timeout=0.5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"receiver did not start:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield ExampleReceiver(base, root / "secrets", root / "events.jsonl")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_backend_script_and_receiver_end_to_end(
    gateway_server: Server, example_receiver: ExampleReceiver
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "WEBHOOK_"))}
    env.update(
        {
            "GATEWAY_URL": gateway_server.base,
            "GATEWAY_API_KEY": gateway_server.api_key,
            "WEBHOOK_URL": f"{example_receiver.base}/webhooks/gateway",
            "WEBHOOK_SECRETS_DIR": str(example_receiver.secrets),
        }
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "examples/backend_client.py", "Please email me at jane.doe@example.com"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    final = json.loads(result.stdout.strip().splitlines()[-1])
    job_id = final["job_id"]
    assert final["status"] == "completed" and final["mode"] == "separate"
    assert "jane.doe@example.com" not in final["inbound"]["message"]
    assert "[EMAIL_ADDRESS]" in final["outbound"]["message"]  # the LLM only saw the filtered prompt
    assert final["delivery"]["last_status_code"] == 202

    secret_file = example_receiver.secrets / job_id
    assert secret_file.read_text().startswith("whsec_")
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    async def completed_handled() -> list[dict[str, Any]] | None:
        mine = [e for e in example_receiver.recorded() if e["job_id"] == job_id]
        return mine if any(e["event"] == "job.completed" for e in mine) else None

    events = await eventually(completed_handled, within=10, what="job.completed handled by the receiver")
    await asyncio.sleep(1.0)  # past the harness's retries: nothing more may come
    events = [e for e in example_receiver.recorded() if e["job_id"] == job_id]
    # The receiver answers 503 to job.awaiting_response while the backend has not saved the
    # secret yet. The backend polls and answers the job itself, which stops the notice's
    # retries: it was handled only if an attempt got through before the answer, and never
    # after job.completed.
    by_event = {e["event"]: e for e in events}
    assert len(events) == len(by_event) == len({e["webhook_id"] for e in events})
    assert set(by_event) <= {"job.awaiting_response", "job.completed"}
    assert events[-1]["event"] == "job.completed"
    assert by_event["job.completed"]["data"]["outbound"]["message"] == final["outbound"]["message"]
    assert by_event["job.completed"]["metadata"] == {"conversation": "example-1"}

    async with gateway_server.client() as c:
        log = (await c.get(f"/v1/jobs/{job_id}/deliveries")).json()["attempts"]
    assert log[-1]["status_code"] == 202 and all(a["status_code"] in (202, 503) for a in log)


async def test_receiver_rejects_forgeries_and_dedupes(example_receiver: ExampleReceiver) -> None:
    """Webhooks signed here as the gateway signs them, to drive the receiver's other answers."""
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    job_id = f"job_{time.time_ns()}x"
    example_receiver.secrets.mkdir(parents=True, exist_ok=True)
    (example_receiver.secrets / job_id).write_text(secret)
    body = json.dumps(
        {"event": "job.completed", "job_id": job_id, "status": "completed", "timestamp": "", "metadata": {}}
    ).encode()
    url = f"{example_receiver.base}/webhooks/gateway"

    def signed(msg_id: str, ts: int | None = None, payload: bytes = body) -> dict[str, str]:
        return webhook_headers(msg_id, int(time.time()) if ts is None else ts, payload, secret)

    async with httpx.AsyncClient(timeout=5) as http:
        first = await http.post(url, content=body, headers=signed("msg_example1"))
        assert first.status_code == 202, first.text
        again = await http.post(url, content=body, headers=signed("msg_example1"))  # a retry
        assert again.status_code == 200 and again.json() == {"status": "duplicate"}

        tampered = body.replace(b"completed", b"c0mpleted")
        r = await http.post(url, content=tampered, headers=signed("msg_example2"))
        assert r.status_code == 401
        r = await http.post(url, content=body, headers=signed("msg_example3", ts=int(time.time()) - 600))
        assert r.status_code == 401  # outside the 5 minute tolerance
        unknown = body.replace(job_id.encode(), b"job_unknown")
        r = await http.post(url, content=unknown, headers=signed("msg_example4", payload=unknown))
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        traversal = body.replace(job_id.encode(), b"../../etc/passwd")
        r = await http.post(url, content=traversal, headers=signed("msg_example5", payload=traversal))
        assert r.status_code == 400
        r = await http.post(url, content=b"not json", headers=signed("msg_example6", payload=b"not json"))
        assert r.status_code == 400

    async def handled() -> list[dict[str, Any]] | None:
        mine = [e for e in example_receiver.recorded() if e["job_id"] == job_id]
        return mine or None

    events = await eventually(handled, within=5, what="the one accepted webhook")
    await asyncio.sleep(0.3)  # a duplicate, if any, would be queued right behind it
    assert [e["webhook_id"] for e in example_receiver.recorded() if e["job_id"] == job_id] == ["msg_example1"]
    assert events[0]["event"] == "job.completed"
