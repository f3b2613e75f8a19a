"""SIGTERM: a graceful stop finishes in-flight webhooks within its grace period (10 s in
`Pipeline.stop`) and releases every job it holds but has not started, so the next process takes
them over at once instead of waiting for their leases to run out.

GATEWAY_LEASE_SECONDS=30 here: a job the stopping process forgot to release would sit for 30 s,
longer than any wait below, so "finished soon after the restart" proves the release happened.
GATEWAY_WEBHOOK_MAX_CONCURRENCY=4 keeps most webhooks queued in memory behind the 4 in flight.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import eventually, process_alive
from tests.faults.conftest import (
    FaultReceiver,
    Proc,
    Procs,
    check_arrivals,
    create_many,
    wait_terminal,
)

GRACE = 10.0  # Pipeline.stop's default grace
SLOW_STOP_ENV = {
    "GATEWAY_LEASE_SECONDS": "30",
    "GATEWAY_WEBHOOK_MAX_CONCURRENCY": "4",
    "GATEWAY_WEBHOOK_TIMEOUT_SECONDS": "20",
}
N_HOOKED = 12


def _jobs(receiver: FaultReceiver, path: str, n: int) -> list[dict[str, Any]]:
    return [
        {"message_input": f"q{i}", "message_output": f"a{i}", "webhook_url": f"{receiver.base}{path}"}
        for i in range(n)
    ]


async def _count_at_least(receiver: FaultReceiver, n: int) -> bool:
    return len(receiver.requests) >= n


async def _stop_and_resume(
    receiver: FaultReceiver, api: Proc, stopping: Proc, successor: Proc, *, hang: float
) -> tuple[int | None, float]:
    """Create jobs whose webhooks hang (`/gate`: up to `hang` s, or until the gate opens), SIGTERM
    `stopping` while 4 are in flight and 8 wait in its memory, open the gate, start `successor`, and
    check every job completes with one webhook-id per job: sent once if it finished within the
    grace period or was never started, twice (same id) if the grace period cut it off."""
    async with api.client() as c:
        created = await create_many(c, _jobs(receiver, f"/gate/{hang}", N_HOOKED))
        created += await create_many(c, [{"message_input": "q", "message_output": "a"}] * 2)
        await eventually(lambda: _count_at_least(receiver, 4), within=10, what="4 webhooks in flight")
        assert len(receiver.requests) == 4  # the other 8 wait behind the concurrency limit
        code, took = await stopping.terminate(grace=GRACE + 10)
        in_flight_at_stop = {r.headers["webhook-id"] for r in receiver.requests}
        assert len(in_flight_at_stop) == 4, "the stopping process started new webhooks"
        receiver.gate.set()  # from now on every webhook is answered at once
        await successor.up()
        done = await wait_terminal(c, [j["job_id"] for j in created], within=8)
    assert {j["status"] for j in done.values()} == {"completed"}
    secrets = {j["job_id"]: j["webhook_secret"] for j in created}
    ids = check_arrivals(receiver, secrets)
    assert len(ids) == N_HOOKED and all(len(v) == 1 for v in ids.values())
    per_id = Counter(r.headers["webhook-id"] for r in receiver.requests)
    cut_off = hang > GRACE
    for wid, n in per_id.items():
        assert n == (2 if cut_off and wid in in_flight_at_stop else 1), (wid, n, cut_off)
    return code, took


@pytest.mark.slow
async def test_serve_sigterm_finishes_in_flight_webhooks_and_releases_the_rest(
    receiver: FaultReceiver, procs: Procs
) -> None:
    server = procs.serve(env=SLOW_STOP_ENV)
    await server.up()
    code, took = await _stop_and_resume(receiver, server, server, server, hang=3)
    assert code == 0, code  # exited by itself, cleanly
    assert took < GRACE, f"took {took:.1f}s to stop"
    assert "Traceback" not in server.log()
    await server.down()


@pytest.mark.slow
async def test_worker_sigterm_exits_zero_and_a_new_worker_finishes_its_jobs(
    receiver: FaultReceiver, procs: Procs
) -> None:
    api = procs.serve("--no-workers", name="api", env=SLOW_STOP_ENV)
    await api.up()
    worker = procs.worker(name="worker-1", env=SLOW_STOP_ENV)
    await worker.up()
    successor = procs.worker(name="worker-2", env=SLOW_STOP_ENV)
    code, took = await _stop_and_resume(receiver, api, worker, successor, hang=3)
    assert code == 0
    assert took < GRACE, f"took {took:.1f}s to stop"
    assert "worker stopping" in worker.log() and "Traceback" not in worker.log()
    code, _ = await successor.terminate(grace=GRACE + 5)
    assert code == 0
    await api.down()


@pytest.mark.slow
async def test_webhook_hanging_past_the_grace_period_is_cut_off_and_resent_with_the_same_id(
    receiver: FaultReceiver, procs: Procs
) -> None:
    """The 4 webhooks in flight hang past the 10 s grace: the stopping worker cancels them and
    releases their jobs; the next worker sends them again under the same webhook-id."""
    api = procs.serve("--no-workers", name="api", env=SLOW_STOP_ENV)
    await api.up()
    worker = procs.worker(name="worker-1", env=SLOW_STOP_ENV)
    await worker.up()
    successor = procs.worker(name="worker-2", env=SLOW_STOP_ENV)
    code, took = await _stop_and_resume(receiver, api, worker, successor, hang=30)
    assert code == 0
    assert GRACE - 0.5 < took < GRACE + 3, f"took {took:.1f}s to stop"
    await successor.down()
    await api.down()


async def test_serve_exits_zero_on_sigterm(procs: Procs) -> None:
    server = procs.serve()
    await server.up()
    code, took = await server.terminate(grace=GRACE + 5)
    assert code == 0, f"exit status {code} after {took:.1f}s"


def _children(pid: int) -> list[int]:
    task = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in task.read_text().split()] if task.exists() else []


async def test_ctrl_c_stops_serve_cleanly_without_a_traceback(procs: Procs) -> None:
    """Ctrl-C in the terminal of `make run` signals the foreground process group. The server stops
    as on SIGTERM, without a traceback; its filter process is in a group of its own (a signal
    during its imports would kill it there) and leaves when its parent does."""
    server = procs.serve()
    await server.up()
    assert server.proc is not None
    helpers = _children(server.proc.pid)
    assert helpers, "the filter process is a child of the server"
    assert all(os.getpgid(pid) != os.getpgid(server.proc.pid) for pid in helpers)
    code, took = await server.terminate(grace=GRACE + 5, sig=signal.SIGINT)
    assert code == 0, f"exit status {code} after {took:.1f}s:\n{server.log()}"
    assert "Traceback" not in server.log()

    async def helpers_gone() -> bool:
        return not any(process_alive(pid) for pid in helpers)

    await eventually(helpers_gone, what="the filter process to exit")
