"""The landing's plan on disk (`sources/landing_log.py`): batch files the bronze query streams,
planned once each, resumed after a crash between a batch file and the state that counts it, and
read only while the file still holds what was planned."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from cdc_medallion.config import InputConf, SourceConf
from cdc_medallion.sources.files import FileLanding, FileRange, read_range
from cdc_medallion.sources.landing_log import STATE, LandingLog


def pieces_of(log: LandingLog) -> list[dict]:
    return [json.loads(line) for batch in sorted(log.batches.glob("*.json")) for line in batch.read_text().splitlines()]


def landed(log: LandingLog) -> list[bytes]:
    """Every value the planned batches hold, read as the bronze query's tasks read them."""
    values = []
    for piece in pieces_of(log):
        part = FileRange(piece["path"], piece["start"], piece["end"], piece["first_line"])
        rows = read_range(log.landing.spec, part, dt.datetime.now(dt.UTC), piece["lines"])
        values += rows.column("value").to_pylist()
    return values


def make_log(tmp_path: Path, max_messages: int = 4) -> tuple[LandingLog, Path]:
    feed = tmp_path / "feed.jsonl"
    source = SourceConf(name="s", format="debezium-json", input=InputConf(path=feed, layout="json-lines"))
    return LandingLog(tmp_path / "checkpoint", FileLanding(source, max_messages, 1 << 20)), feed


def test_a_growing_file_is_planned_on_from_where_planning_stopped(tmp_path):
    log, feed = make_log(tmp_path)
    feed.write_bytes(b"".join(b'{"n": %d}\n' % i for i in range(6)))
    assert log.plan() == 2  # bounded: 4 + 2 lines
    assert log.plan() == 0  # nothing new: nothing planned twice
    with feed.open("ab") as handle:
        handle.write(b"".join(b'{"n": %d}\n' % i for i in range(6, 9)))
    assert log.plan() == 1

    assert landed(log) == [b'{"n": %d}' % i for i in range(9)]
    assert [(p["first_line"], p["lines"]) for p in pieces_of(log)] == [(0, 4), (4, 2), (6, 3)]


def test_a_batch_file_written_before_a_crash_is_counted_not_planned_again(tmp_path):
    """A planning that stopped after its batch files and before `planned.json`: the next one
    reads those batch files back, so their lines are neither planned twice nor skipped."""
    log, feed = make_log(tmp_path)
    feed.write_bytes(b"".join(b'{"n": %d}\n' % i for i in range(3)))
    log.plan()
    state_before = (log.folder / STATE).read_text()
    with feed.open("ab") as handle:
        handle.write(b'{"n": 3}\n{"n": 4}\n')
    assert log.plan() == 1
    (log.folder / STATE).write_text(state_before)  # as if killed before the state was written

    assert log.planned().next_batch == 2
    with feed.open("ab") as handle:
        handle.write(b'{"n": 5}\n')
    assert log.plan() == 1
    assert landed(log) == [b'{"n": %d}' % i for i in range(6)]


def test_a_range_whose_file_changed_since_it_was_planned_is_refused_naming_the_file(tmp_path):
    log, feed = make_log(tmp_path)
    feed.write_bytes(b'{"n": 0}\n{"n": 1}\n')
    log.plan()
    feed.write_bytes(b'{"n": 0}\n')  # cut short (rewritten) after planning
    with pytest.raises(ValueError, match=rf"{feed}: bytes 0-18 were planned, the file now ends at 9"):
        landed(log)
    feed.write_bytes(b'{"n": 0}\n\n{"n":1}\n')  # as long, other lines
    with pytest.raises(ValueError, match=rf"{feed}: bytes 0-18 held 2 lines when planned, now 3"):
        landed(log)
