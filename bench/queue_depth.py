"""Queue depth vs cost: does a deep backlog make the gateway slower or fatter?

Fills the SQLite store of a real `gateway serve --no-workers` process with queued jobs (half in
`processing_inbound`, runnable; half in `awaiting_response`), straight into the schema with
`executemany`, and at each depth records:

- the RSS of the server process and of its children (the filter helper), together;
- `GET /api/v1/health/queues` latency, p50 and p99 over `--requests` sequential requests (goal: under
  10 ms at any depth: the contract says it answers in constant time);
- claim latency: `store.claim_jobs(limit=64)` through the gateway's own store, p50 and p99 over
  `--claims` claims (must not grow with depth).

    .venv/bin/python bench/queue_depth.py [--depths 0,10000,100000,1000000] [--requests 200]

Prints a table and the ratios of the deepest depth to 10k; exits 1 when health p99 >= 10 ms at any
depth or the deepest claim p50 is more than 3x the 10k one. Loopback only; bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the gateway beside this script, whatever the virtualenv's editable install points at
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _procs import free_port, with_children

from gateway import ids
from gateway.settings import Settings
from gateway.store import open_store

REPO = Path(__file__).resolve().parents[1]
API_KEY = "gwk_bench_queue_depth_0123456789abcdef0123"
TENANT = "default"
PROMPT = "Summarise the attached meeting notes in three bullet points and list the action items by owner."
HEALTH_P99_LIMIT_MS = 10.0
CLAIM_GROWTH_LIMIT = 3.0
_BATCH = 50_000


@dataclass
class Row:
    depth: int
    fill_seconds: float
    rss_mib: float
    health_p50_ms: float
    health_p99_ms: float
    claim_p50_ms: float
    claim_p99_ms: float


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def tree_rss_mib(pid: int) -> float:
    """The server's RSS plus its children's: the memory `gateway serve` costs the machine (the
    helper is a process of its own, so the server's RSS alone leaves it out)."""
    total = rss_mib(pid)
    for child in with_children([pid])[1:]:
        try:
            total += rss_mib(child)
        except (FileNotFoundError, RuntimeError):
            continue  # gone meanwhile
    return total


class Gateway:
    """`gateway serve --no-workers` on its own SQLite file: nothing drains the queue we build."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = root / "gateway.db"
        self.url = f"sqlite:///{self.db}"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, within: float = 30.0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env.update(
            {
                "GATEWAY_DATABASE_URL": self.url,
                "GATEWAY_VAR_DIR": str(self.root),
                "GATEWAY_POLICY_DIR": str(REPO / "config" / "policies"),
                "GATEWAY_BOOTSTRAP_API_KEY": API_KEY,
                "GATEWAY_CONFIG_FILE": str(self.root / "none.toml"),
                "PYTHONPATH": str(REPO),
            }
        )
        with (self.root / "gateway.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--no-workers", "--port", str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
            )
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited: {(self.root / 'gateway.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("gateway did not become ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def _rows(start: int, count: int, now: float) -> Iterator[tuple[object, ...]]:
    """Jobs created one millisecond apart, oldest first; even ones runnable, odd ones waiting."""
    for n in range(start, start + count):
        created = now - 3600 + n / 1000
        inbound = n % 2 == 0
        yield (
            ids.job_id(created),
            TENANT,
            "processing_inbound" if inbound else "awaiting_response",
            "separate",
            "default",
            PROMPT,
            "{}",
            created,
            created,
            created,
            now + 86_400,
            created if inbound else None,  # run_at: only a runnable job is claimable
        )


def fill(db: Path, start: int, count: int, now: float) -> float:
    """Insert `count` queued jobs (numbered from `start`) beside the running server; seconds taken."""
    began = time.perf_counter()
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA busy_timeout = 30000")
        done = 0
        while done < count:
            size = min(_BATCH, count - done)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO jobs (id, tenant_id, status, mode, policy, input_text, metadata, created_at,"
                " updated_at, status_since, expires_at, run_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _rows(start + done, size, now),
            )
            conn.execute("COMMIT")
            done += size
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    finally:
        conn.close()
    return time.perf_counter() - began


def health_latencies(base: str, requests: int) -> list[float]:
    """Seconds per `GET /api/v1/health/queues`, one after another on a kept-alive connection."""
    out: list[float] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10) as client:
        for _ in range(20):  # warm-up: connection, auth cache, page cache
            client.get("/api/v1/health/queues").raise_for_status()
        for _ in range(requests):
            started = time.perf_counter()
            response = client.get("/api/v1/health/queues")
            out.append(time.perf_counter() - started)
            response.raise_for_status()
    return out


async def _claims(url: str, root: Path, claims: int, expect: int) -> list[float]:
    store = open_store(Settings(database_url=url, var_dir=root, sqlite_synchronous="NORMAL"))
    await store.open()
    out: list[float] = []
    try:
        owner = ids.worker_id()
        for _ in range(3):  # warm-up
            await store.claim_jobs(owner, now=time.time(), lease=3600, limit=64)
        for _ in range(claims):
            started = time.perf_counter()
            got = await store.claim_jobs(owner, now=time.time(), lease=3600, limit=64)
            out.append(time.perf_counter() - started)
            if len(got) != expect:
                raise RuntimeError(f"claimed {len(got)} jobs, expected {expect}")
    finally:
        await store.close()
    return out


def claim_latencies(url: str, root: Path, claims: int, runnable: int) -> list[float]:
    """Seconds per `store.claim_jobs(limit=64)` (each claims 64 runnable jobs for an hour)."""
    expect = 64 if runnable >= 64 * (claims + 3) else -1
    if expect < 0:
        return []
    return asyncio.run(_claims(url, root, claims, expect))


def measure(root: Path, depths: Sequence[int], requests: int, claims: int, log: bool = True) -> list[Row]:
    gateway = Gateway(root)
    gateway.start()
    rows: list[Row] = []
    filled = 0
    now = time.time()
    try:
        for depth in sorted(depths):
            took = fill(gateway.db, filled, depth - filled, now) if depth > filled else 0.0
            filled = max(filled, depth)
            health = health_latencies(gateway.base, requests)
            claimed = claim_latencies(gateway.url, root, claims, runnable=filled // 2)
            row = Row(
                depth=depth,
                fill_seconds=took,
                rss_mib=tree_rss_mib(gateway.pid),
                health_p50_ms=percentile(health, 50) * 1000,
                health_p99_ms=percentile(health, 99) * 1000,
                claim_p50_ms=percentile(claimed, 50) * 1000,
                claim_p99_ms=percentile(claimed, 99) * 1000,
            )
            rows.append(row)
            if log:
                print(_format(row), flush=True)
    finally:
        gateway.stop()
    return rows


HEADER = f"{'depth':>10} {'fill s':>7} {'RSS MiB':>8} {'health p50':>11} {'health p99':>11} {'claim p50':>10} {'claim p99':>10}"  # noqa: E501


def _ms(value: float, width: int) -> str:
    return f"{'-':>{width}}   " if value != value else f"{value:>{width}.2f} ms"  # NaN: nothing to claim


def _format(row: Row) -> str:
    return (
        f"{row.depth:>10,} {row.fill_seconds:>7.1f} {row.rss_mib:>8.1f} {_ms(row.health_p50_ms, 8)} "
        f"{_ms(row.health_p99_ms, 8)} {_ms(row.claim_p50_ms, 7)} {_ms(row.claim_p99_ms, 7)}"
    )


def verdict(rows: Sequence[Row]) -> tuple[list[str], dict[str, float]]:
    """(problems, ratios of the deepest depth to the 10k one, or to the shallowest non-zero)."""
    problems = [
        f"health p99 {r.health_p99_ms:.2f} ms >= {HEALTH_P99_LIMIT_MS} ms at depth {r.depth:,}"
        for r in rows
        if r.health_p99_ms >= HEALTH_P99_LIMIT_MS
    ]
    measured = [r for r in rows if r.depth > 0 and r.claim_p50_ms == r.claim_p50_ms]  # not NaN
    ratios: dict[str, float] = {}
    if len(measured) >= 2:
        base = next((r for r in measured if r.depth == 10_000), measured[0])
        deepest = measured[-1]
        ratios = {
            "base_depth": base.depth,
            "deep_depth": deepest.depth,
            "health_p50": deepest.health_p50_ms / base.health_p50_ms,
            "health_p99": deepest.health_p99_ms / base.health_p99_ms,
            "claim_p50": deepest.claim_p50_ms / base.claim_p50_ms,
            "claim_p99": deepest.claim_p99_ms / base.claim_p99_ms,
            "rss": deepest.rss_mib / base.rss_mib,
        }
        if ratios["claim_p50"] > CLAIM_GROWTH_LIMIT:
            problems.append(
                f"claim p50 at {deepest.depth:,} is {ratios['claim_p50']:.1f}x the one at {base.depth:,}"
                f" (limit {CLAIM_GROWTH_LIMIT}x)"
            )
    return problems, ratios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="0,10000,100000,1000000", help="comma-separated queue depths")
    parser.add_argument("--requests", type=int, default=200, help="health requests per depth")
    parser.add_argument("--claims", type=int, default=30, help="claims of 64 jobs per depth")
    parser.add_argument("--dir", type=Path, default=None, help="keep the database here (default: a temp dir)")
    args = parser.parse_args(argv)
    depths = sorted({int(d.replace("_", "")) for d in args.depths.split(",") if d.strip()})

    print(HEADER)
    started = time.perf_counter()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        rows = measure(args.dir, depths, args.requests, args.claims)
    else:
        with tempfile.TemporaryDirectory(prefix="queue-depth-") as tmp:
            rows = measure(Path(tmp), depths, args.requests, args.claims)
    problems, ratios = verdict(rows)
    if ratios:
        print(
            f"\n{int(ratios['deep_depth']):,} vs {int(ratios['base_depth']):,}:"
            f" health p50 x{ratios['health_p50']:.2f}, p99 x{ratios['health_p99']:.2f};"
            f" claim p50 x{ratios['claim_p50']:.2f}, p99 x{ratios['claim_p99']:.2f}; RSS x{ratios['rss']:.2f}"
        )
    print(f"total {time.perf_counter() - started:.0f} s")
    for problem in problems:
        print(f"FAIL: {problem}")
    print("OK" if not problems else "NOT OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
