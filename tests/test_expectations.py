"""Expectations split in the driver (Arrow) against the split by Spark: the same marks, random
rows and rules of every action, must give the same counts, the same kept rows and the same
quarantined rows, and fail the same way. Real Spark."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from cdc_medallion.declarative.definitions import Action, Expectation
from cdc_medallion.errors import ExpectationFailed
from cdc_medallion.runner import expectations as exp

SCHEMA = StructType([StructField("id", IntegerType()), StructField("name", StringType())])
# Constraints that pass, fail, or evaluate to NULL (an unknown counts as failed) on some rows.
CONSTRAINTS = ["name IS NOT NULL", "id > 2", "length(name) > 1", "id % 2 = 0", "name <> 'b'"]
_ROW = st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.one_of(st.none(), st.sampled_from(["a", "b", "cc", ""])))
_RULE = st.tuples(st.sampled_from(CONSTRAINTS), st.sampled_from([Action.WARN, Action.DROP, Action.QUARANTINE]))


def both_splits(spark, rows: list[tuple], rules: tuple[Expectation, ...]) -> tuple[exp.Split, exp.Split]:
    marked = exp.mark(spark.createDataFrame(rows, SCHEMA), rules, "d").cache()
    return exp.split(marked, rules, "d"), exp.split_arrow(marked.toArrow(), rules, "d")


def as_rows(rows) -> list[tuple]:
    if rows is None:
        return []
    dicts = rows.to_pylist() if hasattr(rows, "to_pylist") else [r.asDict() for r in rows.collect()]
    return sorted((tuple(d.values()) for d in dicts), key=repr)


@settings(max_examples=15, deadline=None)
@given(rows=st.lists(_ROW, max_size=12), chosen=st.lists(_RULE, max_size=4, unique_by=lambda r: r[0]))
def test_split_in_the_driver_equals_the_split_by_spark(spark, rows, chosen):
    rules = tuple(Expectation(f"rule '{i}'", constraint, action) for i, (constraint, action) in enumerate(chosen))
    by_spark, in_driver = both_splits(spark, rows, rules)
    assert in_driver.report == by_spark.report
    assert as_rows(in_driver.valid) == as_rows(by_spark.valid)
    assert as_rows(in_driver.quarantine) == as_rows(by_spark.quarantine)
    assert (in_driver.quarantine is None) == (by_spark.quarantine is None)
    assert in_driver.report.rows == len(rows)


def test_a_failing_fail_rule_raises_in_the_driver_as_in_spark(spark):
    rules = (Expectation("named", "name IS NOT NULL", Action.FAIL), Expectation("big", "id > 2", Action.DROP))
    marked = exp.mark(spark.createDataFrame([(1, "a"), (3, None), (4, None)], SCHEMA), rules, "d").cache()
    with pytest.raises(ExpectationFailed, match=r"d: expectation\(s\) named failed on 2 row\(s\)") as by_spark:
        exp.split(marked, rules, "d")
    with pytest.raises(ExpectationFailed, match=r"d: expectation\(s\) named failed on 2 row\(s\)") as in_driver:
        exp.split_arrow(marked.toArrow(), rules, "d")
    assert "'id': 3" in str(by_spark.value) and "'id': 3" in str(in_driver.value)  # the first failing row
