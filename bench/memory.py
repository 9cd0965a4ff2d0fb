"""Peak resident memory of this process tree, sampled from /proc.

Spark in local mode is three kinds of process: this Python driver, the JVM it starts (the
Spark driver and executor in one), and Python workers forked by the JVM for Python UDFs and
`mapInArrow`. Their peaks are what a user sizes a machine by, so each is tracked apart.

The JVM also starts short-lived commands (Hadoop's local file system runs `chmod` for every
file it writes). Between fork and exec such a child shares the JVM's memory and shows the JVM's
command line and resident size; counted, it doubled the JVM for an instant, and the 0.2 s
sampler caught enough of those instants to report peaks near twice the JVM's real size.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE
    except OSError:
        return 0


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _kind(cmdline: bytes) -> str:
    if os.path.basename(cmdline.split(b"\0", 1)[0]) == b"java":
        return "jvm"
    if b"pyspark" in cmdline or b"daemon" in cmdline or b"worker" in cmdline:
        return "python_workers"
    return "other"


@dataclass
class Peaks:
    python_driver: int = 0
    jvm: int = 0
    python_workers: int = 0
    other: int = 0
    driver: int = 0  # the Spark driver: the JVM plus the Python process that drives it, at one instant
    total: int = 0

    def as_gib(self) -> dict[str, float]:
        gib = 1 << 30
        return {
            "driver_gib": round(self.driver / gib, 3),
            "jvm_gib": round(self.jvm / gib, 3),
            "python_driver_gib": round(self.python_driver / gib, 3),
            "python_workers_gib": round(self.python_workers / gib, 3),
            "total_gib": round(self.total / gib, 3),
        }


@dataclass
class RssSampler:
    """Samples every `interval` seconds while running; `window()` gives the peaks since `reset()`."""

    interval: float = 0.2
    peaks: Peaks = field(default_factory=Peaks)
    overall: Peaks = field(default_factory=Peaks)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def reset(self) -> None:
        self.sample()
        self.peaks = Peaks()

    def window(self) -> Peaks:
        self.sample()
        return self.peaks

    def sample(self) -> None:
        tree = _children()
        now = {"python_driver": _rss(os.getpid()), "jvm": 0, "python_workers": 0, "other": 0}
        stack = [(pid, False, "other") for pid in tree.get(os.getpid(), [])]
        while stack:
            pid, in_peer, parent_kind = stack.pop()
            cmdline = _cmdline(pid)
            kind = _kind(cmdline)
            # The Flink peer, a cold `cdc-medallion ingest` (bench/cold.py) and their JVMs are not our driver.
            in_peer = in_peer or b"flink_peer" in cmdline or b"cdc_medallion.cli" in cmdline
            stack.extend((child, in_peer, kind) for child in tree.get(pid, []))
            if kind == "jvm" and parent_kind == "jvm":  # a command the JVM is starting: its memory is the JVM's
                continue
            now["other" if in_peer else kind] += _rss(pid)
        now["total"] = sum(now.values())
        now["driver"] = now["jvm"] + now["python_driver"]
        for peaks in (self.peaks, self.overall):
            for name, value in now.items():
                setattr(peaks, name, max(getattr(peaks, name), value))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
