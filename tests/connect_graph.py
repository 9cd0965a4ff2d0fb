"""Every query function of the graph, declared and run as on Databricks, on a Spark Connect server.

Run by `tests/test_spark_connect.py` in a process of its own (a Connect session switches
pyspark to its Connect implementations for the whole process), against a server the test
started. As Lakeflow does, `transformations/*.py` are executed with the conf path in the Spark
conf and the recording stand-in of Databricks' `pyspark.pipelines` installed
(`tests/databricks_standins.py`), so the declarations, too, run on Connect. Then every recorded
query function runs on the server, reading what the ones it names produced:

1. bronze: each source's query function (on Databricks: a Kafka stream, `sources/kafka.py`)
   reads the broker the messages were written to; all of them as one streaming query
   (`availableNow`) into a Delta table, each row tagged with its dataset;
2. silver: each source's parse (its `__checked` twin) over a Delta *stream* of its bronze rows,
   as on Databricks (so a stateful format runs `applyInPandasWithState`), as one streaming query;
3. everything else (silver tables and quarantines, side-table flows, gold's change-feed views,
   their quarantines, the SCD2 views without truncates) reads those as batches, each dataset
   a query function builds in turn; every function's rows, with every expectation's constraint
   and every auto CDC flow's keys, sequence and conditions evaluated over them, are counted in
   one Spark job. A failed job is run again one function at a time, to name the functions.

Prints one JSON line: per function its rows (by `kind` where it has one) and each constraint's
passing rows; the settings the query functions changed (none may); the seconds of each stage.

Usage: python -m tests.connect_graph URL MANIFEST (a JSON file: conf, bootstrap, dumps, work)
"""

from __future__ import annotations

import json
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BRONZE_TAG = "__dataset"


