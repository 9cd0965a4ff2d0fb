"""The report's figures about the tables (quarantine reasons with samples, heartbeat lag),
computed once, by Spark, and stored in the event log for every reader.

A run computes them after its updates (`record_table_figures`, from `run_pipeline`, quality
step or not) and logs them as a `quality_check` event of its last update (suite `figures`). The
HTML report and `status` read them back from the event log (`stored.py`, without a JVM), so
neither reads a table and no second implementation has to agree with this one. The Databricks
report job, whose pipeline has no run of ours to store them, calls the same functions over the
pipeline's tables. The source accounting is the quality step's (`checks.py`), stored there.

Each table's figures are remembered with its Delta version (`memo.py`): a run that did not write a
quarantine table or the heartbeats does not read them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.catalog import dataset_status
from cdc_medallion.model import bronze_ref_column
from cdc_medallion.names import FAILED, HEARTBEATS
from cdc_medallion.quality.checks import quality_dir
from cdc_medallion.quality.events import QUALITY_CHECK
from cdc_medallion.quality.figures import (
    FIGURES,
    RAW_LIMIT,
    SAMPLES_PER_REASON,
    TOP_REASONS,
    HeartbeatLag,
    QuarantineReason,
    TableFigures,
    quarantine_sample,
)
from cdc_medallion.quality.memo import QualityMemo
from cdc_medallion.runner.event_log import EventLog
from cdc_medallion.storage.delta_store import DeltaStore


def spark_rows(df: DataFrame) -> list[dict[str, Any]]:
    """A small DataFrame's rows as `arrow_rows.python_rows` gives a JVM-free read's, through Arrow:
    `collect()` turns a TIMESTAMP into a datetime by `fromtimestamp`, which fails on the first
    day of year 1 (and outside 1-9999 in local time), and gives binary as bytearray."""
    return python_rows(df.toArrow())


def quarantine_reasons(
    tables: Mapping[str, DataFrame], bronze: list[DataFrame] | None = None
) -> tuple[list[QuarantineReason], dict[str, int]]:
    """Top (dataset, failed rule) pairs over quarantine tables, with sample rows. A row quarantined
    by a rule (not a parse error) carries no raw message: given the bronze tables, the sample shows
    the bronze message it points to."""
    reasons: list[QuarantineReason] = []
    totals: dict[str, int] = {}
    for dataset, df in tables.items():
        if FAILED not in df.columns:
            continue
        ref = next((c for c in ("bronze_ref", "__bronze_ref") if c in df.columns), None)
        totals[dataset] = df.count()
        exploded = df.select("*", F.explode_outer(FAILED).alias("__rule"))
        counts = exploded.groupBy("__rule").count().orderBy(F.desc("count"), "__rule").limit(TOP_REASONS).collect()
        for row in counts:
            rule = row["__rule"] or "(no rule named)"
            picked = exploded.filter(
                F.col("__rule") == row["__rule"] if row["__rule"] is not None else F.col("__rule").isNull()
            )
            if ref:
                picked = picked.orderBy(ref)
            samples = [quarantine_sample(sample, ref) for sample in spark_rows(picked.limit(SAMPLES_PER_REASON))]
            reasons.append(QuarantineReason(dataset, rule, int(row["count"]), samples))
    reasons.sort(key=lambda r: (-r.count, r.dataset, r.rule))
    if bronze:
        _raw_from_bronze(reasons, bronze)
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


def table_figures(store: DeltaStore, memo: QualityMemo | None, update_id: str) -> TableFigures:
    """The storage's figures now: each quarantine table that holds rows, with samples' raw
    messages from bronze, and the heartbeats. With a memo, a table unchanged since it was last
    figured is not read again."""
    status = dataset_status(store.root)
    quarantines = [e["name"] for e in status if e["layer"] == "quarantine" and e["rows"]]
    bronze = [e["name"] for e in status if e["layer"] == "bronze"]
    figures = TableFigures()
    missed: dict[str, str] = {}  # table -> its memo key, figured now
    for name in quarantines:
        key = memo.key(f"{FIGURES}/{name}", (name,), (TOP_REASONS, SAMPLES_PER_REASON, RAW_LIMIT)) if memo else ""
        recalled = memo.recall(f"{FIGURES}/{name}", key) if memo else None
        if recalled is not None:
            figures.quarantine += [QuarantineReason(**r) for r in recalled["results"]["reasons"]]
            figures.quarantine_rows[name] = recalled["results"]["rows"]
        else:
            missed[name] = key
    if missed:
        found, totals = quarantine_reasons({n: store.read(n) for n in missed}, [store.read(b) for b in bronze])
        figures.quarantine += found
        figures.quarantine_rows.update(totals)
        for name, key in missed.items():
            if memo is not None and name in totals:
                reasons = [r.__dict__ for r in found if r.dataset == name]
                memo.remember(f"{FIGURES}/{name}", key, update_id, {"reasons": reasons, "rows": totals[name]})
    figures.quarantine.sort(key=lambda r: (-r.count, r.dataset, r.rule))
    figures.quarantine_rows = dict(sorted(figures.quarantine_rows.items()))
    if any(e["name"] == HEARTBEATS and e["rows"] for e in status):
        key = memo.key(f"{FIGURES}/{HEARTBEATS}", (HEARTBEATS,), "heartbeat_lag") if memo else ""
        if memo is not None and (recalled := memo.recall(f"{FIGURES}/{HEARTBEATS}", key)) is not None:
            figures.heartbeats = TableFigures.from_dict({"heartbeats": recalled["results"]}).heartbeats
        else:
            figures.heartbeats = heartbeat_lag(store.read(HEARTBEATS))
            if memo is not None:
                memo.remember(f"{FIGURES}/{HEARTBEATS}", key, update_id, figures.as_dict()["heartbeats"])
    else:
        figures.heartbeats = []
    return figures


def record_table_figures(store: DeltaStore, pipeline_name: str, update_id: str) -> TableFigures:
    """Compute the storage's figures and log them under `update_id` (a `quality_check` event of
    suite `figures`), for the report and `status` to read. Figures equal to the last ones stored
    are not logged again (an update that wrote no quarantine or heartbeat adds no commit): the
    update that stored them still names them."""
    memo = QualityMemo(store, quality_dir(store.root))
    figures = table_figures(store, memo, update_id)
    stored = {k: v for k, v in figures.as_dict().items() if k != "as_of"}
    last = memo.recall(FIGURES, "")  # the figures stored last
    if last is not None and last["results"] == stored:
        memo.save()
        return figures
    log = EventLog(store, pipeline_name, update_id)
    quarantined = sum(figures.quarantine_rows.values())
    log.emit(
        QUALITY_CHECK,
        f"table figures: {quarantined} quarantined row(s) in {len(figures.quarantine_rows)} table(s), "
        f"heartbeats of {len(figures.heartbeats or [])} source(s)",
        {QUALITY_CHECK: {"suite": FIGURES, FIGURES: figures.as_dict()}},
    )
    log.flush()
    memo.remember(FIGURES, "", update_id, stored)  # after the event's commit: a crash between logs them again
    memo.save()
    return figures
