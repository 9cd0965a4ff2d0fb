"""Timing on a shared two-core machine."""

from __future__ import annotations

import time
from collections.abc import Callable

RUNS = 2


def best_of(action: Callable[[], object], runs: int = RUNS) -> float:
    """Seconds of the fastest of `runs` runs: what the work costs, less what disturbed it.

    A single timing of the same work varies between runs on a shared machine as much as a change
    being measured (bench/HISTORY.md). Floors and our parse are timed alike.
    """
    best = float("inf")
    for _ in range(runs):
        started = time.monotonic()
        action()
        best = min(best, time.monotonic() - started)
    return best
