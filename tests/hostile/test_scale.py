"""Queue depth does not slow the gateway down: bench/queue_depth.py at a smaller scale.

200k queued jobs in the SQLite store of a real `gateway serve --no-workers`: queue health still
answers in under 10 ms at p99, and claiming 64 jobs costs the same at 200k as at 10k. The full-size
run (1M) is `.venv/bin/python bench/queue_depth.py`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from gateway.settings import REPO_ROOT


def _bench() -> ModuleType:
    path = REPO_ROOT / "bench" / "queue_depth.py"
    spec = importlib.util.spec_from_file_location("bench_queue_depth", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_health_and_claims_stay_flat_up_to_200k_queued_jobs(tmp_path: Path) -> None:
    bench = _bench()
    rows = bench.measure(tmp_path, [10_000, 200_000], requests=200, claims=30, log=False)
    table = "\n".join([bench.HEADER, *(bench._format(r) for r in rows)])
    problems, ratios = bench.verdict(rows)
    assert not problems, f"{problems}\n{table}"
    assert ratios["claim_p50"] <= bench.CLAIM_GROWTH_LIMIT, table
    for row in rows:
        assert row.health_p99_ms < bench.HEALTH_P99_LIMIT_MS, table


def test_the_bench_memory_figure_counts_the_server_s_child_processes(tmp_path: Path) -> None:
    """`gateway serve` runs its filter engine in a child process: the RSS the bench reports must
    include it, or the memory figure understates what the server costs."""
    bench = _bench()
    ready = tmp_path / "ready"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import pathlib, sys, time; block = bytearray(64 << 20); pathlib.Path(sys.argv[1]).touch();"
            " time.sleep(30)",
            str(ready),
        ]
    )
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), "the child did not start"
        assert child.pid in bench.with_children([os.getpid()])
        alone = bench.rss_mib(os.getpid())
        together = bench.tree_rss_mib(os.getpid())
        assert together - alone >= 60, (alone, together)  # the child's 64 MiB block is counted
    finally:
        child.kill()
        child.wait()
