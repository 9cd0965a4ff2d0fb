"""Fault injection for crash tests: die with SIGKILL at a commit point, or a moment after it.

CDC_MEDALLION_KILL_AT=N kills the process at the N-th point (counting both the "before" and the
"after" point of every Delta write and every micro-batch); CDC_MEDALLION_KILL_WHERE=TEXT kills it
at the first point whose description contains TEXT (e.g. "after append to silver_s_quarantine").
With CDC_MEDALLION_KILL_DELAY_MS=D the kill comes D milliseconds after the point, from another
thread, while the work that follows the point (a MERGE, the checkpoint's commit) is under way.
CDC_MEDALLION_KILL_SIGNAL=INT sends SIGINT to the process group instead, as Ctrl-C in a terminal
does: a stop at a known point of a continuous run.
Unset, this costs two dict lookups. It exists so tests can prove that a run killed anywhere and
re-run loses and duplicates nothing.
"""

from __future__ import annotations

import os
import signal
import threading

_count = 0


def commit_point(where: str) -> None:
    global _count
    target = os.environ.get("CDC_MEDALLION_KILL_AT")
    text = os.environ.get("CDC_MEDALLION_KILL_WHERE")
    if not target and not text:
        return
    _count += 1
    if (target and _count == int(target)) or (text and text in where):
        delay = int(os.environ.get("CDC_MEDALLION_KILL_DELAY_MS") or 0)
        when = f" + {delay} ms" if delay else ""
        interrupt = os.environ.get("CDC_MEDALLION_KILL_SIGNAL", "KILL").upper() == "INT"
        name = "SIGINT to the process group" if interrupt else "SIGKILL"
        print(f"[fault injection] {name} at commit point {_count}{when} ({where})", flush=True)
        send, whom = (os.killpg, os.getpgrp()) if interrupt else (os.kill, os.getpid())
        sent = signal.SIGINT if interrupt else signal.SIGKILL
        if delay:
            timer = threading.Timer(delay / 1000, send, (whom, sent))
            timer.daemon = True  # a run that ends first ends as it would have
            timer.start()
        else:
            send(whom, sent)
