"""The report's table figures are computed by the run and stored in the event log
(`quality/figures_step.py`), read back by the report and `status` (`quality/stored.py`): each
run that changed them stores them once, a run that changed nothing stores nothing again, and a
quarantine table a run did not write is not read again (its figures come from the memo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_medallion.names import EVENT_LOG
from cdc_medallion.quality import figures_step
from cdc_medallion.quality.figures import FIGURES
from cdc_medallion.quality.stored import read_stored
from cdc_medallion.storage.delta_store import DeltaStore
from tests.helpers import ingest

pytestmark = pytest.mark.xdist_group("stored_figures")

COLUMNS = {"notes": "id:int,n:int"}


def change(lsn: int, after: dict) -> str:
    message = {"op": "c", "ts_ms": 1_700_000_000_000 + lsn, "source": {"table": "notes", "lsn": lsn}}
    return json.dumps({**message, "before": None, "after": after}) + "\n"


def figures_events(spark, storage: Path) -> list[dict]:
    """The `figures` events of the event log, oldest first."""
    rows = DeltaStore(storage, spark).read(EVENT_LOG).filter("event_type = 'quality_check'").orderBy("timestamp")
    found = []
    for row in rows.collect():
        check = json.loads(row["details"])["quality_check"]
        if check.get("suite") == FIGURES:
            found.append({"update_id": row["origin"]["update_id"], **check[FIGURES]})
    return found


def test_figures_are_stored_when_they_change_and_read_from_the_memo_when_not(spark, tmp_path, monkeypatch):
    feed, storage = tmp_path / "notes.jsonl", tmp_path / "storage"
    feed.write_text(change(1, {"id": 1, "n": 1}) + change(2, {"id": 2, "n": "not a number"}), encoding="utf-8")
    run = {"keys": {"notes": "id"}, "columns": COLUMNS, "layout": "json-lines"}
    ingest(spark, "debezium-json", feed, storage, **run)
    [first] = figures_events(spark, storage)
    assert first["quarantine_rows"] == {"changes_notes_quarantine": 1}
    assert read_stored(storage).figures.quarantine_rows == first["quarantine_rows"]

    read: list[str] = []  # the quarantine tables the figures step reads with Spark from here on
    computed = figures_step.quarantine_reasons
    monkeypatch.setattr(
        figures_step,
        "quarantine_reasons",
        lambda tables, bronze, **kw: read.extend(tables) or computed(tables, bronze, **kw),
    )
    ingest(spark, "debezium-json", feed, storage, **run)  # nothing new
    assert len(figures_events(spark, storage)) == 1 and read == []

    with feed.open("a", encoding="utf-8") as out:
        out.write(change(3, {"id": 3, "n": 3}))
    ingest(spark, "debezium-json", feed, storage, **run)  # gold changed, no quarantine did
    assert len(figures_events(spark, storage)) == 1 and read == []

    with feed.open("a", encoding="utf-8") as out:
        out.write(change(4, {"id": 4, "n": "four"}))
    ingest(spark, "debezium-json", feed, storage, **run)
    events = figures_events(spark, storage)
    assert len(events) == 2 and read == ["changes_notes_quarantine"]
    assert events[-1]["quarantine_rows"] == {"changes_notes_quarantine": 2}
    stored = read_stored(storage)
    assert stored.figures_update is not None and stored.figures_update.update_id == events[-1]["update_id"]
    [reason] = stored.figures.quarantine
    assert reason.count == 2 and len(reason.samples) == 2
    assert all(sample["raw"] for sample in reason.samples)  # gold's quarantine rows shown as their values


def test_reasons_take_each_rules_count_and_first_samples_and_read_bronze_only_for_a_missing_raw(spark):
    """`quarantine_reasons` in one job per table: each rule's count, its samples in bronze order,
    the top rules by count (a row failing two rules counts under each), the table's rows from the
    listing when given; bronze is read only when a sample has no raw message of its own."""
    from cdc_medallion.quality.figures import SAMPLES_PER_REASON
    from cdc_medallion.quality.table_figures import quarantine_reasons

    def quarantine(raw: bool):
        rows = [(f"t/0/{i}", ["a", "b"] if i % 3 == 0 else ["a"], "bad" if raw else None) for i in range(10)]
        rows.append(("t/0/99", ["c"], "worse" if raw else None))
        return spark.createDataFrame(rows, "bronze_ref string, failed_expectations array<string>, raw_message string")

    bronze_reads: list[int] = []

    def bronze():
        bronze_reads.append(1)
        return [
            spark.createDataFrame(
                [("t", 0, 0, bytearray(b"message zero"), None, None)],
                "topic string, partition int, offset long, value binary, _file string, _line long",
            )
        ]

    reasons, totals = quarantine_reasons({"q": quarantine(raw=True)}, bronze, rows={"q": 11})
    assert [(r.rule, r.count) for r in reasons] == [("a", 10), ("b", 4), ("c", 1)]
    assert [s["bronze_ref"] for s in reasons[0].samples] == [f"t/0/{i}" for i in range(SAMPLES_PER_REASON)]
    assert [s["bronze_ref"] for s in reasons[1].samples] == ["t/0/0", "t/0/3", "t/0/6"][:SAMPLES_PER_REASON]
    assert totals == {"q": 11} and bronze_reads == []

    reasons, totals = quarantine_reasons({"q": quarantine(raw=False)}, bronze)
    assert totals == {"q": 11} and bronze_reads == [1]
    assert reasons[0].samples[0]["raw"] == "message zero"
