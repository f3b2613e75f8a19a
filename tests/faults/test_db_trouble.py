"""Database trouble: the SQLite file locked by another process, and the disk under it full.

What the API must do meanwhile: requests that need a write fail with a 503 `unavailable` in the
error envelope (with Retry-After, never a 500 or a traceback); reads keep working, and `/readyz`
stays 200 (it checks that the database answers reads; under WAL a writer's lock does not block
readers, and a full disk does not either). Nothing accepted before is lost, and service resumes by
itself once the lock is released or space is freed: new creates succeed, pending jobs finish, and a
webhook whose outcome could not be recorded is sent again under the same webhook-id.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
import subprocess
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.harness import eventually
from tests.faults.conftest import (
    FaultReceiver,
    Proc,
    Procs,
    check_arrivals,
    create_many,
    wait_terminal,
)

BUSY_TIMEOUT = 10.0  # PRAGMA busy_timeout in gateway/store/sqlite.py: a blocked write waits this long


def _assert_unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == "unavailable", body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in r.text and "sqlite" not in r.text.lower()
    assert r.headers.get("retry-after") is not None


async def _answer_all(client: httpx.AsyncClient, job_ids: list[str]) -> None:
    for job_id in job_ids:
        r = await client.post(f"/v1/jobs/{job_id}/response", json={"message_output": "fine"})
        assert r.status_code == 202, r.text


async def _awaiting(client: httpx.AsyncClient, job_ids: list[str]) -> bool:
    for job_id in job_ids:
        if (await client.get(f"/v1/jobs/{job_id}")).json()["status"] != "awaiting_response":
            return False
    return True


# ---- (a) the file locked by another process -------------------------------------------------------


class _Lock:
    """`BEGIN EXCLUSIVE` held on the database by a connection of this (test) process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None

    def take(self) -> None:
        self.conn = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        if self.conn is not None:
            self.conn.execute("ROLLBACK")
            self.conn.close()
            self.conn = None


@pytest.mark.slow
async def test_locked_database_answers_503_then_recovers_by_itself(
    receiver: FaultReceiver, procs: Procs
) -> None:
    server = procs.serve()
    await server.up()
    lock = _Lock(procs.root / "gateway.db")
    try:
        async with server.client() as c:
            waiting = [
                j["job_id"] for j in await create_many(c, [{"message_input": f"w{i}"} for i in range(4)])
            ]
            await eventually(lambda: _awaiting(c, waiting), within=5, what="4 jobs awaiting a response")
            hook = f"{receiver.base}/gate/30"
            hooked = await create_many(c, [_combined(i, webhook_url=hook) for i in range(6)])
            await eventually(
                lambda: _true(len(receiver.requests) == 6), within=5, what="6 webhooks in flight"
            )

            await asyncio.to_thread(lock.take)
            receiver.gate.set()  # the receiver answers now; the gateway cannot record it
            slow = httpx.Timeout(3 * BUSY_TIMEOUT)
            writes = asyncio.gather(
                *(_timed(c.post("/v1/jobs", json=_combined(i), timeout=slow)) for i in range(3)),
                _timed(c.post(f"/v1/jobs/{waiting[0]}/response", json={"message_output": "x"}, timeout=slow)),
                _timed(c.delete(f"/v1/jobs/{waiting[1]}", timeout=slow)),
            )
            # reads keep answering, promptly, while the writes wait for the lock
            for path in ("/readyz", f"/v1/jobs/{waiting[0]}", "/v1/jobs", "/api/v1/health/queues"):
                r, took = await _timed(c.get(path))
                assert r.status_code == 200 and took < 2, (path, took, r.text)
            answers = await writes
            for r, _ in answers:
                _assert_unavailable(r)
            await asyncio.to_thread(lock.release)
            waits = sorted(took for _, took in answers)
            print(
                f"\nwrites under the lock: 503 after {waits[0]:.1f}-{waits[-1]:.1f}s"
                f" (busy_timeout {BUSY_TIMEOUT}s)"
            )
            assert waits[-1] < 2 * BUSY_TIMEOUT + 5

            # service resumes by itself
            after = await create_many(c, [_combined(99)])
            await _answer_all(c, waiting)
            every = [*waiting, *(j["job_id"] for j in hooked), after[0]["job_id"]]
            done = await wait_terminal(c, every, within=15)
            assert {j["status"] for j in done.values()} == {"completed"}, done
    finally:
        lock.release()
    ids = check_arrivals(receiver, {j["job_id"]: j["webhook_secret"] for j in hooked})
    assert len(ids) == 6 and all(len(v) == 1 for v in ids.values())
    print(f"webhooks sent again after the lock (outcome could not be stored): {len(receiver.requests) - 6}")
    assert server.running, "the server died under the lock"
    await server.down()


