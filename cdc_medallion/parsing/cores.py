"""How many partitions a parse runs on: every core of the session, told by a setting.

A landed batch is often one partition; a parse that stayed on it would leave the other cores
idle. The core count is a session setting (`PARSE_PARTITIONS_CONF`, set by `spark.py`), because a
query function on Spark Connect (Databricks serverless) can ask the JVM nothing.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

PARSE_PARTITIONS_CONF = "cdc_medallion.parse.partitions"


def spread_over_cores(bronze: DataFrame) -> DataFrame:
    """Bronze spread over every core before parsing.

    A landed batch is one Parquet file of one row group, which Spark reads as one partition, so
    parsing, the costliest step of silver, would run on one core while the others wait; a
    round-robin shuffle of the raw messages costs less than it frees. A stream's partitions are
    not known until each batch runs, so it is always spread, and so is a batch: how many
    partitions a DataFrame has is a question for the JVM (`rdd`), which Spark Connect (Databricks
    serverless) does not answer. The core count is a setting for the same reason:
    `sparkContext.defaultParallelism` does not exist there.
    """
    cores = parse_partitions(bronze.sparkSession)
    return bronze.repartition(cores) if cores > 1 else bronze


def parse_partitions(spark: SparkSession) -> int:
    """`PARSE_PARTITIONS_CONF` of the session: 1 (as it is) when unset or not a number."""
    setting = spark.conf.get(PARSE_PARTITIONS_CONF, None)
    return int(setting) if setting and setting.strip().isdigit() else 1
