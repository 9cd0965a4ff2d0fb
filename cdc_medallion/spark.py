"""One shared Spark session with Delta Lake, Spark's Kafka source and Avro functions.

The runner runs on whatever master `CDC_MEDALLION_SPARK_MASTER` names: `local[2]` by default,
or a cluster (`spark://host:7077`, `k8s://...`, `yarn`), whose executors then need the storage
root on a shared file system or an object store.
"""

from __future__ import annotations

import logging
import os
import re
import sys

from pyspark.sql import SparkSession

from cdc_medallion.class_archive import java_options as driver_class_archive
from cdc_medallion.errors import ConfigError
from cdc_medallion.jars import cached_jars, packages

LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
DEFAULT_MASTER = "local[2]"
DEFAULT_DRIVER_MEMORY = "1536m"
GENERATED_CLASSES_KEPT = 5000
YOUNG_GENERATION_SHARE = 3  # the young generation is a third of the driver's heap
MEMORY_UNITS = {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}


def spark_master() -> str:
    return os.environ.get("CDC_MEDALLION_SPARK_MASTER", DEFAULT_MASTER)


def driver_memory() -> str:
    return os.environ.get("CDC_MEDALLION_DRIVER_MEMORY", DEFAULT_DRIVER_MEMORY)


def memory_bytes(memory: str) -> int:
    """Bytes of a JVM memory setting as Spark reads `spark.driver.memory` ("1536m", "2g";
    a bare number is MiB)."""
    match = re.fullmatch(r"(\d+)(?:([kmgtp])b?|(b))?", memory.strip().lower())
    if match is None:
        raise ConfigError(f"CDC_MEDALLION_DRIVER_MEMORY: {memory!r} is not a size such as 1536m or 2g")
    return int(match.group(1)) * MEMORY_UNITS[match.group(2) or match.group(3) or "m"]


def young_generation_option(memory: str) -> str:
    """The serial collector's young generation, sized to the heap (see `get_spark`)."""
    return f"-Xmn{memory_bytes(memory) // YOUNG_GENERATION_SHARE // 2**20}m"


