"""The rebuild in the driver against the rebuild in Spark: random batches of out-of-order
upserts, partial images, deletes and truncates applied through both, batch after batch, must
leave the same target and state tables. Real Spark, real Delta tables."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, IntegerType, StringType, StructField, StructType

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.runner.auto_cdc import DRIVER_SCAN_FACTOR, AutoCdcApplier, driver_may_apply
from cdc_medallion.storage.delta_rs import STATE_DIR, DeltaRsStore

SCHEMA = StructType(
    [
        StructField("id", IntegerType()),
        StructField("name", StringType()),
        StructField("city", StringType()),
        StructField("seq", IntegerType()),
        StructField("op", StringType()),
        StructField("present", ArrayType(StringType())),
    ]
)
_VALUE = st.one_of(st.none(), st.sampled_from(["a", "b", "é", ""]))
_PRESENT = st.one_of(st.none(), st.lists(st.sampled_from(["id", "name", "city"]), unique=True))
_EVENT = st.tuples(st.integers(0, 4), _VALUE, _VALUE, st.sampled_from(["U", "U", "U", "D", "T"]), _PRESENT)


@st.composite
def histories(draw: st.DrawFn) -> list[list[tuple]]:
    """Batches of events whose sequences are distinct (ties may legitimately apply in either
    order) and arrive out of order across and within batches."""
    batches = draw(st.lists(st.lists(_EVENT, min_size=1, max_size=12), min_size=1, max_size=4))
    total = sum(len(b) for b in batches)
    sequences = iter(draw(st.permutations(range(1, total + 1))))
    return [[(i, n, c, next(sequences), op, p) for i, n, c, op, p in batch] for batch in batches]


def _flow(scd: int, keys: tuple[str, ...] = ("id",), **options) -> AutoCdcFlow:
    return AutoCdcFlow(
        name="t", target="t", source="v", keys=keys, sequence_by="seq", stored_as_scd_type=scd, **options
    )


FLOWS = [
    _flow(
        scd,
        apply_as_deletes="op = 'D'",
        apply_as_truncates="op = 'T'",
        except_column_list=("op", "present"),
        track_history_column_list=tracked,
        present_columns_column="present",
    )
    for scd, tracked in [(1, None), (2, None), (2, ("name",))]
]


def _rows(store: DeltaRsStore, name: str) -> list[tuple]:
    table = store.table(name).to_pyarrow_table()
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def _apply_both(spark, root: Path, flow: AutoCdcFlow, batches: list[list[tuple]], schema: StructType):
    """Each batch through the Spark rebuild and the driver's: the same counts, and the same
    target and state tables after every batch. Returns the driver's store and last result."""
    by_spark, in_driver = DeltaRsStore(root / "spark", spark), DeltaRsStore(root / "driver", spark)
    for version, batch in enumerate(batches):
        frame = spark.createDataFrame(batch, schema)
        txns = {"t<-v": version}
        spark_result = AutoCdcApplier(by_spark, flow, {}, driver_rows=0).apply(frame, txns)
        driver_result = AutoCdcApplier(in_driver, flow, {}, driver_rows=1000).apply(frame, txns)
        assert not spark_result.in_driver and driver_result.in_driver
        assert (driver_result.upserted, driver_result.deleted, driver_result.truncates) == (
            spark_result.upserted,
            spark_result.deleted,
            spark_result.truncates,
        ), batch
        for name in ("t", f"{STATE_DIR}/t"):  # as text: NaN is not equal to itself in Python
            assert repr(_rows(in_driver, name)) == repr(_rows(by_spark, name)), (name, batch)
    return in_driver, driver_result


@settings(max_examples=14, deadline=None)
@given(batches=histories(), flow=st.sampled_from(FLOWS))
def test_driver_and_spark_rebuilds_leave_the_same_tables(spark, tmp_path_factory, batches, flow):
    _apply_both(spark, Path(tmp_path_factory.mktemp("driver")), flow, batches, SCHEMA)


