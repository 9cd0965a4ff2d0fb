"""What the runs stored about a local storage, read back from its event log: the updates, the
latest table figures (`table_figures.py`) and the latest source accounting (`checks.py`).

The HTML report and `status` read the figures here and nowhere else, so the two show the same
numbers, computed once by the run that stored them. Reading needs no JVM where delta-rs reads the
event log (`storage/delta_rs.py` holds that rule); given a Spark session, Spark reads it. It
imports nothing of the `local` extra: the report module, which Databricks workers import, uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_medallion.names import EVENT_LOG
from cdc_medallion.quality.accounting import SourceAccounting
from cdc_medallion.quality.events import Update, read_event_log, read_stored_event_log, stored_pipeline_name
from cdc_medallion.quality.figures import TableFigures
from cdc_medallion.spark import get_spark
from cdc_medallion.storage import delta_rs


@dataclass
class Stored:
    """A storage's event log, read: its updates (oldest first) and the figures they stored."""

    updates: list[Update] = field(default_factory=list)
    pipeline_name: str | None = None

    @property
    def figures_update(self) -> Update | None:
        """The latest update that stored table figures."""
        return next((u for u in reversed(self.updates) if u.figures is not None), None)

    @property
    def figures(self) -> TableFigures | None:
        update = self.figures_update
        return None if update is None or update.figures is None else TableFigures.from_dict(update.figures)

    @property
    def accounting_update(self) -> Update | None:
        """The latest update whose quality step recorded the accounting."""
        return next((u for u in reversed(self.updates) if u.accounting), None)

    @property
    def accounting(self) -> list[SourceAccounting] | None:
        update = self.accounting_update
        return None if update is None else [SourceAccounting.from_dict(raw) for raw in update.accounting]


def read_stored(storage: Path, max_updates: int = 50, spark: Any = None) -> Stored:
    """The last `max_updates` updates of the storage's event log, with what they stored."""
    log = Path(storage).resolve() / EVENT_LOG
    if delta_rs.log_version(log) is None:
        return Stored()
    if spark is None and delta_rs.readable_without_jvm(log):
        updates = read_stored_event_log(log, max_updates)
        return Stored(updates, stored_pipeline_name(log) if updates else None)
    events = (spark or get_spark()).read.format("delta").load(str(log))  # no delta-spark import: workers lack it
    updates = read_event_log(events, max_updates)
    name = events.select("origin.pipeline_name").limit(1).collect() if updates else []
    return Stored(updates, name[0][0] if name else None)


def summary_lines(stored: Stored) -> list[str]:
    """What `status` prints of the stored figures: the figures the HTML report shows, in short."""
    lines = []
    if (figures := stored.figures) is not None and (update := stored.figures_update) is not None:
        lines.append(f"\nfigures stored by update {update.label}:")
        rows = sum(figures.quarantine_rows.values())
        top = figures.quarantine[0] if figures.quarantine else None
        lines.append(
            f"  quarantined  {rows:,} row(s) in {len(figures.quarantine_rows)} table(s)"
            + (f"; most: {top.dataset} · {top.rule} ({top.count:,})" if top else "")
        )
        for beat in figures.heartbeats or []:
            lag = "no event time"
            if beat.latest_lag_seconds is not None:
                lag = f"latest lag {_duration(beat.latest_lag_seconds)}"
            lines.append(f"  heartbeats   {beat.source}: {beat.count:,} seen, {lag}")
    if (accounting := stored.accounting) is not None and (update := stored.accounting_update) is not None:
        unbalanced = [a.source for a in accounting if not a.balanced]
        held = sum(a.outcomes.get("held", 0) for a in accounting)
        verdict = f"MISMATCH in {', '.join(unbalanced)}" if unbalanced else "every message accounted for"
        lines.append(
            f"  accounting   {verdict} in {len(accounting)} source(s), as update {update.label} recorded"
            + (f"; {held:,} held" if held else "")
        )
    if not lines:
        lines.append("\nno figures stored yet: `cdc-medallion run` or `ingest` stores them")
    return lines


def _duration(seconds: float) -> str:
    """A lag in the largest unit it fills twice (as the report's chart shows it)."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if abs(seconds) >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.1f} s"
