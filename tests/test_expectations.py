"""Expectations split by Spark against a reference written in Python: random rows and rules of
every action must give the counts, kept rows and quarantined rows the rules say, with NULL
counting as failed, and a fail rule must stop the batch naming its first failing row. Real Spark."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from cdc_medallion.declarative.definitions import Action, Expectation
from cdc_medallion.errors import ExpectationFailed
from cdc_medallion.runner import expectations as exp

SCHEMA = StructType([StructField("id", IntegerType()), StructField("name", StringType())])
# Constraints that pass, fail, or evaluate to NULL (an unknown counts as failed) on some rows,
# each with what it means in Python (None: NULL).
CONSTRAINTS = {
    "name IS NOT NULL": lambda i, n: n is not None,
    "id > 2": lambda i, n: None if i is None else i > 2,
    "length(name) > 1": lambda i, n: None if n is None else len(n) > 1,
    "id % 2 = 0": lambda i, n: None if i is None else i % 2 == 0,
    "name <> 'b'": lambda i, n: None if n is None else n != "b",
}
_ROW = st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.one_of(st.none(), st.sampled_from(["a", "b", "cc", ""])))
_RULE = st.tuples(st.sampled_from(sorted(CONSTRAINTS)), st.sampled_from([Action.WARN, Action.DROP, Action.QUARANTINE]))


def as_rows(frame) -> list[tuple]:
    return [] if frame is None else sorted((tuple(r) for r in frame.collect()), key=repr)


@settings(max_examples=15, deadline=None)
@given(rows=st.lists(_ROW, max_size=12), chosen=st.lists(_RULE, max_size=4, unique_by=lambda r: r[0]))
def test_the_split_follows_the_rules(spark, rows, chosen):
    rules = tuple(Expectation(f"rule '{i}'", constraint, action) for i, (constraint, action) in enumerate(chosen))
    marked = exp.mark(spark.createDataFrame(rows, SCHEMA), rules, "d").cache()
    result = exp.split(marked, rules, "d")

    failed = {r.name: [row for row in rows if CONSTRAINTS[r.constraint](*row) is not True] for r in rules}
    assert result.report.rows == len(rows)
    assert result.report.counts == {n: (len(rows) - len(f), len(f)) for n, f in failed.items()}
    in_quarantine = [r for r in rows if any(r in failed[x.name] for x in rules if x.action is Action.QUARANTINE)]
    dropped = [
        r for r in rows if r not in in_quarantine and any(r in failed[x.name] for x in rules if x.action is Action.DROP)
    ]
    kept = [r for r in rows if r not in in_quarantine and r not in dropped]
    assert as_rows(result.valid) == sorted(kept, key=repr)
    assert [r[:2] for r in as_rows(result.quarantine)] == sorted(in_quarantine, key=repr)
    assert (result.quarantine is None) == (not any(x.action is Action.QUARANTINE for x in rules))
    assert (result.report.quarantined, result.report.dropped) == (len(in_quarantine), len(dropped))
    marked.unpersist()


def test_a_failing_fail_rule_stops_the_batch_naming_its_first_failing_row(spark):
    rules = (Expectation("named", "name IS NOT NULL", Action.FAIL), Expectation("big", "id > 2", Action.DROP))
    marked = exp.mark(spark.createDataFrame([(1, "a"), (3, None), (4, None)], SCHEMA), rules, "d").cache()
    with pytest.raises(ExpectationFailed, match=r"d: expectation\(s\) named failed on 2 row\(s\)") as failure:
        exp.split(marked, rules, "d")
    assert "'id': 3" in str(failure.value)
    marked.unpersist()


def test_the_first_failing_row_is_named_whatever_year_it_holds(spark):
    """A gold row may hold a date beyond year 9999, where Spark's `collect()` fails: the row is
    named with it as text, and the failure is the expectation's."""
    rules = (Expectation("small", "id < 2", Action.FAIL),)
    rows = spark.sql("SELECT 7 AS id, DATE'+10000-01-01' AS d")
    marked = exp.mark(rows, rules, "g").cache()
    with pytest.raises(ExpectationFailed, match=r"g: expectation\(s\) small failed on 1 row\(s\)") as failure:
        exp.split(marked, rules, "g")
    assert "'d': '+10000-01-01'" in str(failure.value)
    marked.unpersist()