def get_spark(app_name: str = "cdc-medallion") -> SparkSession:
    """Return the active session or start one.

    Why each setting:
    - PYSPARK_PYTHON is this interpreter, or Python workers would use the system one; binding to
      127.0.0.1 avoids a hostname warning.
    - The jars come from the folder `make setup` filled (`jars.py`), else Spark fetches them.
    - Small shuffle and Delta snapshot partition counts, and no adaptive execution: updates are
      micro-batches on a few cores. Every idempotent Delta write reads the table's log state
      (to find the writing query's last batch), a Spark job of its own; with Delta's default of
      50 partitions and adaptive execution's extra stages, that job was most of a small write.
    - The driver's heap is bounded (batches are bounded in rows and bytes); the serial collector
      and two malloc arenas keep the JVM's resident memory near its heap. Its young generation is
      a third of the heap from the start: by default it is a third of the heap in use, which
      starts at a sixty-fourth of the RAM and grows only as old objects fill it, and the collector
      then stopped the driver about 320 times in a ten-format update, 8% of its time
      (bench/HISTORY.md, 2026-11-28 evening).
    - Delta does not enumerate a table's files in each commit's checksum (`allFilesInCrc`): open
      source Delta never reads that list back, and a table's first commit built it by planning
      and running a query over the empty table, about a fifth of a create's time.
    - DataFrame debugging off: with it each Python Column records its call site in the JVM,
      several round trips per expression.
    - Local tables commit through Delta's `LocalLogStore` and streaming checkpoints through the
      `FileSystem`-based manager: the `FileContext` renames of the defaults fork `stat` on every
      commit and checkpoint file here, about 15% of a small update's CPU (bench/HISTORY.md,
      2026-11-27 night). Both rely on one writer process per storage, which `StorageLock`
      holds, and on rename being atomic, which it is on a local disk.
    - RocksDB holds the state of the stateful format parsers (held messages), off the heap.
    - Room for 5,000 generated classes (Spark's default keeps 100): each table's plans compile
      their own projections, and with more tables than the cache holds every micro-batch compiled
      them again (bench/HISTORY.md, 2026-11-28 afternoon).
    - The driver maps the class archive `make setup` trained (`class_archive.py`), when there is one.
    - Parquet timestamps as INT64 microseconds (Delta's writer takes Spark's setting), not Spark's
      default INT96: readers that follow the Parquet spec (delta-rs for `status`, `show` and the
      report; pyarrow) read INT96 as nanoseconds, which hold only years 1677-2262, and showed
      1000-01-01 as 2169-02-08. Files an older session wrote in INT96 are read as microseconds
      too (`storage/delta_rs.py`).
    - CDC_MEDALLION_SPARK_CONF adds settings ("spark.a=1 spark.b=2"), CDC_MEDALLION_JAVA_OPTIONS
      options of the driver's and the executors' JVMs (e.g. "-XX:TieredStopAtLevel=1", quick JIT
      for short runs).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # A foreachBatch that raises is logged by py4j with its traceback; the runner reports it as
    # one line naming the flow, from the query's failure.
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    builder = SparkSession.builder.appName(app_name).master(spark_master())
    for key, value in session_settings().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_sources(spark)
    parse_over_cores(spark)
    return spark


def session_settings() -> dict[str, str]:
    """The Spark settings of our sessions (why each: `get_spark`), also what a local Spark
    Connect server is started with (`services/connect_server.py`). Sets the environment of the
    processes Spark starts (Python workers, the JVM's C library) on the way."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")  # read by the JVM's C library when it starts
    jvm = os.environ.get("CDC_MEDALLION_JAVA_OPTIONS", "")
    memory = driver_memory()
    settings = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j.configurationFile=file:{LOG4J} -XX:+UseSerialGC {young_generation_option(memory)}"
            f" {driver_class_archive()} {jvm}"
        ),
        "spark.sql.shuffle.partitions": os.environ.get("CDC_MEDALLION_SHUFFLE_PARTITIONS", "4"),
        "spark.databricks.delta.snapshotPartitions": "1",
        "spark.databricks.delta.allFilesInCrc.enabled": "false",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.codegen.cache.maxEntries": str(GENERATED_CLASSES_KEPT),
        "spark.sql.session.timeZone": "UTC",
        # Parquet INT96 timestamps are read as nanoseconds by delta-rs and overflow outside 1677-2262.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.memory": memory,
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        "spark.delta.logStore.file.impl": "io.delta.storage.LocalLogStore",
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
        ),
        "spark.sql.warehouse.dir": os.path.join(os.environ.get("TMPDIR", "/tmp"), "cdc-medallion-warehouse"),
    }
    jars = cached_jars()
    if jars:
        settings["spark.jars"] = ",".join(jars)
    else:
        settings["spark.jars.packages"] = ",".join(packages())
    for setting in os.environ.get("CDC_MEDALLION_SPARK_CONF", "").split():
        key, sep, value = setting.partition("=")
        if not sep or not key.startswith("spark."):
            raise ConfigError(f"CDC_MEDALLION_SPARK_CONF: {setting!r} is not spark.<key>=<value>")
        settings[key] = value
    if jvm.strip():  # a cluster's executors are JVMs too (local mode runs its tasks in the driver)
        settings["spark.executor.extraJavaOptions"] = jvm
    return settings


def parse_over_cores(spark: SparkSession) -> None:
    """Tell the parsers how many cores the session runs on (`formats.base.PARSE_PARTITIONS_CONF`).

    Local only: it asks the SparkContext, which a Spark Connect session (Databricks serverless)
    does not have, so the query functions read the answer from the session's conf instead. The
    runner asks again before it plans each query: a cluster's executors join after the start."""
    from cdc_medallion.formats.base import PARSE_PARTITIONS_CONF

    spark.conf.set(PARSE_PARTITIONS_CONF, str(spark.sparkContext.defaultParallelism))


def register_sources(spark: SparkSession) -> None:
    """Our Python data sources, by the names the runner reads them with."""
    from cdc_medallion.sources.files import FileSource

    spark.dataSource.register(FileSource)
