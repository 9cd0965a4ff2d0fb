"""A complete local run: bronze and silver, discovery of tables, then gold.

Gold is declared per source table, and which tables exist is only known once silver has seen
them; so a run declares the graph from what silver already holds, runs it, and runs it once
more (only gold has new input then) if new tables appeared.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pyspark.sql import SparkSession

from cdc_medallion.config import PipelineConf
from cdc_medallion.discovery import Discovery, discover
from cdc_medallion.runner.local import LocalRunner, Progress, StorageLock, UpdateResult
from cdc_medallion.spark import get_spark
from cdc_medallion.storage.delta_rs import DeltaRsStore


@dataclass
class RunSummary:
    updates: list[UpdateResult] = field(default_factory=list)
    discovery: Discovery | None = None


def run_pipeline(
    conf: PipelineConf,
    spark: SparkSession | None = None,
    full_refresh: bool = False,
    progress: Progress | None = None,
) -> RunSummary:
    spark = spark or get_spark()
    say = progress or (lambda _line: None)
    store = DeltaRsStore(conf.storage, spark)
    summary = RunSummary()
    with StorageLock(store.root):
        if full_refresh:
            say(f"full refresh: clearing {store.root}")
            store.drop_all()
        before = discover(store, conf)
        say(f"update 1: {len(conf.sources)} source(s), {len(before.gold_tables())} table(s) with gold")
        summary.updates.append(_update(conf, before, spark, progress))
        after = discover(store, conf)
        if after.gold_tables() != before.gold_tables():
            say(f"update 2: new tables {sorted(t for _, t in after.gold_tables() - before.gold_tables())}")
            summary.updates.append(_update(conf, after, spark, progress))
        summary.discovery = after
    return summary


def _update(conf: PipelineConf, found: Discovery, spark: SparkSession, progress: Progress | None) -> UpdateResult:
    declared = replace(conf, tables=found.tables)
    return LocalRunner(declared, spark, progress).update(lock=False)