def main(url: str, manifest_path: str) -> int:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.utils import is_remote

    from cdc_medallion.config import SPARK_CONF_KEY, load_conf
    from cdc_medallion.declarative import databricks
    from cdc_medallion.declarative.runtime import reading_with
    from cdc_medallion.formats import get_format
    from cdc_medallion.names import bronze_name, silver_name
    from cdc_medallion.parsing.cores import PARSE_PARTITIONS_CONF
    from cdc_medallion.runner.graph import transformation_files
    from tests.databricks_standins import Recorder, pipelines_standin

    manifest = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    work = Path(manifest["work"])
    seconds: dict[str, float] = {}
    started = time.monotonic()
    spark = SparkSession.builder.remote(url).getOrCreate()
    assert is_remote(), "not a Spark Connect session"
    seconds["connect"] = time.monotonic() - started

    # What the pipeline configuration carries on Databricks (databricks.yml): the conf file, the
    # Kafka servers its sources refer to, the parse's partitions.
    spark.conf.set(SPARK_CONF_KEY, manifest["conf"])
    spark.conf.set("cdc_medallion.kafka.bootstrap_servers", manifest["bootstrap"])
    spark.conf.set(PARSE_PARTITIONS_CONF, "2")
    conf = load_conf(Path(manifest["conf"]))

    started = time.monotonic()
    produce(spark, manifest)
    seconds["produce"] = time.monotonic() - started

    started = time.monotonic()
    recorder = Recorder()
    sys.modules["pyspark.pipelines"] = pipelines_standin(recorder)
    assert conf.transformations is not None
    for file in transformation_files(conf.transformations):
        runpy.run_path(str(file), run_name=f"lakeflow.{file.stem}")
    seconds["declare"] = time.monotonic() - started
    settings_before = settings(spark)

    datasets = {name: d for name, d in recorder.datasets.items() if d.query is not None}
    bronze = [bronze_name(s.name) for s in conf.sources]
    checked = [silver_name(s.name) + databricks.CHECKED_SUFFIX for s in conf.sources]
    missing = [name for name in bronze + checked if name not in datasets]
    assert not missing, f"not declared: {missing}"

    # 1. bronze: Kafka streams (no reader: the query functions run as on Databricks).
    started = time.monotonic()
    streamed = [datasets[name].query().withColumn(BRONZE_TAG, F.lit(name)) for name in bronze]
    stream_into(union(streamed), work / "bronze")
    seconds["bronze"] = time.monotonic() - started

    # 2. silver parses, each over a Delta stream of its bronze rows.
    def bronze_stream(name: str) -> DataFrame:
        assert name in bronze, f"a silver parse read {name}, not bronze"
        rows = spark.readStream.format("delta").load(str(work / "bronze"))
        return rows.filter(F.col(BRONZE_TAG) == name).drop(BRONZE_TAG)

    # Spark runs one `applyInPandasWithState` per streaming query: each stateful format's parse
    # is a query of its own, the others one query together.
    started = time.monotonic()
    stateful = {silver_name(s.name) + databricks.CHECKED_SUFFIX for s in conf.sources if get_format(s.format).stateful}
    with reading_with(Reader(bronze_stream, bronze_stream)):
        parsed = {name: datasets[name].query().withColumn(BRONZE_TAG, F.lit(name)) for name in checked}
    assert all(frame.isStreaming for frame in parsed.values())
    queries = [[name] for name in checked if name in stateful] + [[name for name in checked if name not in stateful]]
    for index, names in enumerate(q for q in queries if q):
        stream_into(union([parsed[name] for name in names]), work / "silver", f"_checkpoint_{index}")
    seconds["silver"] = time.monotonic() - started

    # 3. the rest, as batches over what 1 and 2 wrote.
    materialized = {name: work / "bronze" for name in bronze} | {name: work / "silver" for name in checked}
    built: dict[str, DataFrame] = {}
    flows = {name: f for name, f in recorder.flows.items() if f.api == "append_flow"}

    def dataset(name: str) -> DataFrame:
        if name in materialized:
            rows = spark.read.format("delta").load(str(materialized[name]))
            return rows.filter(F.col(BRONZE_TAG) == name).drop(BRONZE_TAG)
        if name not in built:
            feeding = [f for f in flows.values() if f.options["target"] == name]
            if name in datasets:
                built[name] = datasets[name].query()
            elif feeding:  # a streaming table fed by append flows
                built[name] = union([f.query() for f in feeding])
            else:
                raise KeyError(f"no dataset {name!r} in the recorded graph")
        return built[name]

    started = time.monotonic()
    # Each dataset's expectations, and the arguments Databricks' auto CDC flows evaluate over it.
    checks = {name: [(rule, constraint) for _, rule, constraint in d.expectations] for name, d in datasets.items()}
    auto_cdc_sources: dict[str, str] = {}
    for name, flow in recorder.flows.items():
        if flow.api != "append_flow":
            options = flow.options
            auto_cdc_sources[name] = options["source"]
            arguments = [(f"key:{k}", f"{k} IS NOT NULL") for k in options["keys"]]
            arguments.append(("sequence_by", f"{options['sequence_by']} IS NOT NULL"))
            arguments += [(key, options[key]) for key in ("apply_as_deletes", "apply_as_truncates") if options[key]]
            checks[options["source"]] += [(f"auto_cdc:{name}:{label}", sql) for label, sql in arguments]
    branches: dict[str, Callable[[], DataFrame]] = {}
    for name in datasets:
        branches[name] = _counted(dataset, name, name, checks[name])
    for name, flow in flows.items():
        branches[f"flow:{name}"] = _counted(lambda _, query=flow.query: query(), name, f"flow:{name}", [])
    with reading_with(Reader(dataset, dataset)):
        counted, failures = count_all(branches)
    seconds["rest"] = time.monotonic() - started

    changed = {key: [settings_before.get(key), value] for key, value in settings(spark).items()}
    changed = {key: values for key, values in changed.items() if values[0] != values[1]}
    changed.update({key: [value, None] for key, value in settings_before.items() if key not in settings(spark)})
    spark.stop()
    outcome = {"counted": counted, "failures": failures, "conf_changed": changed, "seconds": seconds}
    print(json.dumps({**outcome, "auto_cdc_sources": auto_cdc_sources}))
    return 1 if failures else 0


class Reader:
    """`dp.read` / `dp.read_stream` of the query functions: what an earlier stage produced."""

    def __init__(self, read: Callable[[str], Any], read_stream: Callable[[str], Any]) -> None:
        self.read = read
        self.read_stream = read_stream


