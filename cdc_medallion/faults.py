"""Fault injection for crash tests: die with SIGKILL at the N-th commit point.

Set CDC_MEDALLION_KILL_AT=N to kill the process at the N-th point (counting both "before
commit" and "after commit" points of every Delta commit). Unset, this costs one dict lookup.
It exists so tests can prove that a run killed anywhere and re-run loses and duplicates nothing.
"""

from __future__ import annotations

import os
import signal

_count = 0


def commit_point(where: str) -> None:
    global _count
    target = os.environ.get("CDC_MEDALLION_KILL_AT")
    if not target:
        return
    _count += 1
    if _count == int(target):
        print(f"[fault injection] SIGKILL at commit point {_count} ({where})", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
