"""The quality report: self-contained HTML pages built from an event log (and, where they can be
read, the pipeline's tables).

- `report_for_storage(storage, output)`: a local pipeline's storage → `index.html` (the latest
  update, trends across updates, the tables' current state) and one `update-*.html` per update.
- `report_from_event_log(event_log_df, quarantine=..., heartbeats=...)`: the same index page from
  a Databricks pipeline event log DataFrame (and optionally its quarantine / heartbeat tables).
- `report_for_event_log_table(spark, name, output)`: what `cdc-medallion report
  --event-log-table NAME` (the Databricks job) runs.

Pages hold no script and load nothing: styles inline, charts inline SVG (charts.py). Every
number shown sits in an element with `data-*` attributes, so tests (and scrapers) read them.
Raw messages are escaped and cut to `RAW_LIMIT` characters; nothing from the conf is shown.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion.model import bronze_ref_column
from cdc_medallion.quality import charts
from cdc_medallion.quality.accounting import LABELS, OUTCOMES, SourceAccounting
from cdc_medallion.quality.events import Check, DatasetRun, ExpectationRun, Update, read_event_log

RAW_LIMIT = 600
TOP_REASONS = 10
SAMPLES_PER_REASON = 3


@dataclass
class QuarantineReason:
    dataset: str
    rule: str
    count: int
    samples: list[dict[str, str | None]] = field(default_factory=list)


@dataclass
class HeartbeatLag:
    source: str
    count: int
    latest_event: dt.datetime | None
    latest_lag_seconds: float | None
    max_lag_seconds: float | None


@dataclass
class TableState:
    """What the tables hold at report time (everything here is optional)."""

    as_of: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    quarantine: list[QuarantineReason] = field(default_factory=list)
    quarantine_rows: dict[str, int] = field(default_factory=dict)
    heartbeats: list[HeartbeatLag] | None = None
    accounting: list[SourceAccounting] | None = None
    row_counts: list[dict[str, Any]] | None = None


# --- facts from tables ----------------------------------------------------------------------------
def quarantine_reasons(
    tables: Mapping[str, DataFrame], bronze: list[DataFrame] | None = None
) -> tuple[list[QuarantineReason], dict[str, int]]:
    """Top (dataset, failed rule) pairs over quarantine tables, with sample rows. A row quarantined
    by a rule (not a parse error) carries no raw message: given the bronze tables, the sample shows
    the bronze message it points to."""
    reasons: list[QuarantineReason] = []
    totals: dict[str, int] = {}
    for dataset, df in tables.items():
        if "failed_expectations" not in df.columns:
            continue
        ref = next((c for c in ("bronze_ref", "__bronze_ref") if c in df.columns), None)
        totals[dataset] = df.count()
        exploded = df.select("*", F.explode_outer("failed_expectations").alias("__rule"))
        counts = exploded.groupBy("__rule").count().orderBy(F.desc("count"), "__rule").limit(TOP_REASONS).collect()
        for row in counts:
            rule = row["__rule"] or "(no rule named)"
            picked = exploded.filter(
                F.col("__rule") == row["__rule"] if row["__rule"] is not None else F.col("__rule").isNull()
            )
            if ref:
                picked = picked.orderBy(ref)
            samples = []
            for sample in picked.limit(SAMPLES_PER_REASON).collect():
                values = sample.asDict(recursive=True)
                raw = values.get("raw_message")
                if raw is None and "raw_message" not in values:  # a typed row (gold's change feed)
                    raw = json.dumps(
                        {k: v for k, v in values.items() if not k.startswith("__") and k != "failed_expectations"},
                        default=str,
                    )
                reason = values.get("error") or values.get("detail") or "; ".join(values.get("__cast_errors") or [])
                if values.get("flags"):
                    reason = f"{reason or ''} flags: {', '.join(values['flags'])}".strip()
                samples.append(
                    {
                        "bronze_ref": values.get(ref) if ref else None,
                        "error": reason,
                        "raw": None if raw is None else str(raw)[:RAW_LIMIT],
                    }
                )
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
    """Per source: heartbeats seen, the latest one's lag (ingest_ts - event_ts) and the largest."""
    lag = F.col("ingest_ts").cast("double") - F.col("event_ts").cast("double")
    rows = (
        heartbeats.filter(F.col("event_ts").isNotNull())
        .groupBy(F.coalesce("source_name", F.lit("?")).alias("source"))
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.max("event_ts").alias("latest"),
            F.max_by(lag, F.col("event_ts")).alias("latest_lag"),
            F.max(lag).alias("max_lag"),
        )
        .orderBy("source")
        .collect()
    )
    without_time = heartbeats.filter(F.col("event_ts").isNull()).groupBy("source_name").count().collect()
    found = [HeartbeatLag(r["source"], r["n"], r["latest"], r["latest_lag"], r["max_lag"]) for r in rows]
    for r in without_time:
        found.append(HeartbeatLag(r["source_name"] or "?", r["count"], None, None, None))
    return found