def union(frames: list[Any]) -> Any:
    first, *rest = frames
    for frame in rest:
        first = first.unionByName(frame)
    return first


def stream_into(rows: Any, path: Path, checkpoint: str = "_checkpoint") -> None:
    """A streaming query over everything there is (availableNow) into a Delta table."""
    query = (
        rows.writeStream.format("delta")
        .option("checkpointLocation", str(path) + checkpoint)
        .trigger(availableNow=True)
        .start(str(path))
    )
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"streaming query into {path.name} failed: {error}")


def _counted(read: Callable[[str], Any], source: str, label: str, checks: list[tuple[str, str]]) -> Callable[[], Any]:
    """A function's rows as (function, kind, size of the row as JSON, each check's outcome): every
    column is read (to_json), so no part of the plan is pruned away."""

    def branch() -> Any:
        from pyspark.sql import functions as F

        rows = read(source)
        assert not rows.isStreaming, f"{label} read a stream in the batch stage"
        kind = F.col("kind") if "kind" in rows.columns else F.lit(None).cast("string")
        outcomes = [F.coalesce(F.expr(constraint), F.lit(False)) for _, constraint in checks] or [F.lit(True)]
        return rows.select(
            F.lit(label).alias("function"),
            kind.alias("kind"),
            F.length(F.to_json(F.struct(*[F.col(f"`{c}`") for c in rows.columns]))).alias("size"),
            F.array(*outcomes).alias("checks"),
        )

    branch.checks = [name for name, _ in checks] or ["-"]  # type: ignore[attr-defined]
    return branch


def count_all(branches: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], dict[str, str]]:
    """Every branch counted in one job; when it fails, each alone, naming the failing ones."""
    from pyspark.sql import functions as F

    def counts(names: list[str]) -> dict[str, Any]:
        frames = [branches[name]() for name in names]
        summed = (
            union(frames)
            .groupBy("function", "kind")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.sum("size").alias("size"),
                F.array_agg("checks").alias("all_checks"),
            )
        )
        result: dict[str, Any] = {name: {"rows": 0, "kinds": {}, "passed": {}} for name in names}
        for row in summed.collect():
            entry = result[row["function"]]
            entry["rows"] += row["rows"]
            entry["kinds"][str(row["kind"])] = row["rows"]
            for checks in row["all_checks"]:
                for rule, ok in zip(branches[row["function"]].checks, checks, strict=True):  # type: ignore[attr-defined]
                    entry["passed"][rule] = entry["passed"].get(rule, 0) + int(bool(ok))
        return result

    try:
        return counts(list(branches)), {}
    except Exception as error:
        first = f"{type(error).__name__}: {error}"
    counted, failures = {}, {}
    for name in branches:
        try:
            counted.update(counts([name]))
        except Exception as error:
            failures[name] = f"{type(error).__name__}: {str(error)[:2000]}"
    if not failures:  # each alone ran: what failed is their union
        failures["(all functions in one job)"] = first[:2000]
    return counted, failures


def settings(spark: Any) -> dict[str, str]:
    return dict(spark.conf.getAll)


def produce(spark: Any, manifest: dict[str, Any]) -> None:
    """Each dump's messages, byte-exact, to the broker (partition 0: the file's order), through
    Spark's Kafka sink on the server."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdc_medallion.config import InputConf, SourceConf
    from cdc_medallion.sources.files import FileLanding

    for dump in manifest["dumps"]:
        source = SourceConf(
            name="feed", format=dump["format"], input=InputConf(path=Path(dump["path"]), layout="kafka-dump")
        )
        landed = FileLanding(source).next_batch().to_arrow()
        records = pa.table(
            {
                "key": landed.column("key"),
                "value": landed.column("value"),
                "topic": landed.column("topic"),
                "partition": pa.array([0] * landed.num_rows, pa.int32()),
                "headers": landed.column("headers"),
            }
        )
        # Each source its own topics (the generated dumps of all formats name the same ones).
        prefixed = pc.binary_join_element_wise(dump["topic_prefix"], records.column("topic"), ".")
        frame = spark.createDataFrame(records.set_column(2, "topic", prefixed))
        frame.write.format("kafka").option("kafka.bootstrap.servers", manifest["bootstrap"]).save()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
