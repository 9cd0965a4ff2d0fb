"""The quality report: self-contained HTML pages built from an event log (and, where they can be
read, the pipeline's tables).

- `report_for_storage(storage, output)`: a local pipeline's storage → `index.html` (the latest
  update, trends across updates, the tables' current state) and one `update-*.html` per update.
- `report_from_event_log(event_log_df, quarantine=..., heartbeats=...)`: the same index page from
  a Databricks pipeline event log DataFrame (and optionally its quarantine / heartbeat tables).
- `report_for_event_log_table(spark, name, output)`: what `cdc-medallion report
  --event-log-table NAME` (the Databricks job) runs.

This module gathers the facts and computes what each section shows, as plain values; the markup
is in `templates/` (Jinja2, autoescaped: rendering.py), charts laid out by charts.py. Pages hold
no script and load nothing: styles inline, charts inline SVG. Every number shown sits in an
element with `data-*` attributes, so tests (and scrapers) read them. Raw messages are cut to
`RAW_LIMIT` characters; nothing from the conf is shown.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from cdc_medallion.catalog import dataset_status
from cdc_medallion.names import BRONZE, HEARTBEATS, quarantine_name
from cdc_medallion.quality import charts
from cdc_medallion.quality.accounting import LABELS, OUTCOMES, SourceAccounting
from cdc_medallion.quality.events import Check, DatasetRun, ExpectationRun, StaleKeys, Update, read_event_log
from cdc_medallion.quality.figures import TOP_REASONS, HeartbeatLag, QuarantineReason
from cdc_medallion.quality.rendering import render
from cdc_medallion.quality.stored import Stored, read_stored
from cdc_medallion.quality.table_figures import heartbeat_lag, quarantine_reasons


@dataclass
class TableState:
    """What the tables held when their figures were computed (everything here is optional)."""

    as_of: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    quarantine: list[QuarantineReason] = field(default_factory=list)
    quarantine_rows: dict[str, int] = field(default_factory=dict)
    heartbeats: list[HeartbeatLag] | None = None
    accounting: list[SourceAccounting] | None = None
    row_counts: list[dict[str, Any]] | None = None
    figured_by: Update | None = None  # the update that stored the figures (None: computed now)
    accounted_by: Update | None = None  # the update whose quality step recorded the accounting


def table_state(stored: Stored, storage: Path) -> TableState:
    """What the runs stored about the tables (`stored.py`): the latest table figures and source
    accounting, with the row counts each table's log gives now. No table is read."""
    status = dataset_status(Path(storage))
    state = TableState(row_counts=[{k: e[k] for k in ("name", "layer", "rows")} for e in status])
    if (figures := stored.figures) is not None:
        state.as_of, state.quarantine = figures.as_of, figures.quarantine
        state.quarantine_rows, state.heartbeats = figures.quarantine_rows, figures.heartbeats
        state.figured_by = stored.figures_update
    state.accounting = stored.accounting
    state.accounted_by = stored.accounting_update
    return state


# --- pages ----------------------------------------------------------------------------------------
# What each section shows, as plain values; the markup is templates/*.html.j2 (rendering.py).
@dataclass
class UpdateHeader:
    """The update a page's header names, with its badges' counts."""

    update_id: str
    started: str
    state: str
    failed_expectations: int  # expectations with failing records
    failed_checks: int
    warnings: int
    unbalanced: list[str] | None = None  # sources whose accounting does not add up; None: not shown
    stale_tables: int | None = None  # gold tables with stale keys; None: no table logged a figure


@dataclass
class DatasetRow:
    name: str
    update: Update  # the update these numbers are from
    run: DatasetRun
    trend: charts.Sparkline


@dataclass
class ExpectationRow:
    dataset: str
    rule: str
    update: Update
    counted: ExpectationRun
    failed_percent: float | None  # None: no record evaluated
    trend: charts.Sparkline


