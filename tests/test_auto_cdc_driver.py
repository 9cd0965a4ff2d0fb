"""The rebuild in the driver against the rebuild in Spark: random batches of out-of-order
upserts, partial images, deletes and truncates applied through both, batch after batch, must
leave the same target and state tables. Real Spark, real Delta tables."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, StringType, StructField, StructType

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.runner.auto_cdc import AutoCdcApplier
from cdc_medallion.runner.auto_cdc_driver import present_sets
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
    batches = draw(st.lists(st.lists(_EVENT, min_size=1, max_size=12), min_size=1, max_size=3))
    total = sum(len(b) for b in batches)
    sequences = iter(draw(st.permutations(range(1, total + 1))))
    return [[(i, n, c, next(sequences), op, p) for i, n, c, op, p in batch] for batch in batches]


FLOWS = [
    AutoCdcFlow(
        name="t",
        target="t",
        source="v",
        keys=("id",),
        sequence_by="seq",
        apply_as_deletes="op = 'D'",
        apply_as_truncates="op = 'T'",
        except_column_list=("op", "present"),
        stored_as_scd_type=scd,
        track_history_column_list=tracked,
        present_columns_column="present",
    )
    for scd, tracked in [(1, None), (2, None), (2, ("name",))]
]


def _rows(store: DeltaRsStore, name: str) -> list[tuple]:
    table = store.table(name).to_pyarrow_table()
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


@settings(max_examples=6, deadline=None)
@given(batches=histories(), flow=st.sampled_from(FLOWS))
def test_driver_and_spark_rebuilds_leave_the_same_tables(spark, tmp_path_factory, batches, flow):
    root = Path(tmp_path_factory.mktemp("driver"))
    by_spark, in_driver = DeltaRsStore(root / "spark", spark), DeltaRsStore(root / "driver", spark)
    for version, batch in enumerate(batches):
        frame = spark.createDataFrame(batch, SCHEMA)
        txns = {"t<-v": version}
        spark_result = AutoCdcApplier(by_spark, flow, {}, driver_rows=0).apply(frame, txns)
        driver_result = AutoCdcApplier(in_driver, flow, {}, driver_rows=1000).apply(frame, txns)
        assert not spark_result.in_driver and driver_result.in_driver
        assert (driver_result.upserted, driver_result.deleted, driver_result.truncates) == (
            spark_result.upserted,
            spark_result.deleted,
            spark_result.truncates,
        ), batch
        for name in ("t", f"{STATE_DIR}/t"):
            assert _rows(in_driver, name) == _rows(by_spark, name), (name, batch)


_WHOLE = st.sampled_from([None, ["id", "name", "city", "seq"], ["seq", "city", "name"]])
_WHOLE_EVENT = st.tuples(st.integers(0, 4), _VALUE, _VALUE, st.sampled_from(["U", "U", "U", "D", "T"]), _WHOLE)


@st.composite
def whole_row_histories(draw: st.DrawFn) -> list[list[tuple]]:
    """`histories` whose events all carry whole rows; a truncate sits alone in its batch."""
    batches = draw(st.lists(st.lists(_WHOLE_EVENT, min_size=1, max_size=12), min_size=2, max_size=4))
    batches = [[e for e in b if e[3] != "T"] or b[:1] for b in batches]
    total = sum(len(b) for b in batches)
    sequences = iter(draw(st.permutations(range(1, total + 1))))
    return [[(i, n, c, next(sequences), op, p) for i, n, c, op, p in batch] for batch in batches]


@settings(max_examples=8, deadline=None)
@given(batches=whole_row_histories())
def test_scd1_of_whole_rows_is_picked_with_arrow_as_spark_picks_it(spark, tmp_path_factory, batches):
    """SCD1 batches of whole rows skip the Python loop: late events against stored rows,
    tombstones and earlier truncates must still give Spark's tables."""
    picked = []
    original = AutoCdcApplier._scd1_of_whole_rows

    def counted(self, *args, **kwargs):
        picked.append(1)
        return original(self, *args, **kwargs)

    root = Path(tmp_path_factory.mktemp("whole"))
    by_spark, in_driver = DeltaRsStore(root / "spark", spark), DeltaRsStore(root / "driver", spark)
    AutoCdcApplier._scd1_of_whole_rows = counted
    try:
        for version, batch in enumerate(batches):
            frame = spark.createDataFrame(batch, SCHEMA)
            txns = {"t<-v": version}
            spark_result = AutoCdcApplier(by_spark, FLOWS[0], {}, driver_rows=0).apply(frame, txns)
            driver_result = AutoCdcApplier(in_driver, FLOWS[0], {}, driver_rows=1000).apply(frame, txns)
            assert driver_result.in_driver
            assert (driver_result.upserted, driver_result.deleted) == (spark_result.upserted, spark_result.deleted)
            for name in ("t", f"{STATE_DIR}/t"):
                assert _rows(in_driver, name) == _rows(by_spark, name), (name, batch)
    finally:
        AutoCdcApplier._scd1_of_whole_rows = original
    truncating = sum(any(e[4] == "T" for e in b) for b in batches)
    assert len(picked) == len(batches) - truncating


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


@settings(max_examples=80, deadline=None)
@given(
    lists=st.lists(st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c"]), max_size=3)), max_size=20),
    cut=st.integers(0, 20),
)
def test_present_sets_match_the_lists_they_come_from(lists, cut):
    """Chunks, slices and NULL lists: each event gets its own set, none borrowed from a neighbour."""
    array = pa.array(lists, pa.list_(pa.string()))
    column = pa.chunked_array([array.slice(0, cut), array.slice(cut)], pa.list_(pa.string()))
    expected = [None if v is None else frozenset(v) for v in lists]
    assert present_sets(column) == expected


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