_ODD_SCHEMA = StructType(
    [
        StructField("id", IntegerType()),
        StructField("score", DoubleType()),
        StructField("tags", ArrayType(StringType())),
        StructField("seq", IntegerType()),
        StructField("op", StringType()),
    ]
)
_NAN = float("nan")
_ODD_BATCHES = [
    [(1, 1.0, ["a"], 10, "U"), (2, _NAN, ["a"], 20, "U"), (3, 0.0, None, 30, "U"), (4, None, [], 40, "U")],
    # Same values again (NaN, NULL and an empty list included): no new version, nothing rewritten.
    [(1, 1.0, ["a"], 11, "U"), (2, _NAN, ["a"], 21, "U"), (4, None, [], 41, "U"), (3, -0.0, None, 31, "U")],
    # A changed list, a late event before the first, NaN to a number, a delete and a comeback.
    [(1, 1.0, ["b"], 12, "U"), (2, 5.0, ["a"], 5, "U"), (2, 2.0, ["a"], 22, "U"), (4, None, None, 42, "D")],
    [(4, None, [], 43, "U"), (1, 1.0, ["b", None], 13, "U"), (3, _NAN, None, 29, "U")],
]


@pytest.mark.parametrize("scd", [1, 2])
def test_values_are_compared_as_spark_compares_them(spark, tmp_path, scd):
    """NaN, NULL, minus zero and lists, which Arrow cannot compare, decide versions as in Spark."""
    flow = _flow(
        scd,
        apply_as_deletes="op = 'D'",
        except_column_list=("op",),
        track_history_except_column_list=("seq",) if scd == 2 else None,
    )
    in_driver, _ = _apply_both(spark, tmp_path, flow, _ODD_BATCHES, _ODD_SCHEMA)
    if scd == 2:  # NaN again and the same list again made no version; the changed list did
        versions = [r for r in _rows(in_driver, "t") if r[0] in (1, 2)]
        assert [(r[0], r[4]) for r in sorted(versions, key=lambda r: (r[0], r[4]))] == [
            (1, 10),
            (1, 12),
            (1, 13),
            (2, 5),
            (2, 20),
            (2, 22),
        ]


@pytest.mark.parametrize("scd", [1, 2])
def test_a_composite_key_touches_only_its_own_rows(spark, tmp_path, scd):
    """Keys (1, 2) and (2, 1) share every column value with the stored (1, 1) and (2, 2): the
    driver reads those too, by value per column, and must leave them out of the rebuild. A list
    column rides along: Arrow's joins refuse one beside the keys."""
    schema = StructType(
        [*(StructField(c, IntegerType()) for c in ("a", "b", "v", "seq")), StructField("tags", ArrayType(StringType()))]
    )
    flow = _flow(scd, keys=("a", "b"))
    batches = [
        [(1, 1, 10, 1, ["x"]), (2, 2, 20, 2, None)],
        [(1, 2, 30, 3, []), (2, 1, 40, 4, ["y"]), (1, 1, 11, 0, None)],
    ]
    _, driver_result = _apply_both(spark, tmp_path, flow, batches, schema)
    assert driver_result.upserted == 3  # (1, 2), (2, 1) and the late (1, 1); never (2, 2)


def test_a_batch_over_the_limit_is_left_to_spark(spark, tmp_path):
    store = DeltaRsStore(tmp_path, spark)
    flow = FLOWS[0]
    frame = spark.createDataFrame([(i, "a", "b", i, "U", None) for i in range(5)], SCHEMA)
    assert not AutoCdcApplier(store, flow, {}, driver_rows=4).apply(frame, {"t<-v": 0}).in_driver
    assert AutoCdcApplier(store, flow, {}, driver_rows=10).apply(frame.limit(3), {"t<-v": 1}).in_driver
    assert _rows(store, "t")[0][:3] == (0, "a", "b")
    assert len(_rows(store, "t")) == 5
    # Its input over the limit, a batch is counted first: few events (one table's of many) still
    # go to the driver, too many to Spark, and the table is the same either way.
    few = AutoCdcApplier(store, flow, {}, driver_rows=6, input_over_driver_rows=True)  # 3 events, 3 stored
    assert few.apply(frame.limit(3), {"t<-v": 2}).in_driver
    many = AutoCdcApplier(store, flow, {}, driver_rows=4, input_over_driver_rows=True)  # 5 events
    assert not many.apply(frame, {"t<-v": 3}).in_driver
    assert len(_rows(store, "t")) == 5