def table_state_from_storage(storage: Path, spark: Any) -> TableState:
    from cdc_medallion.catalog import dataset_status
    from cdc_medallion.quality.accounting import account_source
    from cdc_medallion.storage.delta_store import DeltaStore

    store = DeltaStore(storage, spark)
    status = dataset_status(storage)
    state = TableState(row_counts=[{k: e[k] for k in ("name", "layer", "rows")} for e in status])
    quarantines = {e["name"]: store.read(e["name"]) for e in status if e["layer"] == "quarantine" and e["rows"]}
    bronze = [store.read(e["name"]) for e in status if e["layer"] == "bronze"]
    state.quarantine, state.quarantine_rows = quarantine_reasons(quarantines, bronze)
    names = {e["name"]: e for e in status}
    state.heartbeats = heartbeat_lag(store.read("silver_heartbeats")) if "silver_heartbeats" in names else []
    state.accounting = []
    for entry in status:
        if entry["layer"] != "bronze":
            continue
        source = store.properties(entry["name"]).get("source") or entry["name"].removeprefix("bronze_")
        silver = f"silver_{source}"
        state.accounting.append(
            account_source(
                source,
                store.read(entry["name"]),
                store.read(silver) if silver in names else None,
                store.read(f"{silver}_quarantine") if f"{silver}_quarantine" in names else None,
            )
        )
    return state