@dataclass
class ExpectationsView:
    latest_per_dataset: bool  # each row from the latest update that processed its dataset
    datasets: list[DatasetRow]
    expectations: list[ExpectationRow]


@dataclass
class ChecksView:
    docs_href: str | None
    failing: list[Check]  # errors first, then warnings
    passing: list[Check]
    failed: int  # failing checks of severity "error"
    warnings: int


@dataclass
class AccountingView:
    as_of: str
    sources: list[SourceAccounting] | None  # None: neither read from the tables nor recorded
    columns: list[tuple[str, str]] = field(default_factory=list)  # (outcome, label) of the columns shown
    outcomes: tuple[str, ...] = OUTCOMES  # every outcome's count is in a data-* attribute
    unknown_refs: bool = False  # a column for refs bronze does not hold


@dataclass
class HeldView:
    total: int | None  # None: not available
    messages: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)  # (source, held sample)


@dataclass
class LayerRow:
    name: str
    tables: int
    rows: int
    largest: list[tuple[str, int]]


@dataclass
class StaleRow:
    """A gold table's stale keys, as the latest update (up to the page's) that logged them."""

    dataset: str
    update: Update
    stale: StaleKeys


@dataclass
class RunRow:
    update: Update
    failed_expectations: int
    quarantined: int
    failed_checks: int


def _failed_checks(update: Update) -> list[Check]:
    return [c for c in update.checks if not c.success and c.severity == "error"]


def _trend(updates: list[Update], upto: int, dataset: str, rule: str | None, what: str) -> list[float]:
    """The number across the updates (up to `upto`) that reported it."""
    values = []
    for update in updates[: upto + 1]:
        if rule is not None:
            if (counted := update.expectations.get((dataset, rule))) is not None:
                values.append(float(counted.failed))
        elif (run := update.datasets.get(dataset)) is not None:
            values.append(float(getattr(run, what) or 0))
    return values


def _overview(updates: list[Update], upto: int) -> list[charts.StackedBars]:
    shown = updates[: upto + 1]
    labels = [u.label for u in shown]
    failed = [float(sum(e.failed for e in u.expectations.values())) for u in shown]
    dropped = [float(sum(d.dropped for d in u.datasets.values())) for u in shown]
    quarantined = [float(sum(d.quarantined or 0 for d in u.datasets.values())) for u in shown]
    passed = [float(sum(e.passed for e in u.expectations.values())) for u in shown]
    rows = [float(sum(d.output_rows for d in u.datasets.values())) for u in shown]
    checks_failed = [float(len(_failed_checks(u))) for u in shown]
    return [
        charts.stacked_bars(
            labels,
            [
                ("failed", charts.FAILED, failed),
                ("dropped", charts.DROPPED, dropped),
                ("quarantined", charts.QUARANTINED, quarantined),
            ],
            "Records failing expectations, dropped, quarantined per update",
            highlight=upto,
        ),
        charts.stacked_bars(
            labels,
            [("passed", charts.PASSED, passed), ("failed", charts.FAILED, failed)],
            "Expectation evaluations passed / failed per update",
            highlight=upto,
        ),
        charts.stacked_bars(labels, [("rows written", charts.ROWS, rows)], "Rows written per update", highlight=upto),
        charts.stacked_bars(
            labels,
            [("failed checks", charts.FAILED, checks_failed)],
            "Failed accounting / GX checks per update",
            highlight=upto,
        ),
    ]


