"""Scale-out throughput: one gateway instance vs two on the same PostgreSQL database, in one run.

Every configuration gets the same load: the same combined-mode job bodies with a webhook, posted by
the same aiohttp client at the same concurrency (spread round-robin over the instances, as a load
balancer would), delivered to the same receiver process. Measured: jobs/s from the first create to
the last webhook received. For reference, the same load against one instance on SQLite.

    .venv/bin/python bench/instances.py [--jobs 3000] [--concurrency 64] [--rounds 3] [--postgres URL]

Each PostgreSQL configuration runs in a fresh schema (dropped at the end). Everything runs on this
machine, so the instances, PostgreSQL, the load generator and the receiver share its cores: the
ratio says what a second process buys on THIS machine, not on two machines. Loopback only; every
loop is bounded in count and time. Runs alternate (x1 then x2, then x2 then x1, ...) and the median
round is reported, because a shared machine makes single runs noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _procs import free_port, start_receiver
from e2e_throughput import API_KEY, run_load

REPO = Path(__file__).resolve().parents[1]
SECRET_KEY = "bench-instances-shared-secret-key-0123456789abcdef"  # every instance of one database
DEFAULT_POSTGRES = os.environ.get("GATEWAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Instance:
    proc: subprocess.Popen[bytes]
    base: str


def start_instance(root: Path, database_url: str, schema: str | None, name: str) -> Instance:
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        {
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_SECRET_KEY": SECRET_KEY,
            "GATEWAY_VAR_DIR": str(root),
            "GATEWAY_POLICY_DIR": str(REPO / "config" / "policies"),
            "GATEWAY_BOOTSTRAP_API_KEY": API_KEY,
            "GATEWAY_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
            "GATEWAY_CONFIG_FILE": str(root / "none.toml"),
            "PYTHONPATH": str(REPO),  # the code beside this script
        }
    )
    if schema is not None:
        env["GATEWAY_DATABASE_SCHEMA"] = schema
    with (root / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
    return Instance(proc, f"http://127.0.0.1:{port}")


def stop_instances(instances: list[Instance]) -> None:
    for inst in instances:
        if inst.proc.poll() is None:
            inst.proc.terminate()
    for inst in instances:
        try:
            inst.proc.wait(20)
        except subprocess.TimeoutExpired:
            inst.proc.kill()
            inst.proc.wait(5)


async def wait_ready(instances: list[Instance], within: float = 30) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as s:
        for inst in instances:
            while True:
                if inst.proc.poll() is not None:
                    raise RuntimeError(f"{inst.base} exited early (code {inst.proc.returncode})")
                try:
                    async with s.get(f"{inst.base}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{inst.base} not ready")
                await asyncio.sleep(0.1)


async def drop_schemas(url: str, names: list[str]) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        for name in names:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


async def measure(
    label: str,
    count: int,
    database_url: str,
    schema: str | None,
    root: Path,
    receiver: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    instances = [start_instance(root, database_url, schema, f"{label}-{i}") for i in range(count)]
    try:
        await wait_ready(instances)
        targets = [inst.base for inst in instances]
        await run_load(targets, receiver, args.warmup, args.concurrency, args.timeout)
        result = await run_load(targets, receiver, args.jobs, args.concurrency, args.timeout)
    finally:
        stop_instances(instances)
    result["label"] = label
    return result


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3, help="runs of each configuration; the median is shown")
    ap.add_argument("--timeout", type=float, default=120, help="longest wait for the webhooks of one run")
    ap.add_argument(
        "--postgres", default=DEFAULT_POSTGRES, help="PostgreSQL URL (default GATEWAY_TEST_POSTGRES_URL)"
    )
    args = ap.parse_args()

    try:
        conn = await asyncpg.connect(args.postgres, timeout=3)
        server_version = await conn.fetchval("SHOW server_version")
        await conn.close()
    except Exception as exc:
        print(f"PostgreSQL at {args.postgres} is unreachable ({type(exc).__name__}: {exc})")
        return 2

    receiver_proc, rport = start_receiver()
    receiver = f"http://127.0.0.1:{rport}"
    root = Path(tempfile.mkdtemp(prefix="gw-bench-instances-"))
    schemas: list[str] = []
    runs: dict[str, list[dict[str, Any]]] = {"postgres x1": [], "postgres x2": [], "sqlite x1": []}
    try:
        for r in range(args.rounds):
            # alternate which goes first, so neither always runs on a warmer (or busier) machine
            order = [1, 2] if r % 2 == 0 else [2, 1]
            for count in order:
                schema = f"bench_{secrets.token_hex(6)}"  # a fresh, empty schema for every run
                schemas.append(schema)
                label = f"postgres x{count}"
                where = root / f"pg{count}-{r}"
                runs[label].append(await measure(label, count, args.postgres, schema, where, receiver, args))
            sqlite_url = f"sqlite:///{root}/sqlite-{r}/bench.db"
            runs["sqlite x1"].append(
                await measure("sqlite x1", 1, sqlite_url, None, root / f"sqlite-{r}", receiver, args)
            )
    finally:
        receiver_proc.stop()
        await drop_schemas(args.postgres, schemas)

    print(
        f"scale-out: {args.jobs} combined-mode jobs with a webhook per run, {args.concurrency} concurrent"
        f" clients round-robin over the instances, {args.rounds} rounds; PostgreSQL {server_version};"
        f" {os.cpu_count()} CPUs shared by everything"
    )
    print(
        f"{'target':<14} {'jobs/s':>8} {'creates/s':>10} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'delivered':>13} {'errs':>5}   jobs/s of each round"
    )
    medians: dict[str, float] = {}
    for label, results in runs.items():
        mid = sorted(results, key=lambda x: x["jobs_per_s"])[len(results) // 2]  # the median round
        medians[label] = mid["jobs_per_s"]
        each = " ".join(f"{x['jobs_per_s']:.0f}" for x in results)
        print(
            f"{label:<14} {mid['jobs_per_s']:>8.0f} {mid['create_per_s']:>10.0f} {mid['p50_ms']:>8.1f}"
            f" {mid['p99_ms']:>8.1f} {mid['delivered']:>6}/{mid['jobs']:<6} {mid['errors']:>5}   {each}"
        )
    one, two = medians["postgres x1"], medians["postgres x2"]
    per_round = [
        b["jobs_per_s"] / a["jobs_per_s"]
        for a, b in zip(runs["postgres x1"], runs["postgres x2"], strict=True)
    ]
    print(
        f"ratio postgres x2 / x1 (medians): {two / one if one else 0.0:.2f};"
        f" per round: {' '.join(f'{x:.2f}' for x in per_round)}"
    )
    complete = all(x["delivered"] >= x["jobs"] and x["errors"] == 0 for rs in runs.values() for x in rs)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
