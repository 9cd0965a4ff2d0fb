"""One shared local Spark session, configured for this machine (DESIGN §3)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from cdc_medallion.errors import ConfigError

LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


def get_spark(app_name: str = "cdc-medallion") -> SparkSession:
    """Return the active session or start a local one.

    PYSPARK_PYTHON must point at this interpreter or Python workers use the system one;
    SPARK_LOCAL_IP avoids a hostname warning. Shuffle partitions are small because runs are
    micro-batches on two cores, not cluster jobs. A 1.5 GiB heap suffices because batches are
    bounded in bytes and rows (`max_bytes_per_batch`); a bigger one only made the JVM's RSS grow
    to it, at the same speed. The serial collector and two malloc arenas keep the JVM's RSS near
    its heap: G1's concurrent threads and per-thread arenas added about 0.3 GiB on two cores, at
    no gain in speed (bench, the k = 100k increment into 1M rows: JVM 1.9 against 2.2 GiB,
    28 s both). DataFrame debugging is off: with it, every Column a
    Python expression builds also records its Python call site in the JVM, about five more
    round trips each, and a gold flow builds hundreds (bench, 20 tables: gold 53 -> 47 s).
    CDC_MEDALLION_SPARK_CONF adds settings ("spark.a=1 spark.b=2").
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")  # read by the JVM's C library when it starts
    builder = (
        SparkSession.builder.appName(app_name)
        .master(os.environ.get("CDC_MEDALLION_SPARK_MASTER", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{LOG4J} -XX:+UseSerialGC")
        .config("spark.sql.shuffle.partitions", os.environ.get("CDC_MEDALLION_SHUFFLE_PARTITIONS", "4"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", os.environ.get("CDC_MEDALLION_DRIVER_MEMORY", "1536m"))
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .config("spark.sql.warehouse.dir", os.path.join(os.environ.get("TMPDIR", "/tmp"), "cdc-medallion-warehouse"))
    )
    for setting in os.environ.get("CDC_MEDALLION_SPARK_CONF", "").split():
        key, sep, value = setting.partition("=")
        if not sep or not key.startswith("spark."):
            raise ConfigError(f"CDC_MEDALLION_SPARK_CONF: {setting!r} is not spark.<key>=<value>")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