async def _true(value: bool) -> bool:
    return value


async def _timed(request: Awaitable[httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    r = await request
    return r, time.monotonic() - started


def _combined(i: int, **extra: Any) -> dict[str, Any]:
    return {"message_input": f"q{i}", "message_output": f"a{i}", **extra}


# ---- (b) disk full ------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs for the database; skipped (with the reason) where mounting is not allowed."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN): {done.stderr.strip()}"
        print(reason)
        pytest.skip(reason)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _fill(directory: Path) -> Path:
    """Write a filler file until the disk is full; returns it."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb") as fh:
        for _ in range(10_000):
            try:
                fh.write(chunk)
                fh.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    with contextlib.suppress(OSError), filler.open("ab") as fh:  # the last partial blocks
        for _ in range(10_000):
            fh.write(b"\0" * 512)
            fh.flush()
    return filler


@pytest.mark.slow
async def test_full_disk_answers_503_keeps_what_was_accepted_and_recovers(
    small_disk: Path, procs: Procs
) -> None:
    server: Proc = procs.serve(env={"GATEWAY_DATABASE_URL": f"sqlite:///{small_disk}/gateway.db"})
    await server.up()
    async with server.client() as c:
        before = await create_many(
            c,
            [{"message_input": f"q{i}", "message_output": f"a{i}"} for i in range(10)]
            + [{"message_input": f"w{i}"} for i in range(3)],
        )
        waiting = [j["job_id"] for j in before[10:]]
        await eventually(lambda: _awaiting(c, waiting), within=5, what="3 jobs awaiting a response")

        filler = await asyncio.to_thread(_fill, small_disk)
        free = os.statvfs(small_disk)
        print(
            f"\nfilled: {filler.stat().st_size} bytes of filler, {free.f_bavail * free.f_frsize} bytes free"
        )
        accepted: list[dict[str, Any]] = []
        refused: httpx.Response | None = None
        big = "x" * 8000
        for i in range(400):
            r = await c.post("/v1/jobs", json={"message_input": f"{big} {i}", "message_output": "ok"})
            if r.status_code == 202:
                accepted.append(r.json())
                continue
            refused = r
            break
        assert refused is not None, f"400 creates of 8 kB all succeeded on a full disk ({len(accepted)})"
        _assert_unavailable(refused)
        print(f"creates accepted after the disk filled up (free WAL space): {len(accepted)}")
        for job in before[:3]:
            assert (await c.get(f"/v1/jobs/{job['job_id']}")).status_code == 200  # reads still work
        assert (await c.get("/readyz")).status_code == 200

        filler.unlink()

        async def create_works() -> bool:
            r = await c.post("/v1/jobs", json={"message_input": "after", "message_output": "fine"})
            if r.status_code == 202:
                accepted.append(r.json())
                return True
            _assert_unavailable(r)
            return False

        await eventually(create_works, within=10, interval=0.2, what="creates succeed again")
        await _answer_all(c, waiting)
        every = [j["job_id"] for j in before + accepted]
        done = await wait_terminal(c, every, within=15)
        assert {j["status"] for j in done.values()} == {"completed"}
    assert server.running, "the server died on the full disk"
    await server.down()
