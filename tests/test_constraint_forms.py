"""Both engines parse every rule alike: each shipped rule (`expectations/*.yml`) and each form a
rule may take (several lines, `--` and `/* */` comments) is read by Spark's own parser in the
form the Databricks registry hands the native decorators, analysed over a DataFrame of the
dataset's schema, and evaluates row by row as the local runner evaluates it.

A trailing semicolon is no expression for Spark (`F.expr("x > 0;")` is a ParseException), so
neither engine takes one; the rule loader reports it at startup.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from cdc_medallion import dp
from cdc_medallion.declarative.definitions import Action, Expectation
from cdc_medallion.layers.gold import view_schema
from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.names import FAILED
from cdc_medallion.quality.rules import load_rules
from cdc_medallion.runner.expectations import mark
from tests.databricks_standins import Recorder, pipelines_standin
from tests.helpers import parse

REPO = Path(__file__).resolve().parent.parent
EXPECTATIONS = REPO / "expectations"

#: What a person may write in `constraint:` (YAML keeps line breaks in `|` blocks).
FORMS = {
    "several_lines": "kind <> 'change'\n  OR op IS NOT NULL",
    "line_comment": "kind IS NOT NULL -- every row has a kind",
    "comment_line_first": "-- rows that parsed\nerror IS NULL",
    "comment_between_lines": "kind = 'change' -- row changes\n  OR kind = 'tombstone' -- and tombstones",
    "block_comments": "/* what */ source_table IS NOT NULL /* and why */",
    "block_comment_over_lines": "sequence IS NOT NULL /* a change\n can be ordered */",
    "comment_to_the_end": "op = 'INSERT' --",
    "null_result": "CAST(NULL AS BOOLEAN)",  # NULL fails, on both engines
}


def _silver_rows(spark):
    """Events of several formats, a parse error among them."""
    lines = (REPO / "samples" / "debezium" / "shop.jsonl").read_text(encoding="utf-8").splitlines()[:12]
    events = [e for line in lines for e in parse("debezium-json", line)]
    events += [e for line in (REPO / "samples" / "canal-json" / "crm.jsonl").read_text().splitlines()[:4]
               for e in parse("canal-json", line)]  # fmt: skip
    events += parse("shareplex-json", "{not json")
    return spark.createDataFrame(events, EVENT_SCHEMA)


def _gold_rows(spark):
    schema = view_schema({"id": "bigint", "label": "string"})
    rows = [
        (1, "a", "INSERT", "s1", ["id", "label"], []),
        (None, None, "TRUNCATE", "s2", None, []),
        (2, None, "UPDATE", None, ["id"], ["label: x is not bigint"]),
    ]
    return spark.createDataFrame(
        [(*r, None, None) for r in rows], schema.add("__event_ts", "timestamp").add("__bronze_ref", "string")
    )


def _rule_sets():
    files = sorted(EXPECTATIONS.glob("silver.*.yml"))
    sets = [("silver.yml + forms", "silver", None)]
    sets += [(file.name, "silver", file.name.removeprefix("silver.").removesuffix(".yml")) for file in files]
    return [*sets, ("gold.yml", "gold", None)]


@pytest.mark.parametrize(("label", "layer", "fmt"), _rule_sets(), ids=[s[0] for s in _rule_sets()])
def test_every_rule_parses_and_counts_alike_on_both_engines(spark, monkeypatch, label, layer, fmt):
    rows = _silver_rows(spark) if layer == "silver" else _gold_rows(spark)
    schema = EVENT_SCHEMA if layer == "silver" else rows.schema
    rules = list(load_rules(EXPECTATIONS, layer, fmt, schema))
    if fmt is None and layer == "silver":
        rules += [Expectation(name, text, Action.WARN) for name, text in FORMS.items()]
    assert rules

    recorder = Recorder()  # what the Databricks registry hands Lakeflow's decorators
    monkeypatch.setitem(sys.modules, "pyspark.pipelines", pipelines_standin(recorder))

    @dp.temporary_view(name="checked")
    @dp.expectations_from(tuple(rules))
    def checked():
        return rows

    native = {name: text for d in recorder.datasets.values() for _, name, text in d.expectations}
    assert set(native) == {r.name for r in rules}
    columns = []
    for name, text in native.items():
        try:  # Spark's own parser and analyser, over a DataFrame of the dataset's schema
            rows.select(F.expr(text).cast("boolean")).schema  # noqa: B018
        except Exception as error:
            raise AssertionError(
                f"{label}: rule {name!r} does not parse as Databricks gets it: {text!r}\n{error}"
            ) from None
        columns.append(F.expr(text).alias(f"native_{name}"))
    evaluated = mark(rows, tuple(rules), "checked").select(FAILED, *columns).collect()
    assert evaluated
    for row in evaluated:
        natively_failed = {name for name in native if row[f"native_{name}"] is not True}
        assert natively_failed == set(row[FAILED]), row
    if fmt is None and layer == "silver":  # the forms did something: each passes and fails somewhere
        for name in ("line_comment", "comment_between_lines", "block_comments"):
            assert any(row[f"native_{name}"] for row in evaluated), name
        assert all(row["native_null_result"] is False for row in evaluated)
