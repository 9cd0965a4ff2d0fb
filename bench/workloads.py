"""Benchmark inputs, made with the project's own generator and cached between runs.

Every workload is a generated history rendered in one format (the same conventions the
conformance suite checks), so each format is measured on messages its parser really meets.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from cdc_medallion.config import PipelineConf, load_conf
from cdc_medallion.generator.history import History, Transaction, generate_history, stream_history
from cdc_medallion.generator.output import pipeline_conf
from cdc_medallion.generator.renderers import RenderedSource, render
from cdc_medallion.lines import NEWLINE, lines_of

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT_BYTES = "snapshot.bytes"  # an incremental input's length before its increment
CHANGES_PER_TRANSACTION = 2.5  # the generator draws 1-4 changes per transaction
#: A format's input version, bumped when its renderer's output or options change so that its
#: cached inputs are made again (others keep theirs: a 10M-change input takes hours to make).
#: IBM Q Replication 2: its column specs moved into the format's `tables` option.
WORKLOAD_VERSIONS = {"ibm-qrep-delimited": 2}


@dataclass(frozen=True)
class Workload:
    name: str
    format: str
    events: int  # row changes in the history (what N counts)
    rendered: RenderedSource
    conf_path: Path
    bytes: int

    @property
    def messages(self) -> int:
        return self.rendered.messages

    def conf(self) -> PipelineConf:
        return load_conf(self.conf_path)

    @contextmanager
    def held_back(self, count: int) -> Iterator[tuple[PipelineConf, Callable[[], None]]]:
        """The conf over an empty storage and the input without its last `count` messages, and
        a function that appends them: a loaded pipeline, then a small update on top of it."""
        if not self.rendered.path.is_file():
            raise ValueError(f"{self.name}: holding messages back needs a one-file input")
        folder = self.conf_path.parent / "held-back"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        lines = lines_of(self.rendered.path.read_bytes(), keepends=True)
        kept, held = lines[: len(lines) - count], lines[len(lines) - count :]
        copy = folder / self.rendered.path.name
        copy.write_bytes(b"".join(kept))
        batch = self.conf().max_messages_per_batch
        conf = load_conf(_write_conf(folder, [replace(self.rendered, path=copy, messages=len(kept))], batch))

        def release() -> None:
            with copy.open("ab") as handle:
                handle.write(b"".join(held))

        try:
            yield conf, release
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @contextmanager
    def fresh_storage(self) -> Iterator[PipelineConf]:
        """The conf over an empty storage, removed again afterwards (inputs run to gigabytes)."""
        conf = self.conf()
        shutil.rmtree(conf.storage, ignore_errors=True)
        try:
            yield conf
        finally:
            shutil.rmtree(conf.storage, ignore_errors=True)


def input_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in input_files(path))


def _write_conf(folder: Path, rendered: list[RenderedSource], batch: int) -> Path:
    conf = pipeline_conf(rendered, folder / "storage", name="bench")
    conf["pipeline"]["max_messages_per_batch"] = batch
    # The repo's own transformations and rules: what `make run` runs, expectations included.
    conf["pipeline"]["transformations"] = str(REPO / "transformations")
    conf["pipeline"]["expectations"] = str(REPO / "expectations")
    path = folder / "conf.yml"
    path.write_text(yaml.safe_dump(conf, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _cached(folder: Path) -> dict[str, Any] | None:
    """The recorded workload, unless a renderer changed since (then it is made again)."""
    done = folder / "workload.json"
    info = json.loads(done.read_text()) if done.is_file() else None
    if info is None or info.get("version", 1) != WORKLOAD_VERSIONS.get(info.get("format", ""), 1):
        return None
    return info


def _record(folder: Path, rendered: RenderedSource, events: int) -> None:
    info = {"version": WORKLOAD_VERSIONS.get(rendered.format, 1), "messages": rendered.messages, "events": events}
    info.update(layout=rendered.layout, path=str(rendered.path))
    info.update(format=rendered.format, keys={t: list(k) for t, k in rendered.keys.items()})
    info.update(options=rendered.options, columns=rendered.columns)
    (folder / "workload.json").write_text(json.dumps(info, default=str), encoding="utf-8")


def _from_cache(info: dict[str, Any]) -> RenderedSource:
    return RenderedSource(
        format=info["format"],
        path=Path(info["path"]),
        layout=info["layout"],
        options=info["options"],
        keys={t: tuple(k) for t, k in info["keys"].items()},
        columns=info["columns"],
        messages=info["messages"],
    )


def _transactions(events: int) -> int:
    return max(1, math.ceil(events / CHANGES_PER_TRANSACTION))


def history_for(events: int, tables: int, seed: int) -> History:
    return generate_history(tables=tables, transactions=_transactions(events), seed=seed)


def _in_child(target, *args) -> None:
    """Generate in a child process, so the generator's memory never counts as the driver's
    (CPython keeps freed arenas: a parent that generated 1M changes stays gigabytes bigger)."""
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"generating {args[0]} failed (exit code {child.exitcode})")


def _counted(transactions: Iterator[Transaction], changes: list[int]) -> Iterator[Transaction]:
    for transaction in transactions:
        changes[0] += len(transaction.changes)
        yield transaction


def _generate(folder: Path, fmt: str, events: int, tables: int, seed: int) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    if fmt == "debezium-json":  # written as it is made: 10M changes do not fit in memory whole
        from cdc_medallion.generator.renderers.debezium_json import render as render_debezium

        history, stream = stream_history(tables, _transactions(events), seed)
        changes = [0]
        (folder / "input").mkdir(parents=True)
        rendered = render_debezium(history, folder / "input", _counted(stream, changes))
        _record(folder, rendered, changes[0])
        return
    history = history_for(events, tables, seed)
    rendered = render(history, fmt, folder / "input")
    _record(folder, rendered, sum(len(t.changes) for t in history.transactions))


def _generate_incremental(folder: Path, fmt: str, rows: int, changes: int, seed: int) -> None:
    """The snapshot and the increment, from one history: the snapshot alone is what a history
    of only its first transaction renders, and the increment is what the rest adds."""
    shutil.rmtree(folder, ignore_errors=True)
    transactions = math.ceil(changes / CHANGES_PER_TRANSACTION)
    if fmt == "debezium-json":  # streamed: a 10M-row snapshot rendered whole would not fit in memory
        _stream_incremental(folder, rows, transactions, seed)
    else:
        _render_incremental(folder, fmt, rows, transactions, seed)
    (folder / SNAPSHOT_BYTES).write_text(str(_size(folder / "input")), encoding="utf-8")


def _render_incremental(folder: Path, fmt: str, rows: int, transactions: int, seed: int) -> None:
    full = generate_history(tables=1, transactions=transactions, seed=seed, snapshot_rows=rows, table_events=False)
    snapshot_only = History(full.tables, [full.transactions[0]])
    whole = render(full, fmt, folder / "whole")
    base = render(snapshot_only, fmt, folder / "input")
    prefix = input_files(base.path)[0].read_bytes()
    everything = input_files(whole.path)[0].read_bytes()
    if not everything.startswith(prefix):
        raise RuntimeError(f"{fmt}: the rendered snapshot is not a prefix of the whole history")
    (folder / "increment.bin").write_bytes(everything[len(prefix) :])
    shutil.rmtree(folder / "whole")
    _record(folder, base, rows)


_SNAPSHOT_READ = b'\\"snapshot\\": \\"true\\"'  # inside the dump line's JSON-escaped value


def _stream_incremental(folder: Path, rows: int, transactions: int, seed: int) -> None:
    """Debezium renders one message per snapshot row, so the snapshot is the whole history's
    first `rows` lines: rendered once, as it is made, then cut there in place (a copy of a
    10M-row snapshot would need another 29 GB of disk)."""
    from cdc_medallion.generator.renderers.debezium_json import render as render_debezium

    history, stream = stream_history(1, transactions, seed, snapshot_rows=rows, table_events=False)
    (folder / "input").mkdir(parents=True)
    whole = render_debezium(history, folder / "input", stream)
    with whole.path.open("rb") as source:
        for number in range(rows):
            if _SNAPSHOT_READ not in source.readline():
                raise RuntimeError(f"debezium-json: line {number + 1} is not a snapshot read; expected {rows:,}")
        end = source.tell()
        with (folder / "increment.bin").open("wb") as increment:
            shutil.copyfileobj(source, increment)
    os.truncate(whole.path, end)
    _record(folder, replace(whole, messages=rows), rows)


def workload(
    root: Path, fmt: str, events: int, tables: int = 3, seed: int = 7, batch: int = 200_000, say=print
) -> Workload:
    """`events` row changes over `tables` tables, rendered as `fmt`."""
    folder = root.resolve() / f"{fmt}-e{events}-t{tables}-s{seed}"
    info = _cached(folder)
    if info is None:
        started = time.monotonic()
        _in_child(_generate, folder, fmt, events, tables, seed)
        info = _cached(folder)
        assert info is not None
        say(f"  generated {info['messages']:,} {fmt} messages in {time.monotonic() - started:.0f}s")
    rendered = _from_cache(info)
    conf_path = _write_conf(folder, [rendered], batch)
    return Workload(folder.name, fmt, info["events"], rendered, conf_path, _size(rendered.path))


@dataclass(frozen=True)
class IncrementalWorkload:
    """A gold table of `rows` rows, then `changes` new changes appended to the same input."""

    base: Workload
    increment: bytes
    rows: int
    changes: int

    def append_increment(self) -> None:
        with self.base.rendered.path.open("ab") as handle:
            handle.write(self.increment)


def incremental(
    root: Path, fmt: str, rows: int, changes: int, seed: int = 11, batch: int = 200_000, say=print
) -> IncrementalWorkload:
    """One keyed table loaded with `rows` rows by a snapshot; then `changes` random row changes.

    No DDL or TRUNCATE: those touch the whole table by nature, and the question is whether a
    batch costs what it touches (an earlier run had a TRUNCATE in the increment, which made the
    10x table cost 2x by rewriting every row, as it must).

    Both parts come from one history so the changes hit the loaded keys: the snapshot alone is
    rendered first, the whole history second, and the increment is what the second adds.
    """
    folder = root.resolve() / f"incremental-{fmt}-r{rows}-c{changes}-s{seed}-rows-only"
    increment_file = folder / "increment.bin"
    _adopt_snapshot_copy(folder)
    if _cached(folder) is None or not increment_file.is_file() or not (folder / SNAPSHOT_BYTES).is_file():
        started = time.monotonic()
        _in_child(_generate_incremental, folder, fmt, rows, changes, seed)
        say(f"  generated a {rows:,}-row snapshot and {changes:,} changes ({fmt}) in {time.monotonic() - started:.0f}s")
    info = _cached(folder)
    assert info is not None
    rendered = _from_cache(info)
    # A run appends the increment to the input; cutting it back to the snapshot's length starts
    # every measurement from the snapshot alone (a copy of a 10M-row snapshot would be 29 GB).
    os.truncate(input_files(rendered.path)[0], int((folder / SNAPSHOT_BYTES).read_text(encoding="utf-8")))
    conf_path = _write_conf(folder, [rendered], batch)
    base = Workload(folder.name, fmt, rows, rendered, conf_path, _size(rendered.path))
    return IncrementalWorkload(base, increment_file.read_bytes(), rows, changes)


def _adopt_snapshot_copy(folder: Path) -> None:
    """Inputs cached before the snapshot's length was recorded kept a copy of it instead."""
    copy = folder / "snapshot.bin"
    if copy.is_file():
        (folder / SNAPSHOT_BYTES).write_text(str(copy.stat().st_size), encoding="utf-8")
        copy.unlink()


def values_file(work: Workload, out: Path) -> tuple[Path, int]:
    """The message values of a Kafka-dump input, one per line (tombstones left out): the plain
    file a Flink filesystem source and our `json-lines` layout both read."""
    if out.is_file():
        return out, sum(1 for _ in out.open("rb"))
    lines = 0
    with out.open("w", encoding="utf-8") as sink:
        for path in input_files(work.rendered.path):
            with path.open(encoding="utf-8", newline=NEWLINE) as handle:  # lines end at "\n" only
                for line in handle:
                    record = json.loads(line)
                    value = record.get("value")
                    if value is None:
                        continue
                    sink.write(value.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029") + "\n")
                    lines += 1
    return out, lines
