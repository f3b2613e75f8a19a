"""SIGKILL a `gateway serve` with ~300 jobs in every status, twice, and restart it on the same database.

Nothing runs on the way down: no lease is released, no in-flight webhook is recorded. The leases
(GATEWAY_LEASE_SECONDS=2) must run out and the next process must take every job to a terminal
status, re-sending any webhook whose outcome was not stored under the SAME webhook-id and with the
same body, each arrival signed with the job's secret (sealed under the server key both processes
share).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.acceptance.harness import eventually
from tests.faults.conftest import (
    FaultReceiver,
    Procs,
    all_jobs,
    check_arrivals,
    create_many,
    wait_terminal,
)

pytestmark = pytest.mark.slow

N_SLOW, N_FLAKY, N_POLL = 120, 40, 50  # combined mode
N_SEP_HOOK, N_SEP_EXPIRE, N_SEP_POLL = 40, 20, 30  # separate mode
SHORT_EXPIRY = 6


async def _answer(
    client: httpx.AsyncClient, job_ids: set[str], answered: set[str], *, rounds: int | None = None
) -> None:
    """POST a response to every job of `job_ids` that is awaiting one, until all are answered (or for
    `rounds` passes). A 409 means "not yet awaiting" (or already terminal): the next pass retries."""
    for n in itertools.count():
        if rounds is not None and n >= rounds:
            return
        todo = job_ids - answered
        if not todo:
            return
        jobs = await all_jobs(client)
        ready = [j for j in todo if jobs[j]["status"] == "awaiting_response"]

        async def post(job_id: str) -> None:
            r = await client.post(f"/v1/jobs/{job_id}/response", json={"message_output": "Sure: 4."})
            if r.status_code == 202:
                answered.add(job_id)
            else:
                assert r.status_code == 409, r.text

        await asyncio.gather(*(post(j) for j in ready))
        if rounds is None and not ready:
            await asyncio.sleep(0.1)


async def test_sigkill_twice_with_hundreds_of_jobs_in_flight_loses_nothing(
    receiver: FaultReceiver, procs: Procs
) -> None:
    server = procs.serve()
    await server.up()
    hook = f"{receiver.base}/slow"
    separate = (
        [_sep(f"sep hook {i}", webhook_url=hook) for i in range(N_SEP_HOOK)]
        + [
            _sep(f"sep expire {i}", webhook_url=hook, expires_in_seconds=SHORT_EXPIRY)
            for i in range(N_SEP_EXPIRE)
        ]
        + [_sep(f"sep poll {i}") for i in range(N_SEP_POLL)]
    )
    combined = (
        [_comb(i, webhook_url=hook) for i in range(N_SLOW)]
        + [_comb(i, webhook_url=f"{receiver.base}/flaky/2") for i in range(N_FLAKY)]
        + [_comb(i) for i in range(N_POLL)]
    )

    answered: set[str] = set()
    async with server.client() as c:
        sep_jobs = await create_many(c, separate)
        to_answer = {j["job_id"] for j in sep_jobs[:N_SEP_HOOK]} | {
            j["job_id"] for j in sep_jobs[N_SEP_HOOK + N_SEP_EXPIRE :]
        }
        # answer what is already awaiting while the combined jobs are created, then kill at once
        early = set(sorted(to_answer)[::2])  # half now, the rest after the restarts
        responder = asyncio.create_task(_answer(c, early, answered, rounds=2))
        comb_jobs = await create_many(c, combined)
        await responder
    created = sep_jobs + comb_jobs
    secrets = {j["job_id"]: j["webhook_secret"] for j in created}
    assert len(secrets) == len(separate) + len(combined)
    await server.kill()
    answered_before_kill = len(answered)

    # restart on the same database and port; kill it again while it is recovering
    mark = len(receiver.requests)
    await server.up()
    await eventually(lambda: _true(len(receiver.requests) >= mark + 10), within=15, what="recovery under way")
    await server.kill()

    await server.up()
    async with server.client() as c:
        await asyncio.wait_for(_answer(c, to_answer, answered), timeout=30)
        done = await wait_terminal(c, secrets, within=40)
        hooked = [
            j["job_id"] for b, j in zip(separate + combined, created, strict=True) if "webhook_url" in b
        ]
        logs = await _delivery_logs(c, hooked)
    await server.down()

    statuses = Counter(job["status"] for job in done.values())
    print(f"\nanswered before the first kill: {answered_before_kill}; final statuses: {dict(statuses)}")
    by_id = {j["job_id"]: (body, j) for body, j in zip(separate + combined, created, strict=True)}
    for job_id, (body, _) in by_id.items():
        status = done[job_id]["status"]
        if body.get("expires_in_seconds") == SHORT_EXPIRY:
            assert status == "expired", (job_id, done[job_id])
        else:
            assert status == "completed", (job_id, done[job_id])

    ids = check_arrivals(receiver, secrets)
    for (job_id, event), seen in ids.items():
        assert len(seen) == 1, f"{job_id} {event}: several webhook-ids {seen}"
    for job_id, (body, _) in by_id.items():
        if "webhook_url" not in body or done[job_id]["status"] != "completed":
            continue
        assert (job_id, "job.completed") in ids, f"{job_id} completed but its webhook never arrived"
        if "message_output" not in body:
            assert (job_id, "job.awaiting_response") in ids, job_id
        # the delivery log agrees with the receiver: one id per event, attempts numbered 1..n,
        # exactly one recorded success of the final webhook
        log = logs[job_id]
        for event in {a["event"] for a in log}:
            attempts = [a for a in log if a["event"] == event]
            assert {a["webhook_id"] for a in attempts} == ids[(job_id, event)], (job_id, event)
            assert sorted(a["attempt"] for a in attempts) == list(range(1, len(attempts) + 1))
        finals = [a for a in log if a["event"] == "job.completed"]
        assert sum(1 for a in finals if 200 <= (a["status_code"] or 0) < 300) == 1, (job_id, finals)
    for job_id, (body, _) in by_id.items():
        if body.get("webhook_url", "").endswith("/flaky/2"):
            assert len([1 for p, _ in receiver.arrivals() if p["job_id"] == job_id]) >= 3

    per_event = Counter(Counter((p["job_id"], p["event"]) for p, _ in receiver.arrivals()).values())
    print(f"(job, event) pairs by number of arrivals: {dict(sorted(per_event.items()))}")


def _sep(text: str, **extra: Any) -> dict[str, Any]:
    return {"message_input": text, **extra}


def _comb(i: int, **extra: Any) -> dict[str, Any]:
    return {"message_input": f"What is {i} + {i}?", "message_output": f"It is {2 * i}.", **extra}


async def _true(value: bool) -> bool:
    return value


async def _delivery_logs(client: httpx.AsyncClient, job_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    gate = asyncio.Semaphore(32)

    async def one(job_id: str) -> tuple[str, list[dict[str, Any]]]:
        async with gate:
            r = await client.get(f"/v1/jobs/{job_id}/deliveries")
        assert r.status_code == 200, r.text
        attempts: list[dict[str, Any]] = r.json()["attempts"]
        return job_id, attempts

    return dict(await asyncio.gather(*(one(j) for j in job_ids)))
