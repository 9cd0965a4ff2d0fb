"""The report's figures about the tables (quarantine reasons with samples, heartbeat lag), as
Spark computes them from DataFrames: the one implementation of each.

A local run stores them once (`figures_step.py`) and the HTML report and `status` read them back
from the event log (`stored.py`, without a JVM), so neither reads a table. The Databricks report
job, whose pipeline has no run of ours to store them, calls these functions over the pipeline's
tables; so this module needs nothing but pyspark (not delta-spark, which workers there lack).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.model import bronze_ref_column
from cdc_medallion.names import FAILED
from cdc_medallion.quality.figures import (
    RAW_LIMIT,
    SAMPLES_PER_REASON,
    TOP_REASONS,
    HeartbeatLag,
    QuarantineReason,
    quarantine_sample,
)


def spark_rows(df: DataFrame) -> list[dict[str, Any]]:
    """A small DataFrame's rows as `arrow_rows.python_rows` gives a JVM-free read's, through Arrow:
    `collect()` turns a TIMESTAMP into a datetime by `fromtimestamp`, which fails on the first
    day of year 1 (and outside 1-9999 in local time), and gives binary as bytearray."""
    return python_rows(df.toArrow())


def quarantine_reasons(
    tables: Mapping[str, DataFrame],
    bronze: Callable[[], list[DataFrame]] | None = None,
    rows: Mapping[str, int] | None = None,
) -> tuple[list[QuarantineReason], dict[str, int]]:
    """Top (dataset, failed rule) pairs over quarantine tables, with sample rows: one Spark job
    per table (each rule's count and its first samples by a window), plus a count where `rows`
    (a listing's row counts) does not give the table's. A row quarantined by a rule (not a parse
    error) carries no raw message: given a function that reads the bronze tables (called only when
    a sample needs one), the sample shows the bronze message it points to."""
    reasons: list[QuarantineReason] = []
    totals: dict[str, int] = {}
    for dataset, df in tables.items():
        if FAILED not in df.columns:
            continue
        ref = next((c for c in ("bronze_ref", "__bronze_ref") if c in df.columns), None)
        listed = (rows or {}).get(dataset)
        totals[dataset] = listed if listed is not None else df.count()
        by_rule = Window.partitionBy("__rule")
        picked = (
            df.select("*", F.explode_outer(FAILED).alias("__rule"))
            .withColumn("__count", F.count(F.lit(1)).over(by_rule))
            .withColumn("__pick", F.row_number().over(by_rule.orderBy(F.col(ref) if ref else F.col("__rule"))))
            .filter(F.col("__pick") <= SAMPLES_PER_REASON)
        )
        found: dict[str | None, list[dict[str, Any]]] = {}
        for sample in spark_rows(picked):
            found.setdefault(sample["__rule"], []).append(sample)
        # by count, then rule; a NULL rule (an empty list) first, as Spark orders it
        top = sorted(found.items(), key=lambda item: (-item[1][0]["__count"], item[0] is not None, item[0] or ""))
        for rule, samples in top[:TOP_REASONS]:
            samples.sort(key=lambda sample: sample["__pick"])
            reasons.append(
                QuarantineReason(
                    dataset,
                    rule or "(no rule named)",
                    int(samples[0]["__count"]),
                    [quarantine_sample(sample, ref) for sample in samples],
                )
            )
    reasons.sort(key=lambda r: (-r.count, r.dataset, r.rule))
    if bronze is not None and any(s["raw"] is None and s["bronze_ref"] for r in reasons for s in r.samples):
        _raw_from_bronze(reasons, bronze())
    return reasons, totals


def _raw_from_bronze(reasons: list[QuarantineReason], bronze: list[DataFrame]) -> None:
    wanted = sorted({s["bronze_ref"] for r in reasons for s in r.samples if s["raw"] is None and s["bronze_ref"]})
    if not wanted:
        return
    found: dict[str, str] = {}
    for table in bronze:
        rows = (
            table.select(bronze_ref_column().alias("ref"), F.col("value"))
            .filter(F.col("ref").isin(wanted))
            .select("ref", F.substring(F.col("value"), 1, RAW_LIMIT).alias("value"))
            .collect()
        )
        for row in rows:
            value = row["value"]
            found[row["ref"]] = "(no value: tombstone)" if value is None else bytes(value).decode("utf-8", "replace")
    for reason in reasons:
        for sample in reason.samples:
            if sample["raw"] is None and sample["bronze_ref"] in found:
                sample["raw"] = found[sample["bronze_ref"]]


def heartbeat_lag(heartbeats: DataFrame) -> list[HeartbeatLag]:
    """Per source: heartbeats seen, the latest one's lag (ingest_ts - event_ts) and the largest;
    heartbeats without a source time are counted apart, after the others. One query."""
    lag = F.col("ingest_ts").cast("double") - F.col("event_ts").cast("double")
    rows = spark_rows(
        heartbeats.groupBy(
            F.coalesce("source_name", F.lit("?")).alias("source"), F.col("event_ts").isNull().alias("untimed")
        )
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.max("event_ts").alias("latest"),
            F.max_by(lag, F.col("event_ts")).alias("latest_lag"),
            F.max(lag).alias("max_lag"),
        )
        .orderBy("untimed", "source")
    )
    return [
        HeartbeatLag(
            r["source"], r["n"], *((None, None, None) if r["untimed"] else (r["latest"], r["latest_lag"], r["max_lag"]))
        )
        for r in rows
    ]
