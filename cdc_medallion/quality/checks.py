"""After a local run: the accounting, the stale keys and the Great Expectations suites, recorded
in the event log.

`run_quality_checks` is what `run_pipeline(..., quality=True)` (and so `cdc-medallion run`)
calls once its updates are done. Results go to the event log as `quality_check` events of the
last update, so the report shows them next to that update's expectations and trends them.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion.config import PipelineConf, TableConf
from cdc_medallion.declarative.definitions import Action
from cdc_medallion.identifiers import dataset_name
from cdc_medallion.layers import bronze_name, silver_name
from cdc_medallion.model import KIND_HEARTBEAT, KIND_SCHEMA_CHANGE
from cdc_medallion.quality.accounting import SourceAccounting, account_source
from cdc_medallion.quality.events import QUALITY_CHECK, Check, StaleKeys, latest_stale_keys
from cdc_medallion.quality.rules import StaleKeysCheck, stale_keys_check
from cdc_medallion.storage.delta_store import SYSTEM_DIR, DeltaStore

ACCOUNTING = "accounting"
STALE_KEYS = "stale_keys"
SCHEMA_CHANGES, HEARTBEATS = "silver_schema_changes", "silver_heartbeats"


@dataclass
class QualityResult:
    accounting: list[SourceAccounting] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    data_docs: Path | None = None
    seconds: float = 0.0

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.success and c.severity == "error"]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if not c.success and c.severity != "error"]


def quality_dir(storage: Path) -> Path:
    return Path(storage) / SYSTEM_DIR / "quality"


def logged_rows(store: DeltaStore) -> dict[str, tuple[int, int]]:
    """dataset -> (rows written, records quarantined), summed over the whole event log."""
    name = f"{SYSTEM_DIR}/event_log"
    if not store.exists(name):
        return {}
    events = store.read(name).filter(F.col("event_type") == "flow_progress")
    rows = (
        events.groupBy(F.col("origin.dataset_name").alias("dataset"))
        .agg(
            F.sum(F.get_json_object("details", "$.flow_progress.metrics.num_output_rows").cast("long")).alias("rows"),
            F.sum(F.get_json_object("details", "$.flow_progress.data_quality.quarantined_records").cast("long")).alias(
                "quarantined"
            ),
        )
        .collect()
    )
    return {r["dataset"]: (int(r["rows"] or 0), int(r["quarantined"] or 0)) for r in rows if r["dataset"]}


def accounting_checks(result: SourceAccounting) -> list[Check]:
    return [
        Check(
            suite=ACCOUNTING,
            dataset=result.source,
            name="every_message_accounted_for",
            success=result.balanced,
            observed=result.equation()
            + (f"; {result.unaccounted} without outcome" if result.unaccounted else "")
            + (f"; {result.unknown_refs} unknown refs" if result.unknown_refs else ""),
            expected="bronze = changes + schema changes + heartbeats + transactions + tombstones + messages + keys"
            " + quarantined + held",
            passed=result.accounted,
            failed=result.unaccounted + result.unknown_refs,
            description="Every bronze message ends in exactly one of silver (by kind), quarantine or held "
            "(counted once, through bronze_ref and related_refs).",
        )
    ]


def stale_keys_checks(store: DeltaStore, setting: StaleKeysCheck) -> list[Check]:
    """One check per gold table the event log gives a stale-keys figure for (its latest): it
    fails (or warns, as gold.yml's `stale_keys` says) while the table has stale keys."""
    if not store.exists(f"{SYSTEM_DIR}/event_log"):
        return []
    figures = latest_stale_keys(store.read(f"{SYSTEM_DIR}/event_log"))
    return [stale_keys_check_of(dataset, stale, setting) for dataset, stale in sorted(figures.items())]


def stale_keys_check_of(dataset: str, stale: StaleKeys, setting: StaleKeysCheck) -> Check:
    observed = f"{stale.keys} stale key(s)"
    if stale.unplaced:
        observed += f", {stale.unplaced} of them quarantined changes with no key or sequence"
    if stale.samples:
        observed += f"; e.g. {', '.join(stale.samples)}"
    return Check(
        suite=STALE_KEYS,
        dataset=dataset,
        name="keys_follow_the_source",
        success=stale.keys == 0,
        severity="error" if setting.action is Action.FAIL else "warn",
        observed=observed,
        expected="no key left stale by a quarantined change",
        failed=stale.keys,
        description="A quarantined change of a key leaves its current state behind the source until a "
        "whole image, a delete or a truncate at a higher sequence (docs/quality.md).",
    )


def gx_inputs(store: DeltaStore, conf: PipelineConf, tables: Iterable[TableConf], logged: dict) -> list:
    from cdc_medallion.quality import suites

    def read(name: str) -> DataFrame | None:
        return store.read(name) if store.exists(name) else None

    def logged_count(name: str, index: int = 0) -> int | None:
        return logged[name][index] if name in logged else None

    inputs = []
    for source in conf.sources:
        bronze, silver = bronze_name(source.name), silver_name(source.name)
        if (frame := read(bronze)) is not None:
            inputs.append(suites.bronze_suite(bronze, frame, logged_count(bronze)))
        if (frame := read(silver)) is not None:
            inputs.append(suites.silver_suite(silver, frame, logged_count(silver)))
        quarantine = f"{silver}_quarantine"
        if (frame := read(quarantine)) is not None:
            inputs.append(suites.quarantine_suite(quarantine, frame, logged_count(silver, 1)))
    for name, kind in ((SCHEMA_CHANGES, KIND_SCHEMA_CHANGE), (HEARTBEATS, KIND_HEARTBEAT)):
        if (frame := read(name)) is not None:
            inputs.append(suites.side_suite(name, frame, kind, logged_count(name)))
    for table in tables:
        gold = table.gold_name
        if not table.keys or (current := read(gold)) is None:
            continue
        keys = tuple(table.keys)
        inputs.append(suites.scd1_suite(gold, current, keys))
        if (history := read(f"{gold}_history")) is not None:
            inputs.extend(suites.scd2_suites(f"{gold}_history", history, current, keys))
        quarantine = dataset_name("changes", gold.removeprefix("gold_")) + "_quarantine"
        if (frame := read(quarantine)) is not None:
            inputs.append(suites.quarantine_suite(quarantine, frame, None))
    return inputs


def run_quality_checks(
    store: DeltaStore,
    conf: PipelineConf,
    tables: Iterable[TableConf],
    update_id: str,
    great_expectations: bool = True,
    progress: Callable[[str], None] | None = None,
) -> QualityResult:
    """Accounting per source and (optionally) the GX suites; recorded under `update_id`."""
    from cdc_medallion.runner.event_log import EventLog

    say = progress or (lambda _line: None)
    started = time.monotonic()
    result = QualityResult()
    log = EventLog(store, conf.name, update_id)
    for source in conf.sources:
        bronze = bronze_name(source.name)
        if not store.exists(bronze):
            continue
        silver = silver_name(source.name)
        quarantine = f"{silver}_quarantine"
        accounted = account_source(
            source.name,
            store.read(bronze),
            store.read(silver) if store.exists(silver) else None,
            store.read(quarantine) if store.exists(quarantine) else None,
        )
        result.accounting.append(accounted)
        checks = accounting_checks(accounted)
        result.checks.extend(checks)
        log.emit(
            QUALITY_CHECK,
            f"accounting of {source.name}: {accounted.equation()}",
            {
                QUALITY_CHECK: {
                    "suite": ACCOUNTING,
                    "accounting": accounted.as_dict(),
                    "checks": [c.as_dict() for c in checks],
                }
            },
            dataset=source.name,
            level="INFO" if accounted.balanced else "WARN",
        )
    stale = stale_keys_checks(store, stale_keys_check(conf.expectations))
    result.checks.extend(stale)
    for check in stale:
        log.emit(
            QUALITY_CHECK,
            f"stale keys of {check.dataset}: {check.observed}",
            {QUALITY_CHECK: {"suite": STALE_KEYS, "checks": [check.as_dict()]}},
            dataset=check.dataset,
            level="INFO" if check.success else "WARN",
        )
    if great_expectations:
        from cdc_medallion.quality.suites import SUITE, run_suites

        inputs = gx_inputs(store, conf, tables, logged_rows(store))
        checks, docs = run_suites(inputs, quality_dir(store.root), run_name=update_id)
        result.checks.extend(checks)
        result.data_docs = docs
        by_dataset: dict[str, list[Check]] = {}
        for check in checks:
            by_dataset.setdefault(check.dataset, []).append(check)
        docs_path = os.path.relpath(docs, store.root)
        for dataset, found in by_dataset.items():
            ok = all(c.success or c.severity != "error" for c in found)
            log.emit(
                QUALITY_CHECK,
                f"great expectations suite {dataset}: {'passed' if ok else 'failed'}",
                {QUALITY_CHECK: {"suite": SUITE, "data_docs": docs_path, "checks": [c.as_dict() for c in found]}},
                dataset=dataset,
                level="INFO" if ok else "WARN",
            )
    result.seconds = time.monotonic() - started
    log.emit(
        QUALITY_CHECK,
        f"quality checks at {dt.datetime.now(dt.UTC).isoformat()}: {len(result.checks)} checks, "
        f"{len(result.failed)} failed, {len(result.warnings)} warnings",
        {QUALITY_CHECK: {"suite": "summary", "seconds": round(result.seconds, 1)}},
    )
    log.flush()
    say(
        f"quality: {len(result.checks)} checks, {len(result.failed)} failed, {len(result.warnings)} warning(s)"
        f" ({result.seconds:.1f}s)"
    )
    return result
