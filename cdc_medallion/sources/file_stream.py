"""Bronze's stream of a local input: Spark's own text source reads the batch files the driver
planned (`landing_log.py`), one per micro-batch, and tasks on every core read the ranges they
name (`files.read_range`), handing Spark Arrow columns built from each range's buffer.

The ranges are read in Python tasks, not by Spark's text reader: that reader cannot start at a
byte offset (a file that grew would be read again from its start), does not number lines, and
lands a big file in one batch. Unpacking kafka-dump records with Arrow's JSON reader in those
tasks also measured faster than `from_json` in the JVM over the lines (bench/HISTORY.md,
2026-12-02).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.sources.files import FileRange, LandingSpec, read_range
from cdc_medallion.sources.landing_log import PIECE_DDL, LandingLog

#: Batch files older than this (than the newest one) would be ignored by Spark's file source;
#: their times are their numbers, so none ever is.
MAX_FILE_AGE = "36500d"
ARROW_BATCH_BYTES = 16 << 20  # a range's rows go to Spark in Arrow batches of about this size


def file_stream(spark: SparkSession, log: LandingLog, cores: int) -> DataFrame:
    """The bronze rows (BRONZE_SCHEMA) of the batches `log` holds and will hold: a micro-batch
    per batch file, its pieces spread over `cores` tasks."""
    log.batches.mkdir(parents=True, exist_ok=True)
    pieces = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", "1")
        .option("cleanSource", "delete")
        .option("maxFileAge", MAX_FILE_AGE)
        .load(str(log.batches))
        .select(F.from_json("value", PIECE_DDL).alias("piece"))
        .select("piece.*")
        .repartition(cores)  # round robin: a batch's pieces (one per core at most) in tasks of their own
    )
    return pieces.mapInArrow(lander(log.landing.spec), BRONZE_SCHEMA)


def lander(spec: LandingSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function a task runs over its pieces: each piece's rows, read and checked against
    the lines it held when planned."""

    def land(pieces: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        now = dt.datetime.now(dt.UTC)
        for batch in pieces:
            for piece in batch.to_pylist():
                part = FileRange(piece["path"], piece["start"], piece["end"], piece["first_line"])
                rows = read_range(spec, part, now, piece["lines"])
                per_batch = max(1, rows.num_rows * ARROW_BATCH_BYTES // max(1, rows.nbytes))
                yield from rows.to_batches(max_chunksize=per_batch)

    return land