def _expectations(updates: list[Update], upto: int, latest_per_dataset: bool = False) -> ExpectationsView:
    """This update's datasets and expectations; with `latest_per_dataset`, each dataset's numbers
    from the latest update that processed it (a local run's last update may be gold only)."""
    shown = updates[: upto + 1] if latest_per_dataset else [updates[upto]]
    runs: dict[str, tuple[Update, DatasetRun]] = {}
    counts: dict[tuple[str, str], tuple[Update, ExpectationRun]] = {}
    for update in shown:
        runs.update({name: (update, run) for name, run in update.datasets.items()})
        counts.update({key: (update, counted) for key, counted in update.expectations.items()})
    datasets = [
        DatasetRow(
            name, update, run, charts.sparkline(_trend(updates, upto, name, None, "quarantined"), charts.QUARANTINED)
        )
        for name, (update, run) in sorted(runs.items())
    ]
    expectations = []
    for (dataset, rule), (update, counted) in sorted(counts.items()):
        total = counted.passed + counted.failed
        share = 100 * counted.failed / total if total else None
        trend = charts.sparkline(_trend(updates, upto, dataset, rule, "failed"))
        expectations.append(ExpectationRow(dataset, rule, update, counted, share, trend))
    return ExpectationsView(latest_per_dataset, datasets, expectations)


def _stale(updates: list[Update], upto: int) -> list[StaleRow]:
    """Each gold table's stale keys from the latest update up to `upto` whose flows logged a
    figure (a batch that changed nothing there logs none; the figure before it holds)."""
    found: dict[str, tuple[Update, StaleKeys]] = {}
    for update in updates[: upto + 1]:
        for name, run in update.datasets.items():
            if run.stale is not None:
                found[name] = (update, run.stale)
    return [StaleRow(name, update, stale) for name, (update, stale) in sorted(found.items())]


def _checks(checks: list[Check], docs_href: str | None) -> ChecksView:
    order = sorted(checks, key=lambda c: (c.success, c.severity != "error", c.suite, c.dataset, c.name))
    failing = [c for c in order if not c.success]
    errors = len([c for c in failing if c.severity == "error"])
    return ChecksView(docs_href, failing, [c for c in order if c.success], errors, len(failing) - errors)


def _accounting(accounting: list[SourceAccounting] | None, as_of: str) -> AccountingView:
    if accounting is None:
        return AccountingView(as_of, None)
    always = ("change", "quarantined", "held")
    columns = [(o, LABELS[o]) for o in OUTCOMES if o in always or any(a.outcomes.get(o) for a in accounting)]
    return AccountingView(as_of, accounting, columns, unknown_refs=any(a.unknown_refs for a in accounting))


def _held(accounting: list[SourceAccounting] | None) -> HeldView:
    if accounting is None:
        return HeldView(None)
    total = sum(a.outcomes.get("held", 0) for a in accounting)
    return HeldView(total, [(a.source, h) for a in accounting for h in a.held])


def _quarantine_chart(reasons: list[QuarantineReason]) -> charts.HorizontalBars:
    items = [(f"{r.dataset} · {r.rule}", float(r.count)) for r in reasons[:TOP_REASONS]]
    return charts.horizontal_bars(items, "Quarantined rows by failed rule", charts.QUARANTINED)


def _heartbeat_chart(heartbeats: list[HeartbeatLag] | None) -> charts.HorizontalBars | None:
    """The latest lag per source, in the largest unit the largest lag fills twice."""
    if not heartbeats:
        return None
    peak = max((h.latest_lag_seconds or 0) for h in heartbeats)
    unit, size = next(
        ((u, n) for u, n in (("days", 86400), ("hours", 3600), ("minutes", 60)) if peak >= 2 * n), ("s", 1)
    )
    items = [(h.source, float(h.latest_lag_seconds or 0) / size) for h in heartbeats]
    return charts.horizontal_bars(items, f"Latest heartbeat lag ({unit})", charts.ROWS, unit=f" {unit}")


def _layers(row_counts: list[dict[str, Any]] | None) -> list[LayerRow]:
    layers: dict[str, list[dict[str, Any]]] = {}
    for entry in row_counts or []:
        layers.setdefault(entry["layer"], []).append(entry)
    return [
        LayerRow(
            layer,
            len(entries),
            sum(e["rows"] for e in entries),
            [(e["name"], e["rows"]) for e in sorted(entries, key=lambda e: -e["rows"])[:4]],
        )
        for layer, entries in layers.items()
    ]


