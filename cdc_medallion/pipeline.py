"""A complete local run: bronze and silver, discovery of tables, then gold.

Gold is declared per source table, and which tables (and columns) exist is only known once
silver has seen them; so a run first updates bronze and silver, then declares gold from what
silver holds and runs the whole graph (only gold has new input by then).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import SparkSession

from cdc_medallion.config import PipelineConf
from cdc_medallion.discovery import Discovery, discover
from cdc_medallion.quality.figures_step import record_table_figures
from cdc_medallion.runner.checkpoints import StorageLock
from cdc_medallion.runner.event_log import EventLog
from cdc_medallion.runner.local import LocalRunner
from cdc_medallion.runner.results import Progress, UpdateResult
from cdc_medallion.spark import get_spark
from cdc_medallion.storage.delta_store import DeltaStore


@dataclass
class RunSummary:
    updates: list[UpdateResult] = field(default_factory=list)
    discovery: Discovery | None = None
    quality: Any = None  # cdc_medallion.quality.checks.QualityResult when run with quality=True
    quality_error: str | None = None


def run_pipeline(
    conf: PipelineConf,
    spark: SparkSession | None = None,
    full_refresh: bool = False,
    progress: Progress | None = None,
    quality: bool = False,
    great_expectations: bool = True,
    continuous: bool = False,
) -> RunSummary:
    """Run the conf's pipeline (one or two updates). With `quality`, then check that every
    bronze message is accounted for and (with `great_expectations`) run the GX suites and build
    their Data Docs; the results go to the event log (`cdc-medallion run` does this by default).
    `continuous`: the second update keeps every flow running until the process is stopped (the
    tables gold has are those known when it started). A failed flow fails the run at its end,
    after every flow that does not read it has run (both updates, and the checks)."""
    spark = spark or get_spark()
    say = progress or (lambda _line: None)
    store = DeltaStore(conf.storage, spark)
    summary = RunSummary()
    with StorageLock(store.root):
        if full_refresh:
            say(f"full refresh: clearing {store.root}")
            store.drop_all()
        # Gold's columns must include everything silver has seen (a column added by DDL in this
        # batch), so bronze and silver run first, then gold is declared from silver and runs.
        say(f"landing and parsing {len(conf.sources)} source(s)")
        first = _update(conf, Discovery(tables=(), unconfigured=()), spark, progress, partial=True, hand_on=True)
        summary.updates.append(first)
        try:
            after = discover(store, conf)
        except BaseException:
            EventLog(store, conf.name, first.update_id, first.unlogged).flush()  # no next update to carry them
            raise
        for table in after.unseen:  # a --key/--columns or conf table the data does not have (yet)
            print(
                f"cdc-medallion: warning: table {table} is configured but no message names it; "
                f"tables seen: {', '.join(after.seen) or 'none'}",
                file=sys.stderr,
            )
        say(f"applying changes to {len(after.gold_tables())} table(s)")
        summary.updates.append(_update(conf, after, spark, progress, continuous, land=False, carried=first.unlogged))
        summary.discovery = after
        if quality:
            from cdc_medallion.quality.checks import run_quality_checks

            try:
                summary.quality = run_quality_checks(
                    store, conf, after.tables, summary.updates[-1].update_id, great_expectations, say
                )
            except Exception as error:  # the update is committed: report, do not fail the run
                summary.quality_error = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
                say(f"quality checks could not run: {summary.quality_error}")
        try:  # the report's and `status`'s figures, stored once for every reader
            record_table_figures(store, conf.name, summary.updates[-1].update_id)
        except Exception as error:  # the update is committed: report, do not fail the run
            summary.quality_error = summary.quality_error or f"table figures: {type(error).__name__}: {error}"[:300]
            say(f"table figures could not be stored: {summary.quality_error}")
    failed = next((e for e in (u.error() for u in summary.updates) if e is not None), None)
    if failed is not None:  # the flows that did not fail have committed: report, then fail the run
        raise failed
    return summary


def _update(
    conf: PipelineConf,
    found: Discovery,
    spark: SparkSession,
    progress: Progress | None,
    continuous: bool = False,
    partial: bool = False,
    land: bool = True,
    hand_on: bool = False,
    carried: list[dict[str, Any]] | None = None,
) -> UpdateResult:
    """One update; `hand_on` and `carried`: an update that wrote nothing has its event log
    entries committed with the next one's (`LocalRunner.update`)."""
    declared = replace(conf, tables=found.tables)
    runner = LocalRunner(declared, spark, progress)
    return runner.update(
        lock=False,
        continuous=continuous,
        raise_failures=False,
        partial_graph=partial,
        land=land,
        hand_on_if_idle=hand_on,
        carried=carried,
    )
