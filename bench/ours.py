"""Our pipeline on a workload: end to end, per stage, and the silver parse on its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from bench.memory import RssSampler
from bench.timing import best_of
from cdc_medallion.config import PipelineConf
from cdc_medallion.formats import get_format
from cdc_medallion.formats.base import _event_arrow_schema
from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.names import bronze_name, layer_of
from cdc_medallion.parsing.cores import spread_over_cores
from cdc_medallion.pipeline import RunSummary, run_pipeline
from cdc_medallion.quality.rules import load_rules
from cdc_medallion.runner import expectations as exp
from cdc_medallion.storage.delta_store import DeltaStore

#: One streaming query at a time: a flow's seconds are its query's wall clock, shared by the
#: flows of that query, so with queries in turn a stage's seconds add up to its share of the run.
#: (The engine's default runs up to 4 at once, which would count overlapping time twice.)
MAX_CONCURRENT_FLOWS = 1


@dataclass
class PipelineRun:
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)  # bronze / silver / gold wall clock
    rows: dict[str, int] = field(default_factory=dict)  # rows written per stage
    memory: dict[str, float] = field(default_factory=dict)
    compiled: int = 0  # classes Spark generated and compiled during the run


def compilations(spark: SparkSession) -> int:
    """How many classes Spark's code generation has compiled in this JVM so far."""
    return int(spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount())


def run(spark: SparkSession, conf: PipelineConf, sampler: RssSampler, say=lambda _line: None) -> PipelineRun:
    """The pipeline over `conf`, its queries one at a time (`MAX_CONCURRENT_FLOWS`)."""
    conf = replace(conf, max_concurrent_flows=MAX_CONCURRENT_FLOWS)
    sampler.reset()
    compiled = compilations(spark)
    started = time.monotonic()
    summary: RunSummary = run_pipeline(conf, spark, progress=say, quality=False)
    seconds = time.monotonic() - started
    result = PipelineRun(seconds, {"bronze": 0.0, "silver": 0.0, "gold": 0.0}, {"bronze": 0, "silver": 0, "gold": 0})
    result.compiled = compilations(spark) - compiled
    for update in summary.updates:
        for flow in update.flows.values():
            stage = layer_of(flow.target)
            result.stages[stage] += flow.seconds
            result.rows[stage] += flow.output_rows
    result.memory = sampler.window().as_gib()
    return result


def _bronze(spark: SparkSession, conf: PipelineConf) -> DataFrame:
    """The landed messages of the workload's one source, as silver reads them."""
    return DeltaStore(conf.storage, spark).read(bronze_name(conf.sources[0].name))


def silver_parse(spark: SparkSession, conf: PipelineConf) -> float:
    """Bronze → the format's parser → expectations marked → `noop`: the silver work alone,
    comparable with Spark's `from_json` → `noop` floor on the same messages. Bronze is read as a
    table, so a stateful format parses it as a batch (`applyInPandas`, no state store)."""
    source = conf.sources[0]
    bronze = _bronze(spark, conf)
    parser = get_format(source.format)(source.name, source.options)
    rules = load_rules(conf.expectations, "silver", source.format, EVENT_SCHEMA)

    def parse() -> None:
        events = parse(parser, bronze)
        exp.mark(events, rules, "bench").write.format("noop").mode("overwrite").save()

    return best_of(parse)


def python_handoff(spark: SparkSession, conf: PipelineConf) -> float:
    """Bronze handed to Python workers and back with nothing parsed: the floor of any parser
    written in Python and run the way ours runs (spread over the cores, then `mapInArrow`).

    The silver parse's distance from this floor is the parsers' own work; `from_json`'s lead
    over it is what leaving the JVM costs at all, whatever the parser does.
    """
    bronze = _bronze(spark, conf)
    nothing = pa.RecordBatch.from_pylist([], schema=_event_arrow_schema())

    def hand_back(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            batch.column("value").to_pylist()  # every parser reads each message as Python bytes
            yield nothing

    def handoff() -> None:
        spread_over_cores(bronze).mapInArrow(hand_back, EVENT_SCHEMA).write.format("noop").mode("overwrite").save()

    return best_of(handoff)
