"""Every bronze message accounted for: outcomes through bronze_ref and related_refs, precedence,
held messages resolved later (applied, or quarantined at a timeout), a message nothing accounts
for, and the report showing it red. The accounting is stored as JSON in the event log and read
back by the report (`quality/stored.py`): the figures survive that round trip. A held message
quarantined at its timeout in a real pipeline run: tests/test_ibm_qrep_delimited.py."""

from __future__ import annotations

import json

from cdc_medallion.model import BRONZE_SCHEMA, EVENT_SCHEMA
from cdc_medallion.quality.accounting import SourceAccounting, account_source
from cdc_medallion.quality.report import TableState, render_index
from cdc_medallion.storage.delta_store import DeltaStore


def bronze(spark, lines: int):
    rows = [
        {name: None for name in BRONZE_SCHEMA.fieldNames()}
        | {"_file": "in.jsonl", "_line": i, "value": f"m{i}".encode()}
        for i in range(lines)
    ]
    rows[5]["value"] = b"m4"  # line 5 repeats line 4's bytes: a redelivery
    return spark.createDataFrame(rows, BRONZE_SCHEMA)


def events(spark, rows: list[tuple[str, str, list[str] | None]]):
    fields = EVENT_SCHEMA.fieldNames()
    full = [{name: None for name in fields} | {"kind": k, "bronze_ref": r, "related_refs": rel} for k, r, rel in rows]
    return spark.createDataFrame(full, EVENT_SCHEMA)


def test_every_message_counts_once_under_its_first_outcome(spark):
    silver = events(
        spark,
        [
            ("change", "in.jsonl:0", None),
            ("change", "in.jsonl:0", None),  # a multi-row message: still one message
            ("change", "in.jsonl:3", ["in.jsonl:1", "in.jsonl:2"]),  # a transaction over three messages
            ("transaction", "in.jsonl:3", None),  # its marker: the message counts as a change
            ("held", "in.jsonl:1", None),  # held in an earlier run, completed since
            ("heartbeat", "in.jsonl:4", None),
            ("held", "in.jsonl:6", None),  # still held
            ("tombstone", "in.jsonl:5", None),
            ("schema_change", "in.jsonl:8", None),
        ],
    )
    quarantine = events(spark, [("error", "in.jsonl:7", None), ("error", "in.jsonl:8", None)])
    result = account_source("src", bronze(spark, 9), silver, quarantine)
    assert result.bronze == 9
    assert result.outcomes == {
        "change": 4,
        "heartbeat": 1,
        "tombstone": 1,
        "held": 1,
        "quarantined": 1,
        "schema_change": 1,  # line 8: a schema change with one record quarantined counts once
    }
    assert result.partly_quarantined == 1
    assert result.balanced and result.unaccounted == 0 and result.unknown_refs == 0
    assert result.redelivered == 1
    assert [h["bronze_ref"] for h in result.held] == ["in.jsonl:6"]
    assert result.equation().startswith("9 bronze = 4 changes + 1 schema changes + 1 heartbeats")


def test_a_message_without_outcome_is_a_red_mismatch(spark):
    silver = events(spark, [("change", "in.jsonl:0", None), ("change", "elsewhere:9", None)])
    result = account_source("src", bronze(spark, 6), silver, None)
    assert not result.balanced
    assert (result.unaccounted, result.unknown_refs, result.accounted) == (5, 1, 1)
    assert result.unaccounted_samples[:2] == ["in.jsonl:1", "in.jsonl:2"]
    html = render_index([], TableState(accounting=[result]), "accounting test")
    assert 'data-balanced="false"' in html and "MISMATCH" in html
    assert 'class="accounting bad"' in html


def test_a_message_held_then_quarantined_counts_once_as_quarantined_computed_and_stored(spark, tmp_path):
    """A message held in one run and quarantined in a later one (an IBM transaction past its
    incomplete timeout, a pair's half given up on) keeps its `held` rows in silver: its outcome
    is the quarantine, counted once, and `held` counts only what still waits: as computed, and
    as the event log stores it for the report."""
    store = DeltaStore(tmp_path / "storage", spark)
    silver = events(
        spark,
        [
            ("change", "in.jsonl:0", None),
            ("held", "in.jsonl:1", None),  # held in the first run ...
            ("held", "in.jsonl:2", None),
            ("held", "in.jsonl:1", None),  # ... and the next, then quarantined at its timeout
            ("held", "in.jsonl:2", None),
            ("held", "in.jsonl:3", None),  # still held
            ("change", "in.jsonl:4", ["in.jsonl:5"]),
            ("held", "in.jsonl:5", None),  # held, then completed: a change
            ("tombstone", "in.jsonl:6", None),
        ],
    )
    quarantine = events(spark, [("error", "in.jsonl:1", None), ("error", "in.jsonl:2", None)])
    for name, rows in (("bronze_src", bronze(spark, 7)), ("silver_src", silver), ("silver_src_quarantine", quarantine)):
        store.append(name, rows, None)
    with_spark = account_source(
        "src", store.read("bronze_src"), store.read("silver_src"), store.read("silver_src_quarantine")
    )
    for result in (with_spark, SourceAccounting.from_dict(json.loads(json.dumps(with_spark.as_dict())))):
        assert result.outcomes == {"change": 3, "quarantined": 2, "held": 1, "tombstone": 1}
        assert result.partly_quarantined == 0  # a held row is no outcome beside the quarantine
        assert result.balanced and result.accounted == result.bronze == 7
        assert [h["bronze_ref"] for h in result.held] == ["in.jsonl:3"]
