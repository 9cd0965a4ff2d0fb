"""Spark's own floors on the same bytes: what any Spark job reading these files must pay.

- `text_count`: `spark.read.text(...).count()`, reading the lines and nothing else;
- `from_json_noop`: text, then `from_json` with an explicit schema (the Kafka-dump record, then
  the message inside it) into the `noop` sink: parsing JSON, writing nothing;
- `from_json_parquet`: the same, written as Parquet: parsing plus writing columnar files.

The message schema is inferred once from a sample, outside the timing, and then passed
explicitly, as a hand-written Spark job would. Formats whose messages are not JSON (DTS Avro,
IBM's delimited records) get the text and Kafka-dump floors only.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from bench.timing import best_of
from bench.workloads import Workload, input_files
from cdc_medallion.lines import NEWLINE

KAFKA_DUMP = "topic STRING, partition INT, offset BIGINT, timestamp BIGINT, key STRING, value STRING"


@dataclass
class Floors:
    text_count: float
    from_json_noop: float
    from_json_parquet: float
    message_parsed: bool  # False: only the Kafka-dump record is parsed (the message is not JSON)


def _paths(work: Workload) -> list[str]:
    return [str(p) for p in input_files(work.rendered.path)]


def _message_schema(spark: SparkSession, work: Workload, sample: int = 2000) -> StructType | None:
    if not work.format.endswith("-json"):
        return None
    values = []
    with open(_paths(work)[0], encoding="utf-8", newline=NEWLINE) as handle:  # lines end at "\n" only
        for line in itertools.islice(handle, sample):
            value = json.loads(line).get("value") if work.rendered.layout == "kafka-dump" else line
            if value is not None:
                values.append(value)
    with tempfile.TemporaryDirectory() as folder:
        sample_file = Path(folder) / "sample.json"
        sample_file.write_text("\n".join(values), encoding="utf-8")
        return spark.read.json(str(sample_file)).schema


def parsed(spark: SparkSession, work: Workload, schema: StructType | None) -> DataFrame:
    lines = spark.read.text(_paths(work))
    if work.rendered.layout == "kafka-dump":
        record = F.from_json("value", KAFKA_DUMP)
        df = lines.select(record.alias("r")).select("r.*")
        if schema is not None:
            df = df.withColumn("message", F.from_json("value", schema))
        return df
    return lines.select(F.from_json("value", schema).alias("message")) if schema is not None else lines


def measure(spark: SparkSession, work: Workload, scratch: Path) -> Floors:
    files = _paths(work)
    spark.read.text(files).count()  # warm the page cache: every floor reads warm files, as we do
    text_count = best_of(lambda: spark.read.text(files).count())

    schema = _message_schema(spark, work)
    noop = best_of(lambda: parsed(spark, work, schema).write.format("noop").mode("overwrite").save())

    target = scratch / "floor.parquet"
    parquet = best_of(lambda: parsed(spark, work, schema).write.mode("overwrite").parquet(str(target)))
    shutil.rmtree(target, ignore_errors=True)
    return Floors(text_count, noop, parquet, schema is not None)
