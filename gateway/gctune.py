"""Garbage-collector settings for a long-running server process.

Measured under load (`bench/e2e_throughput.py`'s open-loop phase): with CPython's defaults the
collector ran ~50 times a second, spent 3-4% of the process's time, and its oldest-generation passes
paused the event loop for 40-60 ms, straight into the create latency's p99. Two standard remedies:

- `gc.freeze()` once start-up is done: the modules, the compiled policies and the rest of what start-up
  built are never garbage, and no later collection walks them again (oldest-generation pauses about
  halved);
- a higher first threshold, so objects of in-flight requests are not examined (and promoted to older
  generations) in the middle of their short lives: they are freed by reference counting when the
  request ends. Only reference cycles wait longer to be collected.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 100)


def tune_for_serving() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