def test_null_keys_and_floating_point_sequences_are_left_to_spark(spark, tmp_path):
    """Python would group a NULL key that Spark never joins, and orders NaN unlike Spark."""
    with_null_key = spark.createDataFrame([(None, "a", "b", 1, "U", None), (1, "a", "b", 2, "U", None)], SCHEMA)
    applier = AutoCdcApplier(DeltaRsStore(tmp_path / "null", spark), FLOWS[0], {}, driver_rows=1000)
    assert not applier.apply(with_null_key, {"t<-v": 0}).in_driver
    by_double = dataclasses.replace(FLOWS[0], sequence_by=F.col("seq").cast("double"))
    frame = spark.createDataFrame([(1, "a", "b", 1, "U", None)], SCHEMA)
    applier = AutoCdcApplier(DeltaRsStore(tmp_path / "double", spark), by_double, {}, driver_rows=1000)
    assert not applier.apply(frame, {"t<-v": 0}).in_driver


def test_a_batch_known_empty_is_not_read_and_only_records_progress(spark, tmp_path):
    """A batch the caller has counted empty (a view's expectations counted it) is never computed:
    its rows would raise here. The tables are still made, and the batch's progress recorded."""
    store = DeltaRsStore(tmp_path, spark)
    for flow in FLOWS[:2]:
        unreadable = spark.createDataFrame([(1, "a", "b", 1, "U", None)], SCHEMA).withColumn(
            "name", F.raise_error(F.lit("the batch was computed")).cast("string")
        )
        result = AutoCdcApplier(store, flow, {}, driver_rows=1000).apply(unreadable, {"t<-v": 7}, known_empty=True)
        assert (result.upserted, result.deleted) == (0, 0)
        assert _rows(store, "t") == []
        assert store.txn_version("t", "t<-v") == 7
        assert store.txn_version(f"{STATE_DIR}/t", "t<-v") == 7
        # Once the tables hold rows, a batch known empty leaves them as they are.
        rows = spark.createDataFrame([(2, "c", "d", 2, "U", None)], SCHEMA)
        AutoCdcApplier(store, flow, {}, driver_rows=1000).apply(rows, {"t<-v": 8})
        before = _rows(store, "t")
        AutoCdcApplier(store, flow, {}, driver_rows=1000).apply(unreadable, {"t<-v": 9}, known_empty=True)
        assert _rows(store, "t") == before and len(before) == 1
        assert store.txn_version("t", "t<-v") == store.txn_version(f"{STATE_DIR}/t", "t<-v") == 9
        store.drop("t")
        store.drop(f"{STATE_DIR}/t")


def test_flows_making_the_same_events_of_a_batch_collect_them_once(spark, tmp_path):
    """Gold's SCD1 and SCD2 flows read one view batch and make the same events of it: the
    second takes what the first collected. A flow whose events differ collects its own."""
    store = DeltaRsStore(tmp_path, spark)
    batch = spark.createDataFrame([(1, "a", "b", 1, "U", None), (1, "c", "b", 2, "U", None)], SCHEMA)
    collected: list = []
    current, history = (dataclasses.replace(f, name=t, target=t) for f, t in ((FLOWS[0], "t"), (FLOWS[1], "h")))
    for flow in (current, history):
        applied = AutoCdcApplier(store, flow, {}, driver_rows=1000, collected_events=collected).apply(batch, {"x": 0})
        assert applied.in_driver
    assert len(collected) == 1 and collected[0][1].num_rows == 2
    assert [r[:2] for r in _rows(store, "t")] == [(1, "c")]
    assert sorted(r[:2] for r in _rows(store, "h")) == [(1, "a"), (1, "c")]
    # Deletes spelled otherwise: other events, collected again.
    other = dataclasses.replace(history, name="o", target="o", apply_as_deletes="op = 'X'")
    AutoCdcApplier(store, other, {}, driver_rows=1000, collected_events=collected).apply(batch, {"x": 0})
    assert len(collected) == 2