def _runs(updates: list[Update]) -> list[RunRow]:
    """The updates, latest first."""
    return [
        RunRow(
            update,
            sum(e.failed for e in update.expectations.values()),
            sum(d.quarantined or 0 for d in update.datasets.values()),
            len(_failed_checks(update)),
        )
        for update in reversed(updates)
    ]


def _header(
    update: Update | None, state: TableState | None, stale: list[StaleRow] | None = None
) -> UpdateHeader | None:
    if update is None:
        return None
    header = UpdateHeader(
        update.update_id,
        update.label.split(" · ")[0],
        update.state or "?",
        failed_expectations=sum(1 for e in update.expectations.values() if e.failed),
        failed_checks=len(_failed_checks(update)),
        warnings=len([c for c in update.checks if not c.success and c.severity != "error"]),
    )
    if state is not None and state.accounting is not None:
        header.unbalanced = [a.source for a in state.accounting if not a.balanced]
    if stale:
        header.stale_tables = sum(1 for row in stale if row.stale.keys)
    return header


def render_index(updates: list[Update], state: TableState | None, title: str, docs_href: str | None = None) -> str:
    """The overview: the latest update, trends across updates, the tables' current state."""
    latest = len(updates) - 1
    state_label = f"tables as of {state.as_of:%Y-%m-%d %H:%M:%S} UTC" if state else "tables not read"
    if state is not None and state.figured_by is not None:
        state_label += f", figured by update {state.figured_by.label}"
    state = state or TableState()
    accounting = state.accounting
    if state.accounted_by is not None:
        state_label += f"; accounting as recorded by update {state.accounted_by.label}"
    elif accounting is None and updates and updates[-1].accounting:
        accounting = [SourceAccounting.from_dict(raw) for raw in updates[-1].accounting]
        state_label += "; accounting as recorded by the latest update"
    current = None
    if updates:  # the header counts each expectation from the latest update that reported it
        current = Update(updates[-1].update_id, updates[-1].started, updates[-1].ended, updates[-1].state)
        current.checks = updates[-1].checks
        for update in updates:
            current.expectations.update(update.expectations)
    stale = _stale(updates, latest)
    return render(
        "index.html.j2",
        title=title,
        header=_header(current, state if state.accounting is not None else None, stale),
        stale=stale,
        docs_href=docs_href,
        accounting=_accounting(accounting, state_label),
        trends=_overview(updates, latest) if updates else [],
        expectations=_expectations(updates, latest, latest_per_dataset=True) if updates else None,
        checks=_checks(updates[-1].checks, docs_href) if updates else None,
        quarantine=state.quarantine,
        quarantine_rows=sorted(state.quarantine_rows.items()),
        quarantine_chart=_quarantine_chart(state.quarantine),
        heartbeats=state.heartbeats,
        heartbeats_chart=_heartbeat_chart(state.heartbeats),
        held=_held(accounting),
        layers=_layers(state.row_counts),
        datasets=state.row_counts,
        runs=_runs(updates),
    )


def render_update(updates: list[Update], index: int, title: str, docs_href: str | None) -> str:
    """One update: its expectations and checks, with the trend up to it."""
    update = updates[index]
    recorded = [SourceAccounting.from_dict(raw) for raw in update.accounting]
    stale = _stale(updates, index)
    return render(
        "update.html.j2",
        title=title,
        update=update,
        header=_header(update, None, stale),
        stale=stale,
        previous=updates[index - 1] if index > 0 else None,
        next=updates[index + 1] if index + 1 < len(updates) else None,
        trends=_overview(updates, index),
        expectations=_expectations(updates, index),
        checks=_checks(update.checks, docs_href),
        accounting=_accounting(recorded, "as recorded after this update") if recorded else None,
    )


