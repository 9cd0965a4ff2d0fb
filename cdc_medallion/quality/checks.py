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

from cdc_medallion.config import PipelineConf, TableConf
from cdc_medallion.declarative.definitions import Action
from cdc_medallion.model import KIND_HEARTBEAT, KIND_SCHEMA_CHANGE
from cdc_medallion.names import (
    EVENT_LOG,
    HEARTBEATS,
    SCHEMA_CHANGES,
    SYSTEM_DIR,
    bronze_name,
    changes_name,
    history_name,
    quarantine_name,
    silver_name,
)
from cdc_medallion.quality.accounting import SourceAccounting, account_source
from cdc_medallion.quality.events import QUALITY_CHECK, Check, LoggedFigures, StaleKeys, logged_figures
from cdc_medallion.quality.memo import QualityMemo
from cdc_medallion.quality.rules import StaleKeysCheck, stale_keys_check
from cdc_medallion.quality.suites import SuiteInput
from cdc_medallion.storage.delta_store import DeltaStore

ACCOUNTING = "accounting"
LOGGED = "logged_figures"  # the memo's entry: the event log's figures up to a version
REUSED_FROM = "reused_from"  # a quality_check event's: the update whose results it records again
STALE_KEYS = "stale_keys"


@dataclass
class QualityResult:
    accounting: list[SourceAccounting] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    data_docs: Path | None = None
    seconds: float = 0.0
    #: "suite/dataset" -> the update whose results were taken again (its inputs unchanged since)
    reused: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.success and c.severity == "error"]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if not c.success and c.severity != "error"]


def quality_dir(storage: Path) -> Path:
    return Path(storage) / SYSTEM_DIR / "quality"


def logged(store: DeltaStore, memo: QualityMemo | None = None, update_id: str = "") -> LoggedFigures:
    """The event log's figures the quality step needs, in one scan (`events.logged_figures`).
    With a memo, the scan is of the events appended since the last step's (merged with its
    figures), so its cost follows what the updates since logged, not how long the log is."""
    version = store.version(EVENT_LOG)
    if version is None:
        return LoggedFigures()
    figures, log_id = None, store.table_id(EVENT_LOG)
    if memo is not None and (remembered := memo.recall(LOGGED, log_id)) is not None:
        since = store.appended_since(EVENT_LOG, remembered["results"]["version"])
        if since is not None:
            figures = LoggedFigures.from_dict(remembered["results"]["figures"]).merged(logged_figures(since))
    if figures is None:
        figures = logged_figures(store.read(EVENT_LOG))
    if memo is not None:  # keyed by the log's table id: a log made again is read whole
        memo.remember(LOGGED, log_id, update_id, {"version": version, "figures": figures.as_dict()})
    return figures


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


def stale_keys_checks(figures: LoggedFigures, setting: StaleKeysCheck) -> list[Check]:
    """One check per gold table the event log gives a stale-keys figure for (its latest): it
    fails (or warns, as gold.yml's `stale_keys` says) while the table has stale keys."""
    return [stale_keys_check_of(dataset, stale, setting) for dataset, stale in sorted(figures.stale_keys.items())]


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


@dataclass(frozen=True)
class PlannedSuites:
    """The GX suites over one dataset, before any table is read: the tables they read, what
    they are beside those tables (the builder, the counts it compares with, the keys), and how
    to build them. A memo hit (`memo.py`) never reads the tables; a miss builds and runs them."""

    name: str  # the dataset they are named after
    reads: tuple[str, ...]
    definition: tuple[object, ...]
    build: Callable[[], list[SuiteInput]]


