"""The landing's plan on disk: each batch the driver planned is a small file, which the bronze
query streams with Spark's own text source (`file_stream.py`); and how far planning got.

Why the driver plans: a Python streaming data source (the landing before, `cdc-files`) starts a
Python planner process of its own for every query, and that start was most of a small landing
(several seconds on a loaded host, where it also missed Spark's fixed 10 s to connect back). A
file the driver writes costs a millisecond, and Spark's file source needs no Python at all.

Exactly once: a batch file is written whole (a hidden file, renamed) before the query can see
it and never changes; Spark's file source logs which file each micro-batch reads before the
batch runs, and bronze's write carries the batch id (`runner/batches.py`). What was planned is
`planned.json` (the offset that ends it and the next batch's number), written after the batch
files: a crash in between leaves batch files it does not count yet, which the next planning
reads back. Spark deletes a batch file once a later batch has committed (`cleanSource`), so
the folder holds the batches not landed yet, and the last one landed.

The log lives in the bronze query's checkpoint: it is the query's position, and goes with it
(a full refresh, a checkpoint removed to land everything again).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cdc_medallion.sources.files import FileLanding, FileRange, Offset

FOLDER = "cdc_medallion_landing"  # inside the bronze query's checkpoint, beside Spark's own files
BATCHES = "batches"
STATE = "planned.json"
#: One line of a batch file: a range to read, and how many lines it held when planned.
PIECE_DDL = "path STRING, start BIGINT, end BIGINT, first_line BIGINT, lines BIGINT"
PLANNING_INTERVAL = 1.0  # seconds between plannings while a continuous run keeps landing

_locks: dict[Path, threading.Lock] = {}
_planners: dict[Path, threading.Event] = {}
_registry = threading.Lock()


@dataclass(frozen=True)
class Planned:
    """Everything planned so far: the offset that ends it and the next batch's number."""

    offset: Offset
    next_batch: int


class LandingLog:
    """The planned batches of one source's landing, in the checkpoint of its bronze query."""

    def __init__(self, checkpoint: Path, landing: FileLanding) -> None:
        self.folder = checkpoint / FOLDER
        self.batches = self.folder / BATCHES
        self.landing = landing

    def planned(self) -> Planned:
        """What `planned.json` says, plus any batch file written after it (a planning that
        stopped between its batch files and its state)."""
        try:
            state = json.loads((self.folder / STATE).read_text(encoding="utf-8"))
            planned = Planned(state["offset"], state["next_batch"])
        except FileNotFoundError:
            planned = Planned({"files": {}}, 0)
        files = {path: list(position) for path, position in planned.offset.get("files", {}).items()}
        number = planned.next_batch
        while (batch := self._batch_file(number)).is_file():
            for line in batch.read_text(encoding="utf-8").splitlines():
                piece = json.loads(line)
                files[piece["path"]] = [piece["end"], piece["first_line"] + piece["lines"]]
            number += 1
        return Planned({"files": files}, number)

    def plan(self) -> int:
        """Plan every bounded batch the input holds now beyond what was planned, a file each;
        how many."""
        with self._lock():
            planned = self.planned()
            sizes = self.landing.sizes()
            offset, number = planned.offset, planned.next_batch
            while pieces := self.landing.ranges(offset, end := self.landing.plan(offset, sizes)):
                self._write_batch(number, pieces, end)
                offset, number = end, number + 1
            if number != planned.next_batch or not (self.folder / STATE).is_file():
                _write_atomically(self.folder / STATE, json.dumps({"offset": offset, "next_batch": number}))
            return number - planned.next_batch

    def keep_planning(self, interval: float = PLANNING_INTERVAL) -> None:
        """Plan what arrives every `interval` seconds, in a thread, while this process runs (a
        continuous run's bronze query then finds it), until the log's folder goes or another
        `keep_planning` of the same folder takes over."""
        stop = threading.Event()
        with _registry:
            previous = _planners.get(self.folder)
            if previous is not None:
                previous.set()
            _planners[self.folder] = stop

        def loop() -> None:
            while not stop.wait(interval) and self.folder.is_dir():
                try:
                    self.plan()
                except OSError:  # the storage went (a test's folder, a full refresh elsewhere)
                    return

        threading.Thread(target=loop, name=f"landing planner {self.folder.parent.name}", daemon=True).start()

    def _write_batch(self, number: int, pieces: list[FileRange], end: Offset) -> None:
        """Batch `number`'s file: a JSON line per piece. Spark's file source takes files in the
        order of their modification times, so a batch's time is its number (in seconds)."""
        lines = []
        for index, piece in enumerate(pieces):
            following = pieces[index + 1] if index + 1 < len(pieces) else None
            last = following.first_line if following is not None and following.path == piece.path else None
            if last is None:
                last = end["files"][piece.path][1]
            fields = {"path": piece.path, "start": piece.start, "end": piece.end, "first_line": piece.first_line}
            lines.append(json.dumps({**fields, "lines": last - piece.first_line}))
        path = self._batch_file(number)
        self.batches.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, "\n".join(lines) + "\n")
        os.utime(path, (number, number))

    def _batch_file(self, number: int) -> Path:
        return self.batches / f"{number:012d}.json"

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """One planning of a folder at a time in this process (a continuous run's thread and an
        update's planning); other processes are kept out by the storage lock."""
        with _registry:
            lock = _locks.setdefault(self.folder, threading.Lock())
        with lock:
            yield


def _write_atomically(path: Path, text: str) -> None:
    """`path` with `text`, never seen half written: written as a hidden file (Spark's file
    source skips names that start with a dot), then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