# --- HTML -----------------------------------------------------------------------------------------
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:14px 24px}header a{color:#b3e5fc}
header h1{margin:0 0 4px;font-size:20px}main{padding:8px 24px 40px;max-width:1200px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:6px 0}
th,td{border:1px solid #e0e0e0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bad{background:#ffebee;color:#b71c1c;font-weight:600}.warn{background:#fff3e0;color:#e65100}
.ok{color:#2e7d32}.muted{color:#777}.badge{display:inline-block;padding:2px 8px;border-radius:10px;margin-right:6px;
font-size:12px;background:#e8f5e9;color:#1b5e20}.badge.bad{background:#ffcdd2}.badge.warn{background:#ffe0b2}
pre{white-space:pre-wrap;word-break:break-all;margin:2px 0;font-size:11px;background:#f5f5f5;padding:4px;
max-width:760px}
.charts svg{margin:6px 12px 6px 0;background:#fff;border:1px solid #eee}nav a{margin-right:10px}
"""


def _page(title: str, header: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<header>{header}</header><main>{''.join(body)}</main></body></html>"
    )


def _attrs(**values: Any) -> str:
    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return "".join(f' data-{k.replace("_", "-")}="{escape(text(v))}"' for k, v in values.items() if v is not None)


def _table_head(*names: str) -> str:
    return "<table><tr>" + "".join(f"<th>{escape(n)}</th>" for n in names) + "</tr>"


def _num(value: Any) -> str:
    return "" if value is None else f"{value:,}" if isinstance(value, int) else escape(str(value))


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    value = float(value)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.1f} s"


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


def _overview(updates: list[Update], upto: int) -> list[str]:
    shown = updates[: upto + 1]
    labels = [u.label for u in shown]
    failed = [float(sum(e.failed for e in u.expectations.values())) for u in shown]
    dropped = [float(sum(d.dropped for d in u.datasets.values())) for u in shown]
    quarantined = [float(sum(d.quarantined or 0 for d in u.datasets.values())) for u in shown]
    passed = [float(sum(e.passed for e in u.expectations.values())) for u in shown]
    rows = [float(sum(d.output_rows for d in u.datasets.values())) for u in shown]
    checks_failed = [float(len([c for c in u.checks if not c.success and c.severity == "error"])) for u in shown]
    return [
        '<div class="charts">',
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
        "</div>",
    ]


def _expectations_table(updates: list[Update], upto: int, latest_per_dataset: bool = False) -> list[str]:
    """This update's datasets and expectations; with `latest_per_dataset`, each dataset's numbers
    from the latest update that processed it (a local run's last update may be gold only)."""
    shown = updates[: upto + 1] if latest_per_dataset else [updates[upto]]
    runs: dict[str, tuple[Update, DatasetRun]] = {}
    counts: dict[tuple[str, str], tuple[Update, ExpectationRun]] = {}
    for update in shown:
        runs.update({name: (update, run) for name, run in update.datasets.items()})
        counts.update({key: (update, counted) for key, counted in update.expectations.items()})
    title = "Expectations per dataset" + (
        " (each from the latest update that processed it)" if latest_per_dataset else ""
    )
    out = [f'<h2 id="expectations">{title}</h2>']
    if not runs and not counts:
        return [*out, '<p class="muted">No flow progress recorded.</p>']

    def when(update: Update) -> str:
        return f"<td><a href='{update.slug}.html'>{escape(update.label)}</a></td>" if latest_per_dataset else ""

    update_head = ("update",) if latest_per_dataset else ()
    out.append(_table_head("dataset", *update_head, "rows written", "dropped", "quarantined", "quarantined trend"))
    for name, (update, run) in sorted(runs.items()):
        out.append(
            f"<tr class='dataset-run'"
            f"{_attrs(dataset=name, rows=run.output_rows, dropped=run.dropped, quarantined=run.quarantined)}>"
            f"<td>{escape(name)}</td>{when(update)}<td class='n'>{_num(run.output_rows)}</td>"
            f"<td class='n {'bad' if run.dropped else ''}'>{_num(run.dropped)}</td>"
            f"<td class='n {'bad' if run.quarantined else ''}'>{_num(run.quarantined)}</td>"
            f"<td>{charts.sparkline(_trend(updates, upto, name, None, 'quarantined'), charts.QUARANTINED)}</td></tr>"
        )
    out.append("</table>")
    out.append(_table_head("dataset", "expectation", *update_head, "passed", "failed", "failed %", "failed trend"))
    for (dataset, rule), (update, counted) in sorted(counts.items()):
        total = counted.passed + counted.failed
        share = f"{100 * counted.failed / total:.1f}%" if total else "–"
        cls = "bad" if counted.failed else "ok"
        out.append(
            f"<tr class='expectation'"
            f"{_attrs(dataset=dataset, expectation=rule, passed=counted.passed, failed=counted.failed)}>"
            f"<td>{escape(dataset)}</td><td>{escape(rule)}</td>{when(update)}<td class='n'>{_num(counted.passed)}</td>"
            f"<td class='n {cls}'>{_num(counted.failed)}</td><td class='n'>{share}</td>"
            f"<td>{charts.sparkline(_trend(updates, upto, dataset, rule, 'failed'))}</td></tr>"
        )
    out.append("</table>")
    return out


def _checks_table(checks: list[Check], docs_href: str | None) -> list[str]:
    out = ['<h2 id="checks">Accounting and Great Expectations checks</h2>']
    if docs_href:
        out.append(f'<p><a id="gx-docs" href="{escape(docs_href)}">Great Expectations Data Docs</a></p>')
    if not checks:
        return [*out, '<p class="muted">No checks recorded for this update (run without quality checks).</p>']
    order = sorted(checks, key=lambda c: (c.success, c.severity != "error", c.suite, c.dataset, c.name))
    failing = [c for c in order if not c.success]
    passing = [c for c in order if c.success]
    out.append(
        f"<p{_attrs(checks=len(checks), failed=len([c for c in failing if c.severity == 'error']))}>"
        f"{len(checks):,} checks: {len(passing):,} passed, "
        f"{len([c for c in failing if c.severity == 'error']):,} failed, "
        f"{len([c for c in failing if c.severity != 'error']):,} warning(s).</p>"
    )
    for group, rows in (("failed", failing), ("passed", passing)):
        if not rows:
            continue
        if group == "passed":
            out.append(f"<details><summary>{len(rows):,} passed checks</summary>")
        out.append(_table_head("suite", "dataset", "check", "result", "passed", "failed", "observed", "expected"))
        for c in rows:
            out.append(_check_row(c))
        out.append("</table>" + ("</details>" if group == "passed" else ""))
    return out


def _check_row(c: Check) -> str:
    cls = "ok" if c.success else ("bad" if c.severity == "error" else "warn")
    verdict = "passed" if c.success else ("FAILED" if c.severity == "error" else "warning")
    return (
        f"<tr class='check {cls}'"
        f"{_attrs(suite=c.suite, dataset=c.dataset, check=c.name, success=c.success, failed=c.failed)}>"
        f"<td>{escape(c.suite)}</td><td>{escape(c.dataset)}</td>"
        f"<td title='{escape(c.description)}'>{escape(c.name)}</td><td class='{cls}'>{verdict}</td>"
        f"<td class='n'>{_num(c.passed)}</td><td class='n'>{_num(c.failed)}</td>"
        f"<td>{escape(c.observed)}</td><td>{escape(c.expected)}</td></tr>"
    )


def _accounting(accounting: list[SourceAccounting] | None, as_of: str) -> list[str]:
    out = [
        f'<h2 id="accounting">Accounting: every bronze message accounted for <span class="muted">({as_of})</span></h2>'
    ]
    if accounting is None:
        return [*out, '<p class="muted">Not available (bronze, silver and quarantine tables were not given).</p>']
    always = ("change", "quarantined", "held")
    shown = [o for o in OUTCOMES if o in always or any(a.outcomes.get(o) for a in accounting)]
    unknown = any(a.unknown_refs for a in accounting)
    head = "".join(f"<th>{escape(LABELS[o])}</th>" for o in shown)
    out.append(
        f"<table><tr><th>source</th><th>bronze</th><th>status</th>{head}<th>unaccounted</th>"
        + ("<th>unknown refs</th>" if unknown else "")
        + "<th>redelivered</th></tr>"
    )
    for a in accounting:
        cls = "ok" if a.balanced else "bad"
        cells = "".join(f"<td class='n'>{_num(a.outcomes.get(o, 0))}</td>" for o in shown)
        attrs = _attrs(
            source=a.source,
            bronze=a.bronze,
            accounted=a.accounted,
            unaccounted=a.unaccounted,
            unknown_refs=a.unknown_refs,
            redelivered=a.redelivered,
            balanced=a.balanced,
            **{f"outcome_{o}": a.outcomes.get(o, 0) for o in OUTCOMES},
        )
        status = "balanced" if a.balanced else "MISMATCH"
        out.append(
            f"<tr class='accounting {'' if a.balanced else 'bad'}'{attrs}><td>{escape(a.source)}</td>"
            f"<td class='n'>{_num(a.bronze)}</td><td class='{cls}' title='{escape(a.equation())}'>{status}</td>"
            f"{cells}<td class='n {'bad' if a.unaccounted else ''}'>{_num(a.unaccounted)}</td>"
            + (f"<td class='n {'bad' if a.unknown_refs else ''}'>{_num(a.unknown_refs)}</td>" if unknown else "")
            + f"<td class='n {'warn' if a.redelivered else ''}'>{_num(a.redelivered)}</td></tr>"
        )
    out.append("</table>")
    out.append(
        '<p class="muted">A message counts once, under its first outcome in this order (a message whose events '
        "consumed several messages names them in related_refs). Redelivered: messages whose bytes repeat "
        "an earlier message of the same topic and key (a warning: gold applies each change once).</p>"
    )
    bad = [a for a in accounting if not a.balanced]
    for a in bad:
        out.append(
            f"<p class='bad'>{escape(a.source)}: {escape(a.equation())}; "
            f"without outcome e.g. {escape(', '.join(a.unaccounted_samples) or '–')}</p>"
        )
    return out


def _held(accounting: list[SourceAccounting] | None) -> list[str]:
    out = ['<h2 id="held">Held: incomplete transactions and unpaired messages</h2>']
    if accounting is None:
        return [*out, '<p class="muted">Not available.</p>']
    held = [(a.source, h) for a in accounting for h in a.held]
    total = sum(a.outcomes.get("held", 0) for a in accounting)
    out.append(f"<p{_attrs(held_total=total)}>{total:,} message(s) held, re-read by the next run.</p>")
    if held:
        out.append(
            "<table><tr><th>source</th><th>bronze ref</th><th>transaction</th><th>table</th><th>why held</th></tr>"
        )
        for source, h in held:
            out.append(
                f"<tr class='held'{_attrs(source=source, ref=h.get('bronze_ref'))}><td>{escape(source)}</td>"
                f"<td>{escape(str(h.get('bronze_ref')))}</td><td>{escape(str(h.get('tx_id') or ''))}</td>"
                f"<td>{escape(str(h.get('source_table') or ''))}</td><td>{escape(str(h.get('detail') or ''))}</td></tr>"
            )
        out.append("</table>")
    return out


def _quarantine(state: TableState) -> list[str]:
    out = ['<h2 id="quarantine">Top quarantine reasons</h2>']
    if not state.quarantine:
        return [*out, '<p class="muted">Nothing quarantined.</p>']
    totals = ", ".join(f"{escape(k)}: {v:,}" for k, v in sorted(state.quarantine_rows.items()))
    out.append(f"<p>Quarantined rows per table: {totals}</p>")
    items = [(f"{r.dataset} · {r.rule}", float(r.count)) for r in state.quarantine[:TOP_REASONS]]
    chart = charts.horizontal_bars(items, "Quarantined rows by failed rule", charts.QUARANTINED)
    out.append(f'<div class="charts">{chart}</div>')
    out.append(_table_head("table", "failed rule", "rows", "samples (bronze ref, reason, raw message)"))
    for r in state.quarantine:
        samples = "".join(
            f"<div class='sample'{_attrs(ref=s.get('bronze_ref'))}><b>{escape(str(s.get('bronze_ref')))}</b> "
            f"{escape(str(s.get('error') or ''))}<pre>{escape(str(s.get('raw') or ''))}</pre></div>"
            for s in r.samples
        )
        out.append(
            f"<tr class='reason'{_attrs(dataset=r.dataset, rule=r.rule, count=r.count)}><td>{escape(r.dataset)}</td>"
            f"<td>{escape(r.rule)}</td><td class='n bad'>{r.count:,}</td><td>{samples}</td></tr>"
        )
    out.append("</table>")
    return out


def _heartbeats(state: TableState) -> list[str]:
    out = ['<h2 id="heartbeats">Heartbeat lag per source (landing time − source time)</h2>']
    if state.heartbeats is None:
        return [*out, '<p class="muted">Not available (no heartbeat table given).</p>']
    if not state.heartbeats:
        return [*out, '<p class="muted">No heartbeats received.</p>']
    peak = max((h.latest_lag_seconds or 0) for h in state.heartbeats)
    unit, size = next(
        ((u, n) for u, n in (("days", 86400), ("hours", 3600), ("minutes", 60)) if peak >= 2 * n), ("s", 1)
    )
    items = [(h.source, float(h.latest_lag_seconds or 0) / size) for h in state.heartbeats]
    chart = charts.horizontal_bars(items, f"Latest heartbeat lag ({unit})", charts.ROWS, unit=f" {unit}")
    out.append(f'<div class="charts">{chart}</div>')
    out.append(_table_head("source", "heartbeats", "latest source time", "latest lag", "max lag"))
    for h in state.heartbeats:
        out.append(
            f"<tr class='heartbeat'{_attrs(source=h.source, count=h.count, lag_seconds=h.latest_lag_seconds)}>"
            f"<td>{escape(h.source)}</td><td class='n'>{h.count:,}</td>"
            f"<td>{escape(str(h.latest_event or 'no event time'))}</td>"
            f"<td class='n'>{_seconds(h.latest_lag_seconds)}</td>"
            f"<td class='n'>{_seconds(h.max_lag_seconds)}</td></tr>"
        )
    out.append("</table>")
    return out


def _row_counts(state: TableState) -> list[str]:
    out = ['<h2 id="rows">Row counts per layer</h2>']
    if state.row_counts is None:
        return [*out, '<p class="muted">Not available.</p>']
    layers: dict[str, list[dict[str, Any]]] = {}
    for entry in state.row_counts:
        layers.setdefault(entry["layer"], []).append(entry)
    out.append("<table><tr><th>layer</th><th>tables</th><th>rows</th><th>largest</th></tr>")
    for layer, entries in layers.items():
        largest = ", ".join(f"{e['name']} ({e['rows']:,})" for e in sorted(entries, key=lambda e: -e["rows"])[:4])
        out.append(
            f"<tr class='layer'{_attrs(layer=layer, rows=sum(e['rows'] for e in entries))}><td>{escape(layer)}</td>"
            f"<td class='n'>{len(entries)}</td><td class='n'>{sum(e['rows'] for e in entries):,}</td>"
            f"<td>{escape(largest)}</td></tr>"
        )
    out.append(
        "</table><details><summary>every table</summary><table><tr><th>table</th><th>layer</th><th>rows</th></tr>"
    )
    for e in state.row_counts:
        out.append(
            f"<tr class='dataset'{_attrs(name=e['name'], rows=e['rows'])}><td>{escape(e['name'])}</td>"
            f"<td>{escape(e['layer'])}</td><td class='n'>{e['rows']:,}</td></tr>"
        )
    out.append("</table></details>")
    return out


def _runs(updates: list[Update]) -> list[str]:
    out = [
        '<h2 id="runs">Updates</h2><table><tr><th>update</th><th>state</th><th>failed flows</th>'
        "<th>failed expectations</th><th>quarantined</th><th>failed checks</th></tr>"
    ]
    for update in reversed(updates):
        failed = sum(e.failed for e in update.expectations.values())
        quarantined = sum(d.quarantined or 0 for d in update.datasets.values())
        bad_checks = len([c for c in update.checks if not c.success and c.severity == "error"])
        flows = escape(", ".join(update.failed_flows))
        out.append(
            f"<tr class='run'{_attrs(update=update.update_id)}>"
            f"<td><a href='{update.slug}.html'>{escape(update.label)}</a></td>"
            f"<td class='{'bad' if update.state == 'FAILED' else ''}'>{escape(update.state or '?')}</td>"
            f"<td class='failed-flows{' bad' if update.failed_flows else ''}'>{flows}</td>"
            f"<td class='n {'bad' if failed else ''}'>{failed:,}</td><td class='n'>{quarantined:,}</td>"
            f"<td class='n {'bad' if bad_checks else ''}'>{bad_checks}</td></tr>"
        )
    out.append("</table>")
    return out


def _badges(update: Update, state: TableState | None) -> str:
    failed = sum(1 for e in update.expectations.values() if e.failed)
    bad_checks = [c for c in update.checks if not c.success and c.severity == "error"]
    warnings = [c for c in update.checks if not c.success and c.severity != "error"]
    parts = [
        f"<span class='badge {'bad' if failed else ''}'>{failed} expectation(s) with failing records</span>",
        f"<span class='badge {'bad' if bad_checks else ''}'>{len(bad_checks)} failed check(s)</span>",
        f"<span class='badge {'warn' if warnings else ''}'>{len(warnings)} warning(s)</span>",
    ]
    if state is not None and state.accounting is not None:
        unbalanced = [a.source for a in state.accounting if not a.balanced]
        parts.append(
            f"<span class='badge {'bad' if unbalanced else ''}'>accounting: "
            f"{'MISMATCH in ' + ', '.join(unbalanced) if unbalanced else 'every message accounted for'}</span>"
        )
    return "".join(parts)


def _header(title: str, update: Update | None, state: TableState | None, links: str) -> str:
    sub = ""
    if update is not None:
        sub = (
            f"<div>update <code>{escape(update.update_id)}</code> · {escape(update.label.split(' · ')[0])} · "
            f"state {escape(update.state or '?')}</div><div style='margin-top:6px'>{_badges(update, state)}</div>"
        )
    return f"<h1>{escape(title)}</h1>{sub}<nav>{links}</nav>"


def render_index(updates: list[Update], state: TableState | None, title: str, docs_href: str | None = None) -> str:
    """The overview: the latest update, trends across updates, the tables' current state."""
    latest = len(updates) - 1
    state_label = f"tables as of {state.as_of:%Y-%m-%d %H:%M:%S} UTC" if state else "tables not read"
    links = (
        "<a href='#accounting'>accounting</a><a href='#expectations'>expectations</a><a href='#checks'>checks</a>"
        + (
            "<a href='#quarantine'>quarantine</a><a href='#heartbeats'>heartbeats</a><a href='#held'>held</a>"
            "<a href='#rows'>rows</a>"
        )
        + "<a href='#runs'>updates</a>"
    )
    if docs_href:
        links += f"<a href='{escape(docs_href)}'>GX Data Docs</a>"
    body: list[str] = []
    if not updates:
        body.append('<p class="muted">The event log holds no update yet.</p>')
    state = state or TableState()
    accounting = state.accounting
    if accounting is None and updates and updates[-1].accounting:
        accounting = [SourceAccounting.from_dict(raw) for raw in updates[-1].accounting]
        state_label += "; accounting as recorded by the latest update"
    body += _accounting(accounting, state_label)
    if updates:
        body += ['<h2 id="trends">Trends across updates</h2>', *_overview(updates, latest)]
        body += _expectations_table(updates, latest, latest_per_dataset=True)
        body += _checks_table(updates[-1].checks, docs_href)
    body += _quarantine(state) + _heartbeats(state) + _held(accounting) + _row_counts(state)
    if updates:
        body += _runs(updates)
    current = None
    if updates:  # the header counts each expectation from the latest update that reported it
        current = Update(updates[-1].update_id, updates[-1].started, updates[-1].ended, updates[-1].state)
        current.checks = updates[-1].checks
        for update in updates:
            current.expectations.update(update.expectations)
    header = _header(title, current, state if state.accounting is not None else None, links)
    return _page(title, header, body)


def render_update(updates: list[Update], index: int, title: str, docs_href: str | None) -> str:
    """One update: its expectations and checks, with the trend up to it."""
    update = updates[index]
    links = "<a href='index.html'>← overview</a>"
    if index > 0:
        links += f"<a href='{updates[index - 1].slug}.html'>previous</a>"
    if index + 1 < len(updates):
        links += f"<a href='{updates[index + 1].slug}.html'>next</a>"
    body = ['<h2 id="trends">Trend up to this update</h2>', *_overview(updates, index)]
    body += _expectations_table(updates, index)
    body += _checks_table(update.checks, docs_href)
    if update.accounting:
        recorded = [SourceAccounting.from_dict(raw) for raw in update.accounting]
        body += _accounting(recorded, "as recorded after this update")
    if update.errors:
        body.append("<h2>Errors</h2>" + "".join(f"<pre class='bad'>{escape(e)}</pre>" for e in update.errors))
    return _page(f"{title} · {update.label}", _header(title, update, None, links), body)


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
    """Write the report of a local pipeline's storage; returns the index page."""
    from cdc_medallion.quality.checks import quality_dir
    from cdc_medallion.quality.suites import DOCS_INDEX
    from cdc_medallion.spark import get_spark
    from cdc_medallion.storage.delta_store import SYSTEM_DIR, DeltaStore

    storage = Path(storage).resolve()
    spark = spark or get_spark()
    output = Path(output or quality_dir(storage) / "report").resolve()
    store = DeltaStore(storage, spark)
    log_name = f"{SYSTEM_DIR}/event_log"
    updates = read_event_log(store.read(log_name), max_updates) if store.exists(log_name) else []
    state = table_state_from_storage(storage, spark)
    docs = quality_dir(storage) / DOCS_INDEX
    href = os.path.relpath(docs, output) if docs.is_file() else None
    title = f"Data quality · {_pipeline_name(store) if updates else storage.name}"
    return write_pages(build_pages(updates, state, title, href), output)


def _pipeline_name(store: Any) -> str:
    rows = store.read("_system/event_log").select("origin.pipeline_name").limit(1).collect()
    return rows[0][0] if rows and rows[0][0] else store.root.name


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
            qualified = f"{tables_schema}.{name}_quarantine"
            if spark.catalog.tableExists(qualified):
                quarantines[f"{name}_quarantine"] = spark.table(qualified)
        bronze = [
            spark.table(f"{tables_schema}.{name}")
            for name in sorted(names)
            if name.startswith("bronze_") and spark.catalog.tableExists(f"{tables_schema}.{name}")
        ]
        state.quarantine, state.quarantine_rows = quarantine_reasons(quarantines, bronze)
        heartbeats = f"{tables_schema}.silver_heartbeats"
        if spark.catalog.tableExists(heartbeats):
            state.heartbeats = heartbeat_lag(spark.table(heartbeats))
    pipeline = table.rsplit(".", 1)[-1]
    return write_pages(build_pages(updates, state, f"Data quality · {pipeline}"), Path(output))
