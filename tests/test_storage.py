"""Storage: exactly-once commits, schema checks, one run at a time, names that cannot escape."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_medallion.errors import ConcurrentRunError, IdentifierError, SchemaMismatch
from cdc_medallion.runner.local import StorageLock
from cdc_medallion.storage.delta_rs import DeltaRsStore
from cdc_medallion.storage.delta_spark import delta_spark_status
from tests.helpers import datasets, ingest, parse, read_rows

SCHEMA = StructType([StructField("id", LongType()), StructField("v", StringType())])


def test_append_records_progress_atomically_and_checks_schema(spark, storage):
    store = DeltaRsStore(storage, spark)
    rows = store.append("t", spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA), {"flow<-src": 3})
    assert rows == 2 and store.txn_version("t", "flow<-src") == 3
    assert store.count("t") == 2
    other = StructType([StructField("id", StringType()), StructField("v", StringType())])
    with pytest.raises(SchemaMismatch, match="batch for t has columns"):
        store.append("t", spark.createDataFrame([("x", "y")], other), {"flow<-src": 4})
    assert store.count("t") == 2 and store.txn_version("t", "flow<-src") == 3  # nothing committed
    store.commit_progress("t", {"flow<-src": 5})
    assert store.txn_version("t", "flow<-src") == 5 and store.count("t") == 2


def test_a_backlog_is_read_in_steps_bounded_by_rows_as_well_as_bytes(spark, storage):
    store = DeltaRsStore(storage, spark)
    for version, count in enumerate([3, 4, 5, 1]):  # versions 0..3 (the first append creates the table)
        batch = spark.createDataFrame([(i, "x") for i in range(count)], SCHEMA)
        store.append("t", batch, {"flow<-src": version})
    last = store.version("t")
    assert last is not None
    whole = store.bounded_range("t", None, last, max_bytes=10**9)
    assert whole[:2] == (last, 13)  # bytes alone: all at once
    files = store.table("t").get_add_actions(flatten=True).column("size_bytes").to_pylist()
    assert whole.size == sum(files)  # and the bytes of their files, from the commits too
    assert store.bounded_range("t", None, last, max_bytes=10**9, max_rows=7) == store.bounded_range(
        "t", None, last, max_bytes=10**9, max_rows=8
    )
    first, first_rows, _ = store.bounded_range("t", None, last, max_bytes=10**9, max_rows=7)
    second, second_rows, _ = store.bounded_range("t", first, last, max_bytes=10**9, max_rows=7)
    assert (first_rows, second_rows) == (7, 6)  # the rows each step holds, from the commits' stats
    assert store.read_appended("t", None, first).count() == 7  # 3 + 4: a fifth row more would exceed 7
    assert store.read_appended("t", first, second).count() == 6  # 5 + 1
    created = first - 2  # the empty commit that created the table
    assert store.bounded_range("t", created, last, max_bytes=10**9, max_rows=1)[:2] == (created + 1, 3)  # one at least


def test_reads_with_nothing_new_can_be_joined_with_each_other(spark, storage):
    """Stream reads that find nothing new are empty frames of the table's schema. A query may
    join two of them (two streams, or one stream with itself) as it joins two tables."""
    store = DeltaRsStore(storage, spark)
    store.append("t", spark.createDataFrame([(1, "a")], SCHEMA), {"flow<-src": 0})
    left, right = store.empty("t"), store.empty("t")
    assert left.schema == right.schema == store.read("t").schema
    joined = left.join(right, left["id"] == right["id"]).select(left["v"], right["v"].alias("w"))
    assert joined.columns == ["v", "w"] and joined.count() == 0
    assert store.read_appended("t", store.version("t"), store.version("t")).count() == 0


def test_dataset_names_cannot_leave_the_storage_root(spark, storage):
    store = DeltaRsStore(storage, spark)
    for hostile in ("../../x", "t; DROP TABLE y", "a/b", "", "_system/../../x"):
        with pytest.raises(IdentifierError):
            store.path(hostile)


def test_hostile_names_in_messages_are_quarantined(spark, tmp_path):
    def change(table: str, column: str = "id") -> str:
        source = {"connector": "postgresql", "table": table, "lsn": 1}
        return json.dumps({"op": "c", "before": None, "after": {column: 1}, "source": source})

    [event] = parse("debezium-json", change("../../x"))
    assert event["kind"] == "error" and "unsafe table name '../../x'" in event["error"]
    [event] = parse("debezium-json", change("ok", column="a; DROP TABLE y"))
    assert event["kind"] == "error" and "unsafe column name" in event["error"]

    source = tmp_path / "in.jsonl"
    source.write_text("\n".join([change("../../x"), change("t; DROP TABLE y"), change("fine")]) + "\n")
    storage = tmp_path / "storage"
    ingest(spark, "debezium-json", source, storage, keys={"fine": "id"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "storage"]  # nothing outside the root
    assert len(read_rows(spark, storage, "silver_debezium_json_quarantine")) == 2
    assert "gold_fine" in datasets(storage)


def test_a_second_run_on_the_same_storage_fails_clearly(storage):
    storage.mkdir(parents=True)
    with StorageLock(storage), pytest.raises(ConcurrentRunError, match=r"is in use by pid \d+"), StorageLock(storage):
        pass
    with StorageLock(storage):  # released: the next run proceeds
        pass


def test_delta_spark_backend(spark):
    available, reason = delta_spark_status(spark)
    if not available:
        pytest.skip(reason)
    spark.range(3).write.format("delta").save("/tmp/cdc-medallion-delta-spark-probe")
    assert spark.read.format("delta").load("/tmp/cdc-medallion-delta-spark-probe").count() == 3


def test_identifier_edges():
    from cdc_medallion.config import TableConf
    from cdc_medallion.identifiers import is_safe_identifier

    assert not is_safe_identifier("a\n") and not is_safe_identifier("a.b") and not is_safe_identifier("a`b")
    assert is_safe_identifier("#alibaba_rds_row_id#") and is_safe_identifier("T$1") and is_safe_identifier("Käse")
    assert TableConf(source="s", table="Käse$Tab#1", keys=("id",)).gold_name == "gold_k_se_tab_1"
