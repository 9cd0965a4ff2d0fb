"""Timing on a shared two-core machine."""

from __future__ import annotations

import time
from collections.abc import Callable

RUNS = 2


def best_of(action: Callable[[], object], runs: int = RUNS) -> float:
    """Seconds of the fastest of `runs` runs: what the work costs, less what disturbed it.

    A single timing of the same silver parse on 100k changes varied from 6.1 to 7.2 s between
    runs here, as much as the change being measured. Floors and our parse are timed alike.
    """
    best = float("inf")
    for _ in range(runs):
        started = time.monotonic()
        action()
        best = min(best, time.monotonic() - started)
    return best
