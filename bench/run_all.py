"""`make bench`: every benchmark in turn, each measuring its peer or ceiling in the same run.

Prints each benchmark's own report and a summary of which met their goals (exit 1 if any missed).
Loopback only; each benchmark bounds its own load and time.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    "filter_quality.py",
    "filter_speed.py",
    "keyword_scaling.py",
    "http_clients.py",
    "e2e_throughput.py",
    "instances.py",
    "queue_depth.py",
]


def main() -> int:
    results: list[tuple[str, int, float]] = []
    for name in BENCHMARKS:
        print(f"\n=== {name} " + "=" * (60 - len(name)), flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, str(HERE / name)])
        results.append((name, code, time.monotonic() - started))
    print("\n=== summary")
    for name, code, seconds in results:
        print(f"  {name:<22} {'goal met' if code == 0 else f'MISSED (exit {code})':<18} {seconds:6.0f} s")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