def gx_plans(store: DeltaStore, conf: PipelineConf, tables: Iterable[TableConf], logged: dict) -> list[PlannedSuites]:
    """Every GX suite of the storage's tables, planned (each table that exists)."""
    from cdc_medallion.quality import suites

    def logged_count(name: str, index: int = 0) -> int | None:
        return logged[name][index] if name in logged else None

    def one(name: str, builder: Callable[..., SuiteInput], *args: object) -> PlannedSuites:
        build = lambda: [builder(name, store.read(name), *args)]  # noqa: E731
        return PlannedSuites(name, (name,), (builder.__name__, *args), build)

    plans = []
    for source in conf.sources:
        bronze, silver = bronze_name(source.name), silver_name(source.name)
        quarantine = quarantine_name(silver)
        plans += [
            one(bronze, suites.bronze_suite, logged_count(bronze)),
            one(silver, suites.silver_suite, logged_count(silver)),
            one(quarantine, suites.quarantine_suite, logged_count(silver, 1)),
        ]
    for name, kind in ((SCHEMA_CHANGES, KIND_SCHEMA_CHANGE), (HEARTBEATS, KIND_HEARTBEAT)):
        plans.append(one(name, suites.side_suite, kind, logged_count(name)))
    for table in tables:
        gold, keys = table.gold_name, tuple(table.keys)
        if not keys or not store.exists(gold):
            continue
        plans.append(one(gold, suites.scd1_suite, keys))
        history = history_name(gold)
        if store.exists(history):

            def scd2(history: str = history, gold: str = gold, keys: tuple[str, ...] = keys) -> list[SuiteInput]:
                return suites.scd2_suites(history, store.read(history), store.read(gold), keys)

            plans.append(PlannedSuites(history, (history, gold), ("scd2_suites", keys), scd2))
        quarantine = quarantine_name(changes_name(gold))
        plans.append(one(quarantine, suites.quarantine_suite, None))
    return [plan for plan in plans if all(store.exists(name) for name in plan.reads)]


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
    memo = QualityMemo(store, quality_dir(store.root))
    for source in conf.sources:
        bronze = bronze_name(source.name)
        if not store.exists(bronze):
            continue
        silver = silver_name(source.name)
        quarantine = quarantine_name(silver)
        check_name = f"{ACCOUNTING}/{source.name}"
        key = memo.key(check_name, (bronze, silver, quarantine), source.name)
        if (recalled := memo.recall(check_name, key)) is not None:
            accounted = SourceAccounting.from_dict(recalled["results"])
            result.reused[check_name] = recalled["update_id"]
        else:
            accounted = account_source(
                source.name,
                store.read(bronze),
                store.read(silver) if store.exists(silver) else None,
                store.read(quarantine) if store.exists(quarantine) else None,
            )
            memo.remember(check_name, key, update_id, accounted.as_dict())
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
                    **_reused(result, check_name),
                }
            },
            dataset=source.name,
            level="INFO" if accounted.balanced else "WARN",
        )
    figures = logged(store, memo, update_id)
    stale = stale_keys_checks(figures, stale_keys_check(conf.expectations))
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
        from cdc_medallion.quality.suites import SUITE, docs_index, run_suites

        checks, to_run, planned = [], [], {}
        for plan in gx_plans(store, conf, tables, figures.rows):
            check_name = f"{SUITE}/{plan.name}"
            key = memo.key(check_name, plan.reads, plan.definition)
            if (recalled := memo.recall(check_name, key)) is not None:
                checks.extend(Check(**c) for c in recalled["results"])
                result.reused.update({f"{SUITE}/{c['dataset']}": recalled["update_id"] for c in recalled["results"]})
            else:
                built = plan.build()
                to_run += built
                planned[check_name] = (key, {suite.dataset for suite in built})
        if to_run or not docs_index(store.root / SYSTEM_DIR).is_file():
            ran, docs = run_suites(to_run, quality_dir(store.root), run_name=update_id)
        else:  # nothing to validate: GX (seconds to import) is not started, its Data Docs stand
            ran, docs = [], docs_index(store.root / SYSTEM_DIR)
        for check_name, (key, datasets) in planned.items():
            memo.remember(check_name, key, update_id, [c.as_dict() for c in ran if c.dataset in datasets])
        checks.extend(ran)
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
                {
                    QUALITY_CHECK: {
                        "suite": SUITE,
                        "data_docs": docs_path,
                        "checks": [c.as_dict() for c in found],
                        **_reused(result, f"{SUITE}/{dataset}"),
                    }
                },
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
    memo.save()
    reused = f"; {len(result.reused)} taken from earlier updates, their tables unchanged" if result.reused else ""
    say(
        f"quality: {len(result.checks)} checks, {len(result.failed)} failed, {len(result.warnings)} warning(s)"
        f" ({result.seconds:.1f}s{reused})"
    )
    return result


def _reused(result: QualityResult, check: str) -> dict[str, str]:
    """An event's `reused_from`: the update whose results a check took again, if it did."""
    update = result.reused.get(check)
    return {REUSED_FROM: update} if update is not None else {}
