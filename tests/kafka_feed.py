"""Feeding a real broker the messages a file-layout run landed, the way CDC tools produce them.

The bronze table of a file-layout run holds each message byte-exact, in file order; what goes to
Kafka is exactly those bytes, so the two runs read the same messages. As a CDC tool would, each
message gets a key (the Kafka-dump's own key if it had one, else its source table, named by the
silver or quarantine event that message became) and a partition from the key's hash, so that one table's (or
one row's) messages keep their order in one partition while a topic's partitions interleave.
Messages no event names a table for (heartbeats, garbage) are spread by their position. Every
record carries a header naming where the message came from.

Records are written with Spark's own Kafka sink (`spark-sql-kafka` is on the classpath already),
in one task, in file order, so each partition's order is the file's.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_medallion.catalog import dataset_status, read_dataset
from cdc_medallion.config import SourceConf
from cdc_medallion.layers import bronze_name, silver_name
from cdc_medallion.model import bronze_ref_column

ORIGIN_HEADER = "cdc-medallion-origin"
HEADERS = "array<struct<key:string,value:binary>>"


def topic_of(source: str) -> str:
    """The topic a json-lines source's messages go to (a Kafka-dump keeps its own topics)."""
    return f"cdc.{source}"


def _tables(spark: SparkSession, storage: Path, source: str) -> DataFrame:
    """Each bronze reference's table, from the silver or quarantine events it made (or took part in)."""
    names = {d["name"] for d in dataset_status(storage)}
    events = [silver_name(source), f"{silver_name(source)}_quarantine"]
    named = None
    for dataset in (name for name in events if name in names):
        rows = read_dataset(spark, storage, dataset).where(F.col("source_table").isNotNull())
        table = F.concat_ws(
            ".", F.coalesce("source_db", F.lit("")), F.coalesce("source_schema", F.lit("")), "source_table"
        ).alias("table")
        refs = rows.select(F.col("bronze_ref").alias("ref"), table).unionByName(
            rows.select(F.explode_outer("related_refs").alias("ref"), table)
        )
        named = refs if named is None else named.unionByName(refs)
    assert named is not None, f"no silver for {source} in {storage}"
    return named.where(F.col("ref").isNotNull()).groupBy("ref").agg(F.min("table").alias("table"))


def records(spark: SparkSession, storage: Path, source: SourceConf, partitions: int) -> DataFrame:
    """A file-layout run's bronze messages of `source` as Kafka records, in landing order."""
    bronze = read_dataset(spark, storage, bronze_name(source.name)).withColumn("ref", bronze_ref_column())
    landed = bronze.join(_tables(spark, storage, source.name), "ref", "left")
    key = F.coalesce(F.col("key"), F.col("table").cast("binary"))
    position = F.col("_line").cast("long")  # every file layout numbers its lines, Kafka-dumps too
    origin = F.struct(F.lit(ORIGIN_HEADER).alias("key"), F.col("ref").cast("binary").alias("value"))
    return landed.select(
        key.alias("key"),
        F.col("value"),
        F.coalesce(F.col("topic"), F.lit(topic_of(source.name))).alias("topic"),
        F.when(key.isNotNull(), F.pmod(F.xxhash64(key), F.lit(partitions)))
        .otherwise(F.pmod(position, F.lit(partitions)))
        .cast("int")
        .alias("partition"),
        F.concat(F.coalesce("headers", F.array().cast(HEADERS)), F.array(origin)).alias("headers"),
        F.lit(source.name).alias("_source"),
        F.coalesce("_file", F.lit("")).alias("_file"),
        position.alias("_position"),
    )


def produce(rows: DataFrame, bootstrap_servers: str) -> None:
    """Write records to Kafka in one task, in their landing order (the order each partition keeps)."""
    ordered = (
        rows.repartition(1).sortWithinPartitions("_source", "_file", "_position").drop("_source", "_file", "_position")
    )
    ordered.write.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers).save()
