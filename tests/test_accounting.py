"""Every bronze message accounted for: outcomes through bronze_ref and related_refs, precedence,
held messages resolved later, a message nothing accounts for, and the report showing it red."""

from __future__ import annotations

from cdc_medallion.model import BRONZE_SCHEMA, EVENT_SCHEMA
from cdc_medallion.quality.accounting import account_source
from cdc_medallion.quality.report import TableState, render_index


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
