"""Partial images filled before a Databricks auto CDC flow (`declarative/partial_images.py`):
every value crosses to Python and back unchanged, absent columns are taken from the key's image
before, explicit NULLs stay NULL, and a stream keeps each key's image across micro-batches."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.declarative.partial_images import fill_absent_columns
from cdc_medallion.errors import GraphError

FLOW = AutoCdcFlow(
    name="gold_t",
    target="gold_t",
    source="changes_t",
    keys=("id",),
    sequence_by="seq",
    apply_as_deletes="op = 'DELETE'",
    apply_as_truncates="op = 'TRUNCATE'",
    except_column_list=("seq", "op", "present"),
    present_columns_column="present",
)
SCHEMA = "id INT, name STRING, email STRING, score BIGINT, seq STRING, op STRING, present ARRAY<STRING>"


def _by_seq(rows):
    return [(r["seq"], r["id"], r["name"], r["email"], r["score"]) for r in sorted(rows, key=lambda r: r["seq"])]


def test_every_type_crosses_to_python_and_back_unchanged(spark):
    """Values the filler only carries (whole images) come out as they went in, bit for bit."""
    schema = (
        "id BIGINT, big BIGINT, d DECIMAL(38,10), f DOUBLE, r FLOAT, ts TIMESTAMP, ntz TIMESTAMP_NTZ, day DATE, "
        "b BINARY, flag BOOLEAN, s STRING, tags ARRAY<STRUCT<t: TIMESTAMP, x: DECIMAL(20,3)>>, m MAP<STRING, DOUBLE>, "
        "seq BIGINT, op STRING, present ARRAY<STRING>"
    )
    ts = dt.datetime(2024, 10, 27, 2, 30, 0, 123456)
    rows = [
        (1, 2**63 - 1, Decimal("1234567890123456789012345678.0123456789"), float("nan"), 1.5, ts,
         dt.datetime(1, 1, 1, 0, 0, 0, 1), dt.date(1, 1, 1), b"\x00\xff", True, "a\nb",
         [(ts, Decimal("1.001"))], {"k": -0.0}, 1, "INSERT", None),
        (2, 9007199254740993, None, 1e-310, None, dt.datetime(9999, 12, 31, 23, 59, 59, 999999), None, None,
         b"", False, "", [], {}, 2, "INSERT", None),
        (3, None, None, None, None, None, None, None, None, None, None, None, None, 3, "INSERT", None),
    ]  # fmt: skip
    source = spark.createDataFrame(rows, schema)
    flow = AutoCdcFlow(
        name="f", target="t", source="s", keys=("id",), sequence_by="seq", present_columns_column="present"
    )
    filled = fill_absent_columns(source, flow)
    assert filled.schema.simpleString() == source.schema.simpleString()
    key = lambda r: r["id"]  # noqa: E731
    expected, got = sorted(source.collect(), key=key), sorted(filled.collect(), key=key)
    # NaN is not equal to itself: compare it apart, everything else as it is
    assert str(got[0]["f"]) == "nan" and got[0]["m"] == {"k": -0.0} and str(got[0]["m"]["k"]) == "-0.0"
    assert [r.asDict() | {"f": None} for r in got] == [r.asDict() | {"f": None} for r in expected]
    assert got[1]["f"] == 1e-310


def test_absent_columns_are_taken_from_the_image_before_explicit_nulls_stay(spark):
    events = [
        # landed out of order: the sequence orders them
        (1, None, None, 20, "s03", "UPDATE", ["id", "score"]),  # name, email absent: kept from s02
        (1, "Ann", "a@x", 10, "s01", "INSERT", None),  # a whole image
        (1, "Anne", None, None, "s02", "UPDATE", ["id", "name", "email"]),  # email := NULL; score absent
        (1, None, None, None, "s04", "DELETE", None),
        (1, None, "new@x", None, "s05", "INSERT", ["id", "email"]),  # after a delete: nothing to keep
        (None, None, None, None, "s06", "TRUNCATE", None),  # passes as it is
        (2, None, None, 7, None, "UPDATE", ["id", "score"]),  # no sequence: passes as it is
        (2, "Bob", "b@x", 1, "s01", "INSERT", None),
        (2, None, "b2@x", None, "s02", "UPDATE", ["id", "email"]),
    ]
    filled = fill_absent_columns(spark.createDataFrame(events, SCHEMA), FLOW)
    rows = filled.collect()
    assert next(r for r in rows if r["seq"] is None)["name"] is None
    assert _by_seq([r for r in rows if r["seq"] is not None]) == [
        ("s01", 1, "Ann", "a@x", 10),
        ("s01", 2, "Bob", "b@x", 1),
        ("s02", 1, "Anne", None, 10),
        ("s02", 2, "Bob", "b2@x", 1),
        ("s03", 1, "Anne", None, 20),
        ("s04", 1, None, None, None),
        ("s05", 1, None, "new@x", None),
        ("s06", None, None, None, None),
    ]
    assert sorted(map(tuple, filled.select("seq", "present").where("id = 1").collect()))[1] == (
        "s02",
        ["id", "name", "email"],
    )  # the present-columns column is kept as the message had it


def test_a_stream_keeps_each_keys_image_across_micro_batches(spark, tmp_path: Path):
    folder, checkpoint = tmp_path / "changes", tmp_path / "checkpoint"
    schema = spark.createDataFrame([], SCHEMA).schema
    seen: list = []

    def one_batch(rows):
        spark.createDataFrame(rows, schema).write.mode("append").parquet(str(folder))
        stream = fill_absent_columns(spark.readStream.schema(schema).parquet(str(folder)), FLOW)
        query = (
            stream.writeStream.foreachBatch(lambda batch, _id: seen.extend(batch.collect()))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    one_batch([(1, "Ann", "a@x", 10, "s01", "INSERT", None), (2, "Bob", "b@x", 1, "s01", "INSERT", None)])
    one_batch([(1, None, None, 11, "s02", "UPDATE", ["id", "score"]), (2, None, None, None, "s02", "DELETE", None)])
    one_batch(
        [
            (2, None, "z@x", None, "s03", "INSERT", ["id", "email"]),
            (1, None, "c@x", None, "s03", "UPDATE", ["id", "email"]),
        ]
    )
    assert _by_seq(seen) == [
        ("s01", 1, "Ann", "a@x", 10),
        ("s01", 2, "Bob", "b@x", 1),
        ("s02", 1, "Ann", "a@x", 11),
        ("s02", 2, None, None, None),
        ("s03", 1, "Ann", "c@x", 11),
        ("s03", 2, None, "z@x", None),  # the key was deleted: nothing carried over
    ]


def test_numbers_and_times_order_as_spark_orders_them(spark):
    """A numeric sequence orders by value, not as text ("10" after "9")."""
    flow = AutoCdcFlow(
        name="f", target="t", source="s", keys=("id",), sequence_by="n", present_columns_column="present"
    )
    rows = [(1, "late", 10, None), (1, None, 9, ["id", "n"])]
    filled = fill_absent_columns(spark.createDataFrame(rows, "id INT, v STRING, n BIGINT, present ARRAY<STRING>"), flow)
    assert {r["n"]: r["v"] for r in filled.collect()} == {9: None, 10: "late"}  # 9 is first: nothing to carry
    struct = AutoCdcFlow(
        name="f",
        target="t",
        source="s",
        keys=("id",),
        sequence_by=F.struct("ts", "n"),
        present_columns_column="present",
    )
    rows = [(1, "b", dt.datetime(2024, 1, 2), 1, None), (1, None, dt.datetime(2024, 1, 2), 2, ["id", "ts", "n"])]
    source = spark.createDataFrame(rows, "id INT, v STRING, ts TIMESTAMP, n INT, present ARRAY<STRING>")
    assert {r["n"]: r["v"] for r in fill_absent_columns(source, struct).collect()} == {1: "b", 2: "b"}


def test_a_source_without_the_present_columns_column_is_named(spark):
    source = spark.createDataFrame([(1, "s1")], "id INT, seq STRING")
    with pytest.raises(GraphError, match="no present-columns column 'present'"):
        fill_absent_columns(source, FLOW)
