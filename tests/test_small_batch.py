"""Collecting a small batch into the driver: within the limit it is kept, over it it is left to
Spark, unless the caller vouched for it (`few`), when rows already collected are kept; a batch
expected to be big (`many`) is counted before it is collected. And an
Arrow append of no rows (a flow whose batch had nothing for its table) records the batch's
progress without a data file, so it is not read again. Real Spark, real Delta."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from cdc_medallion.runner.small_batch import collect_small
from cdc_medallion.storage.delta_rs import DeltaRsStore

SCHEMA = StructType([StructField("id", IntegerType())])


def test_collect_small_keeps_what_is_within_the_limit_or_vouched_for(spark):
    rows = spark.createDataFrame([(i,) for i in range(5)], SCHEMA)
    assert collect_small(rows, 5).column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert collect_small(rows, 4) is None  # over the limit: Spark's
    assert collect_small(rows, 4, few=True).num_rows == 5  # collected already: kept, not computed again
    assert collect_small(rows, 0) is None and collect_small(rows, 0, few=True) is None  # 0: never
    # Expected to be many, they are counted first, and collected only when within the limit.
    assert collect_small(rows, 5, many=True).column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert collect_small(rows, 4, many=True) is None
    # Over the limit, such a batch is only counted: no row of it reaches the driver.
    unshippable = rows.withColumn("shipped", F.raise_error(F.lit("a row was collected")))
    assert collect_small(unshippable, 4, many=True) is None


def test_an_empty_arrow_append_commits_progress_and_no_file(spark, storage):
    store = DeltaRsStore(storage, spark)
    assert store.append_arrow("t", pa.table({"id": pa.array([1], pa.int32())}), SCHEMA, {"f<-s": 0}) == 1
    assert store.append_arrow("t", pa.table({"id": pa.array([], pa.int32())}), SCHEMA, {"f<-s": 1}) == 0
    assert store.txn_version("t", "f<-s") == 1
    assert len(store.table("t").file_uris()) == 1
