"""The generator at benchmark size: histories stay consistent and reproducible past the size
where rows stop being picked from sorted keys, and rendering does not copy tables per change.
And the conf it writes reads what it rendered."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from cdc_medallion.config import load_conf
from cdc_medallion.formats import get_format
from cdc_medallion.formats.message import BronzeMessage
from cdc_medallion.generator.database import ADDED_COLUMN, make_tables
from cdc_medallion.generator.history import (
    SMALL_TABLE,
    Change,
    History,
    Transaction,
    generate_history,
    stream_history,
)
from cdc_medallion.generator.output import generate
from cdc_medallion.generator.renderers import RENDERERS
from cdc_medallion.generator.renderers._json_common import walk
from cdc_medallion.generator.renderers.debezium_json import render as render_debezium
from cdc_medallion.lines import lines_of
from cdc_medallion.sources.kafka_dump import unpack_line


def replay(history) -> tuple[int, int]:
    """Apply the changes to a state, checking each before-image is the live row; count them."""
    state: dict[str, dict] = {t.name: {} for t in history.tables if t.keys}
    updates = deletes = 0
    for tx in history.transactions:
        for change in tx.changes:
            spec = history.table(change.table)
            if not spec.keys or change.op == "DDL":
                continue
            rows = state[change.table]
            if change.op == "TRUNCATE":
                rows.clear()
                continue
            if change.before is not None:
                key = tuple(change.before[k] for k in spec.keys)
                assert rows.pop(key) == change.before, f"{change.op} of a row that is not live: {key}"
                updates += change.op == "UPDATE"
                deletes += change.op == "DELETE"
            if change.after is not None:
                rows[tuple(change.after[k] for k in spec.keys)] = change.after
    return updates, deletes


def test_big_tables_pick_live_rows_and_stay_reproducible():
    history = generate_history(tables=1, transactions=3000, seed=4, snapshot_rows=SMALL_TABLE + 1000)

    updates, deletes = replay(history)

    assert updates > 1000 and deletes > 500
    again = generate_history(tables=1, transactions=3000, seed=4, snapshot_rows=SMALL_TABLE + 1000)
    assert again.transactions == history.transactions


def test_only_a_truncate_step_carries_the_rows_it_removes():
    history = generate_history(tables=3, transactions=300, seed=7)
    steps = list(walk(history))

    truncates = [s for s in steps if s.change.op == "TRUNCATE"]
    assert truncates and all(s.live for s in truncates)
    assert all(not s.live for s in steps if s.change.op != "TRUNCATE")


def test_a_streamed_history_renders_the_same_bytes_as_a_whole_one(tmp_path):
    """Bench inputs too big to hold are rendered from `stream_history` as it is made; they must
    be the very input a whole history renders to, or the benchmark measures something else."""
    whole = generate_history(tables=3, transactions=400, seed=9)
    tables, stream = stream_history(tables=3, transactions=400, seed=9)
    assert tables.transactions == []
    (tmp_path / "whole").mkdir()
    (tmp_path / "streamed").mkdir()
    expected = render_debezium(whole, tmp_path / "whole")
    seen = []
    streamed = render_debezium(tables, tmp_path / "streamed", (seen.append(tx) or tx for tx in stream))
    assert seen == whole.transactions
    assert streamed.messages == expected.messages > 1000
    written = [(tmp_path / side / "debezium.jsonl").read_bytes() for side in ("streamed", "whole")]
    assert written[0] == written[1]


def test_a_streamed_incremental_input_splits_where_the_whole_rendering_does(tmp_path):
    """The incremental bench's 10M-row snapshot is rendered once as a stream and cut after its
    rows; the snapshot and the increment must be the bytes the whole-history way produced."""
    from bench.workloads import _render_incremental, _stream_incremental

    _stream_incremental(tmp_path / "streamed", rows=SMALL_TABLE + 50, transactions=300, seed=11)
    _render_incremental(tmp_path / "whole", "debezium-json", rows=SMALL_TABLE + 50, transactions=300, seed=11)

    for part in ("input/debezium.jsonl", "increment.bin"):
        streamed, whole = ((tmp_path / side / part).read_bytes() for side in ("streamed", "whole"))
        assert streamed == whole, part
    recorded = [json.loads((tmp_path / side / "workload.json").read_text()) for side in ("streamed", "whole")]
    for side, info in zip(("streamed", "whole"), recorded, strict=True):
        assert info.pop("path") == str(tmp_path / side / "input" / "debezium.jsonl")
    assert recorded[0] == recorded[1]
    assert len(lines_of((tmp_path / "whole" / "input" / "debezium.jsonl").read_bytes())) == SMALL_TABLE + 50
    assert (tmp_path / "whole" / "increment.bin").stat().st_size > 0


def test_an_update_that_sets_an_added_column_to_null_starts_no_version():
    """A row made before an ADD COLUMN holds the column as NULL; an update setting it to NULL
    changes no value, so the truth has no new SCD2 version (as auto CDC does: NULL equals NULL).
    The 20,000-change crash drill found this: three keys whose truth had a version identical to
    the one before it."""
    spec = next(t for t in make_tables(3) if len(t.keys) == 2)
    row = {c.name: None for c in spec.columns} | {spec.keys[0]: 1, spec.keys[1]: 1}
    touched = row | {ADDED_COLUMN.name: None}
    changed = touched | {ADDED_COLUMN.name: "gold"}
    history = History([spec])
    history.transactions += [
        Transaction(1, dt.datetime(2026, 1, 1), (Change(spec.name, "INSERT", after=row),)),
        Transaction(2, dt.datetime(2026, 1, 1), (Change(spec.name, "DDL", added=ADDED_COLUMN),)),
        Transaction(3, dt.datetime(2026, 1, 1), (Change(spec.name, "UPDATE", before=row, after=touched),)),
        Transaction(4, dt.datetime(2026, 1, 1), (Change(spec.name, "UPDATE", before=touched, after=changed),)),
    ]
    [versions] = history.versions()[spec.name].values()
    assert [(v.row.get(ADDED_COLUMN.name), v.start) for v in versions] == [(None, (1, 0)), ("gold", (4, 0))]


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_the_conf_generate_writes_reads_every_message_it_rendered(fmt: str, tmp_path: Path):
    """`generate` writes a conf.yml that users (and the bench) run as it is. Its source options
    must read every rendered message: IBM Q Replication records carry no column names, so
    without them in the format's `tables` option every message was quarantined."""
    history = generate_history(tables=2, transactions=8, seed=3)
    [rendered] = generate(history, [fmt], tmp_path)
    [source] = load_conf(tmp_path / "conf.yml").sources
    parser = get_format(source.format)(source.name, source.options)
    messages = []
    for number, line in enumerate(lines_of(rendered.path.read_bytes()), start=1):
        row = unpack_line(line, None)
        assert row["_landing_error"] is None, row["_landing_error"]
        fields = {k: row[k] for k in ("key", "value", "topic", "partition", "offset", "timestamp")}
        messages.append(BronzeMessage(**fields, headers=(), file=None, line=number, ingest_ts=None, landing_error=None))
    events = parser.parse_messages(messages, [])
    assert [e["error"] for e in events if e["kind"] == "error"] == []
    assert {e["source_table"].lower() for e in events if e["kind"] == "change"} == {t.name for t in history.tables}
