"""Fault injection for crash tests: die with SIGKILL at a commit point.

CDC_MEDALLION_KILL_AT=N kills the process at the N-th point (counting both the "before" and the
"after" point of every Delta commit); CDC_MEDALLION_KILL_WHERE=TEXT kills it at the first point
whose description contains TEXT (e.g. "after append to silver_s_quarantine"). Unset, this costs
two dict lookups. It exists so tests can prove that a run killed anywhere and re-run loses and
duplicates nothing.
"""

from __future__ import annotations

import os
import signal

_count = 0


def commit_point(where: str) -> None:
    global _count
    target = os.environ.get("CDC_MEDALLION_KILL_AT")
    text = os.environ.get("CDC_MEDALLION_KILL_WHERE")
    if not target and not text:
        return
    _count += 1
    if (target and _count == int(target)) or (text and text in where):
        print(f"[fault injection] SIGKILL at commit point {_count} ({where})", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
