"""Bronze from Kafka (Databricks, or anywhere the Spark Kafka connector is on the classpath)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_medallion.config import SourceConf
from cdc_medallion.errors import ConfigError

_PASSTHROUGH = ("startingOffsets", "subscribe", "subscribePattern", "maxOffsetsPerTrigger", "failOnDataLoss")


def kafka_stream(source: SourceConf) -> DataFrame:
    """Kafka columns land as they are, plus the same lineage columns the file sources fill."""
    settings = dict(source.kafka)
    if "bootstrap_servers" not in settings:
        raise ConfigError(f"source {source.name!r}: kafka.bootstrap_servers is required to read from Kafka")
    reader = SparkSession.active().readStream.format("kafka")
    reader = reader.option("kafka.bootstrap.servers", settings.pop("bootstrap_servers"))
    for key in _PASSTHROUGH:
        if key in settings:
            reader = reader.option(key, str(settings.pop(key)))
    for key, value in settings.items():
        reader = reader.option(key if key.startswith("kafka.") else f"kafka.{key}", str(value))
    return (
        reader.option("includeHeaders", "true")
        .load()
        .select(
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            "timestamp",
            F.col("headers").cast("array<struct<key:string,value:binary>>").alias("headers"),
            F.lit(source.name).alias("_source"),
            F.lit(None).cast("string").alias("_file"),
            F.lit(None).cast("bigint").alias("_line"),
            F.current_timestamp().alias("_ingest_ts"),
            F.lit(None).cast("string").alias("_landing_error"),
        )
    )