def build_pages(
    updates: list[Update],
    state: TableState | None,
    title: str,
    docs_href: str | None = None,
    page_docs: str | None = None,
) -> dict[str, str]:
    """filename -> HTML: index.html and one page per update (`page_docs`: docs link from there)."""
    pages = {"index.html": render_index(updates, state, title, docs_href)}
    for i, update in enumerate(updates):
        pages[f"{update.slug}.html"] = render_update(updates, i, title, page_docs or docs_href)
    return pages


def write_pages(pages: Mapping[str, str], output: Path) -> Path:
    output.mkdir(parents=True, exist_ok=True)
    for name, html in pages.items():
        staged = output / f".{name}.tmp"
        staged.write_text(html, encoding="utf-8")
        os.replace(staged, output / name)
    return output / "index.html"


# --- entry points ---------------------------------------------------------------------------------
def report_from_event_log(
    event_log: DataFrame,
    quarantine: DataFrame | Mapping[str, DataFrame] | None = None,
    heartbeats: DataFrame | None = None,
    title: str = "Pipeline data quality",
    max_updates: int = 50,
    docs_href: str | None = None,
) -> str:
    """The index page from a (Databricks or local) event log DataFrame, optionally with the
    pipeline's quarantine table(s) (a DataFrame, or name -> DataFrame) and heartbeat table."""
    updates = read_event_log(event_log, max_updates)
    state = TableState()
    if quarantine is not None:
        tables = quarantine if isinstance(quarantine, Mapping) else {"quarantine": quarantine}
        state.quarantine, state.quarantine_rows = quarantine_reasons(tables)
    if heartbeats is not None:
        state.heartbeats = heartbeat_lag(heartbeats)
    return render_index(updates, state, title, docs_href)


def report_for_storage(storage: Path, output: Path | None = None, spark: Any = None, max_updates: int = 50) -> Path:
    """Write the report of a local pipeline's storage; returns the index page. It reads the event
    log only (`stored.py`: without a JVM unless given a Spark session), not the tables."""
    from cdc_medallion.quality.checks import quality_dir
    from cdc_medallion.quality.suites import DOCS_INDEX

    storage = Path(storage).resolve()
    output = Path(output or quality_dir(storage) / "report").resolve()
    stored = read_stored(storage, max_updates, spark)
    state = table_state(stored, storage)
    docs = quality_dir(storage) / DOCS_INDEX
    href = os.path.relpath(docs, output) if docs.is_file() else None
    title = f"Data quality · {stored.pipeline_name or storage.name}"
    return write_pages(build_pages(stored.updates, state, title, href), output)


def report_for_event_log_table(
    spark: Any, table: str, output: Path, tables_schema: str | None = None, max_updates: int = 50
) -> Path:
    """`cdc-medallion report --event-log-table NAME`: the Databricks pipeline's report.

    With `tables_schema` (catalog.schema of the pipeline's datasets), the quarantine tables the
    event log names and `silver_heartbeats` are read from it too."""
    events = spark.table(table)
    updates = read_event_log(events, max_updates)
    state = TableState(heartbeats=None)
    if tables_schema:
        names = {d for u in updates for d in u.datasets}
        quarantines = {}
        for name in sorted(names):
            qualified = f"{tables_schema}.{quarantine_name(name)}"
            if spark.catalog.tableExists(qualified):
                quarantines[quarantine_name(name)] = spark.table(qualified)

        def bronze() -> list:  # read only when a sample needs its raw message
            return [
                spark.table(f"{tables_schema}.{name}")
                for name in sorted(names)
                if name.startswith(f"{BRONZE}_") and spark.catalog.tableExists(f"{tables_schema}.{name}")
            ]

        state.quarantine, state.quarantine_rows = quarantine_reasons(quarantines, bronze)
        heartbeats = f"{tables_schema}.{HEARTBEATS}"
        if spark.catalog.tableExists(heartbeats):
            state.heartbeats = heartbeat_lag(spark.table(heartbeats))
    pipeline = table.rsplit(".", 1)[-1]
    return write_pages(build_pages(updates, state, f"Data quality · {pipeline}"), Path(output))