def test_scd2_reads_only_the_versions_new_events_can_change(spark, tmp_path):
    """A key's versions that ended before its earliest new event are not read: a long history
    leaves a batch of its latest changes in the driver, and late events, a partial image and a
    comeback after a delete still give the Spark rebuild's tables."""
    flow = FLOWS[1]
    history = [(1, f"n{i}", "c", 10 * i, "U", None) for i in range(1, 31)]  # 30 versions of key 1
    history += [(2, "a", "x", 5, "U", None), (2, None, None, 6, "D", None), (2, "b", "y", 7, "U", None)]
    late = [
        (1, "late", None, 155, "U", ["id", "name"]),  # inside version 15, city taken from it
        (2, "c", None, 8, "U", ["id", "name"]),  # after the comeback at 7
        (1, "n31", "c", 310, "U", None),
    ]
    store, _ = _apply_both(spark, tmp_path, flow, [history, late], SCHEMA)
    assert ("late", "c") in [r[1:3] for r in _rows(store, "t")]
    newest = [(1, "n32", "c", 320, "U", None)]  # two stored versions are open at 320 or later
    applied = AutoCdcApplier(store, flow, {}, driver_rows=4).apply(spark.createDataFrame(newest, SCHEMA), {"t<-v": 2})
    assert applied.in_driver
    versions = [r for r in _rows(store, "t") if r[0] == 1]
    assert len(versions) == 33 and sum(r[-1] is None for r in versions) == 1


def test_a_batch_whose_keys_span_a_big_target_is_left_to_spark(spark, tmp_path):
    """Finding a batch's stored rows means scanning the target's files within its key range; past
    DRIVER_SCAN_FACTOR times the limit that scan is Spark's, though the rows found would be few."""
    store = DeltaRsStore(tmp_path, spark)
    flow = FLOWS[0]
    loaded = spark.createDataFrame([(i, "a", "b", i, "U", None) for i in range(60)], SCHEMA)
    AutoCdcApplier(store, flow, {}, driver_rows=1000).apply(loaded, {"t<-v": 0})
    ends = spark.createDataFrame([(0, "z", "b", 100, "U", None), (59, "z", "b", 101, "U", None)], SCHEMA)
    assert DRIVER_SCAN_FACTOR * 5 < 60
    assert not AutoCdcApplier(store, flow, {}, driver_rows=5).apply(ends, {"t<-v": 1}).in_driver
    assert [r[:2] for r in _rows(store, "t") if r[1] == "z"] == [(0, "z"), (59, "z")]
    again = spark.createDataFrame([(0, "y", "b", 102, "U", None), (59, "y", "b", 103, "U", None)], SCHEMA)
    assert AutoCdcApplier(store, flow, {}, driver_rows=6).apply(again, {"t<-v": 2}).in_driver  # 60 <= 10 x 6
    assert [r[:2] for r in _rows(store, "t") if r[1] == "y"] == [(0, "y"), (59, "y")]


def test_whether_a_batch_tries_the_driver_is_known_before_it_is_collected(spark, tmp_path):
    """From the target's row count in its log: past DRIVER_SCAN_FACTOR times the limit a batch
    goes to Spark from the start, unless it has at most limit / DRIVER_SCAN_FACTOR rows."""
    store = DeltaRsStore(tmp_path, spark)
    loaded = spark.createDataFrame([(i, "a", "b", i, "U", None) for i in range(600)], SCHEMA)
    AutoCdcApplier(store, FLOWS[0], {}, driver_rows=0).apply(loaded, {"t<-v": 0})
    assert DRIVER_SCAN_FACTOR == 10  # the numbers below are chosen around it
    assert not driver_may_apply(store, "t", 6, 50)  # 600 rows > 10 x 50, and 6 rows > 50 / 10
    assert not driver_may_apply(store, "t", None, 50)  # new rows unknown: the target decides
    assert driver_may_apply(store, "t", 5, 50)  # a batch of 50 / 10 rows is still tried
    assert driver_may_apply(store, "t", 10**6, 60)  # 600 rows <= 10 x 60: the driver may scan it
    assert driver_may_apply(store, "absent", 10**6, 1)  # no target yet: nothing to scan
    assert not driver_may_apply(store, "t", 0, 0)  # a limit of 0 means always Spark
