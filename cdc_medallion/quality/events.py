"""Reading a pipeline event log — ours (`_system/event_log`) or a Databricks pipeline's — into
per-update quality facts the report renders.

Both logs have `event_type`, `timestamp`, `origin{update_id, flow_name, dataset_name}` and
`details` (JSON text). Per update and dataset, `flow_progress` events are summed (Databricks
emits several per flow and update): `metrics.num_output_rows`, `data_quality.dropped_records`,
`data_quality.quarantined_records` (ours) and `data_quality.expectations[]`. On Databricks the
quarantine pattern reports quarantine rules under `<dataset>__checked` and the quarantined rows
as the output of `<dataset>_quarantine`; both are folded back into `<dataset>` here.

`quality_check` events are ours: the accounting and the Great Expectations suites run after a
local update, recorded under that update so the report can trend them. So is `data_quality`'s
`stale_keys` (with `stale_unplaced` and `stale_samples`) in a gold flow's `flow_progress`: how
many keys of its target a quarantined change left stale after the batch (`runner/stale_keys.py`),
a state rather than a count of the batch, so the latest figure holds.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.names import CHECKED_SUFFIX, QUARANTINE_SUFFIX
from cdc_medallion.quality.figures import FIGURES
from cdc_medallion.storage import delta_rs

QUALITY_CHECK = "quality_check"
#: `flow_progress.data_quality` of a gold flow: stale keys after its batch, of which quarantined
#: changes with no key or no sequence, and a few stale keys as JSON objects.
STALE_KEYS, STALE_UNPLACED, STALE_SAMPLES = "stale_keys", "stale_unplaced", "stale_samples"
EVENT_TYPES = ("create_update", "update_progress", "flow_progress", QUALITY_CHECK)


@dataclass
class DatasetRun:
    dataset: str
    output_rows: int = 0
    dropped: int = 0
    quarantined: int | None = None
    stale: StaleKeys | None = None  # a gold table's stale keys after its last batch of the update


@dataclass(frozen=True)
class StaleKeys:
    """Keys of a gold table whose current state no longer follows the source, as a flow logged them."""

    keys: int  # quarantined changes with no key or no sequence included
    unplaced: int = 0
    samples: tuple[str, ...] = ()

    @classmethod
    def from_quality(cls, quality: dict[str, Any]) -> StaleKeys | None:
        """From a `flow_progress.data_quality` object (None: it holds no figure)."""
        if quality.get(STALE_KEYS) is None:
            return None
        samples = tuple(str(s) for s in quality.get(STALE_SAMPLES) or ())
        return cls(_int(quality.get(STALE_KEYS)), _int(quality.get(STALE_UNPLACED)), samples)

    def as_quality(self) -> dict[str, Any]:
        return {STALE_KEYS: self.keys, STALE_UNPLACED: self.unplaced, STALE_SAMPLES: list(self.samples)}


@dataclass
class ExpectationRun:
    dataset: str
    name: str
    passed: int = 0
    failed: int = 0


@dataclass
class Check:
    """One check of the accounting or of a GX suite, as recorded in a `quality_check` event."""

    suite: str  # "accounting" | "great_expectations"
    dataset: str
    name: str
    success: bool
    severity: str = "error"  # "error" (red when failed) | "warn" (amber)
    observed: str = ""
    expected: str = ""
    passed: int | None = None
    failed: int | None = None
    description: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Update:
    update_id: str
    started: dt.datetime | None = None
    ended: dt.datetime | None = None
    state: str | None = None
    datasets: dict[str, DatasetRun] = field(default_factory=dict)
    expectations: dict[tuple[str, str], ExpectationRun] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    accounting: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] | None = None  # the table figures the run stored (`TableFigures.as_dict`)
    data_docs: str | None = None
    errors: list[str] = field(default_factory=list)
    failed_flows: list[str] = field(default_factory=list)  # flows whose progress says FAILED

    @property
    def label(self) -> str:
        when = self.started.strftime("%Y-%m-%d %H:%M:%S") if self.started else "?"
        return f"{when} · {self.update_id[:8]}"

    @property
    def slug(self) -> str:
        when = self.started.strftime("%Y%m%dT%H%M%S") if self.started else "unknown"
        return f"update-{when}-{self.update_id[:12]}"

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.success]


def base_dataset(name: str) -> str:
    return name.removesuffix(CHECKED_SUFFIX)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def read_event_log(events: DataFrame, max_updates: int = 50) -> list[Update]:
    """The last `max_updates` updates of an event log DataFrame, oldest first."""
    origin = events.schema["origin"].dataType.fieldNames() if "origin" in events.columns else []
    pick = [
        F.col("event_type"),
        F.col("timestamp").cast("timestamp").alias("timestamp"),
        F.col("level") if "level" in events.columns else F.lit(None).cast("string").alias("level"),
        F.col("message") if "message" in events.columns else F.lit(None).cast("string").alias("message"),
        F.col("details").cast("string").alias("details"),
    ]
    for name in ("update_id", "flow_name", "dataset_name"):
        column = F.col(f"origin.{name}") if name in origin else F.lit(None).cast("string")
        pick.append(column.alias(name))
    selected = (
        events.filter(F.col("event_type").isin(*EVENT_TYPES)).select(*pick).filter(F.col("update_id").isNotNull())
    )
    latest = (
        selected.groupBy("update_id")
        .agg(F.min("timestamp").alias("started"))
        .orderBy(F.desc("started"))
        .limit(max_updates)
    )
    rows = selected.join(latest.select("update_id"), "update_id", "left_semi").orderBy("timestamp").collect()
    return fold_events([r.asDict() for r in rows])


def read_stored_event_log(path: Any, max_updates: int = 50) -> list[Update]:
    """The last `max_updates` updates of a local event log (a Delta table at `path`), read
    without a JVM (delta-rs), oldest first: what `read_event_log` gives of the same table."""
    rows = []
    for row in python_rows(delta_rs.read_table(path)):
        origin = row.get("origin") or {}
        if row["event_type"] in EVENT_TYPES and origin.get("update_id") is not None:
            details = row.get("details")
            rows.append(
                {
                    "event_type": row["event_type"],
                    "timestamp": row["timestamp"],
                    "level": row.get("level"),
                    "message": row.get("message"),
                    "details": details if details is None or isinstance(details, str) else str(details),
                    **{name: origin.get(name) for name in ("update_id", "flow_name", "dataset_name")},
                }
            )
    started: dict[str, dt.datetime | None] = {}
    for row in rows:
        first, stamp = started.get(row["update_id"]), row["timestamp"]
        started[row["update_id"]] = stamp if first is None or (stamp is not None and stamp < first) else first
    latest = sorted(started, key=lambda u: (started[u] is not None, started[u] or dt.datetime.min), reverse=True)
    keep = set(latest[:max_updates])
    return fold_events([r for r in rows if r["update_id"] in keep])


def stored_pipeline_name(path: Any) -> str | None:
    """The pipeline's name, as a local event log's first event names it (without a JVM)."""
    for row in python_rows(delta_rs.read_table(path, ["origin"])):
        return (row["origin"] or {}).get("pipeline_name")
    return None


def fold_events(rows: list[dict[str, Any]]) -> list[Update]:
    """Events (dicts with event_type, timestamp, level, message, details, update_id, flow_name,
    dataset_name) into updates, oldest first."""
    updates: dict[str, Update] = {}
    quarantine_outputs: dict[str, dict[str, int]] = {}
    # (update, dataset, rule) -> flow -> [passed, failed]: summed over a flow's micro-batches; a
    # view's rules are reported by each flow that reads the view, so across flows the largest wins.
    per_flow: dict[tuple[str, str, str], dict[str, list[int]]] = {}
    for row in sorted(rows, key=lambda r: (r["timestamp"] is None, r["timestamp"] or dt.datetime.min)):
        update = updates.setdefault(row["update_id"], Update(update_id=row["update_id"]))
        stamp = row["timestamp"]
        if stamp is not None:
            update.started = stamp if update.started is None or stamp < update.started else update.started
            update.ended = stamp if update.ended is None or stamp > update.ended else update.ended
        try:
            details = json.loads(row["details"]) if row["details"] else {}
        except ValueError:
            details = {}
        kind = row["event_type"]
        if row.get("level") == "ERROR" and row.get("message"):
            update.errors.append(row["message"])
        if kind == "update_progress":
            state = (details.get("update_progress") or {}).get("state")
            update.state = state or update.state
        elif kind == "flow_progress":
            _fold_flow(update, row, details.get("flow_progress") or {}, quarantine_outputs, per_flow)
        elif kind == QUALITY_CHECK:
            _fold_check(update, details.get(QUALITY_CHECK) or {})
    for (update_id, dataset, name), flows in per_flow.items():
        passed, failed = max(flows.values(), key=lambda counts: counts[0] + counts[1])
        if len(flows) > 1 and all(flow_dataset == dataset for flow_dataset, _ in flows):
            passed, failed = sum(c[0] for c in flows.values()), sum(c[1] for c in flows.values())
        updates[update_id].expectations[(dataset, name)] = ExpectationRun(dataset, name, passed, failed)
    for update_id, outputs in quarantine_outputs.items():
        update = updates[update_id]
        for dataset, rows_out in outputs.items():
            run = update.datasets.setdefault(dataset, DatasetRun(dataset))
            if run.quarantined is None:
                run.quarantined = rows_out
    return list(updates.values())


def _fold_flow(
    update: Update, row: dict[str, Any], progress: dict[str, Any], quarantine_outputs: dict, per_flow: dict
) -> None:
    dataset = row.get("dataset_name") or row.get("flow_name")
    if not dataset:
        return
    metrics = progress.get("metrics") or {}
    quality = progress.get("data_quality") or {}
    name = base_dataset(dataset)
    flow_name = row.get("flow_name") or dataset
    if progress.get("status") == "FAILED" and flow_name not in update.failed_flows:
        update.failed_flows.append(flow_name)
    if name.endswith(QUARANTINE_SUFFIX) and "num_output_rows" in metrics:
        # Databricks: the quarantine table is its own dataset; its rows are the quarantined ones.
        base = name.removesuffix(QUARANTINE_SUFFIX)
        outputs = quarantine_outputs.setdefault(update.update_id, {})
        outputs[base] = outputs.get(base, 0) + _int(metrics.get("num_output_rows"))
    run = update.datasets.setdefault(name, DatasetRun(name))
    if dataset == name:  # a twin's output rows are not the dataset's
        run.output_rows += _int(metrics.get("num_output_rows"))
    run.dropped += _int(quality.get("dropped_records"))
    if "quarantined_records" in quality:
        run.quarantined = (run.quarantined or 0) + _int(quality.get("quarantined_records"))
    if (stale := StaleKeys.from_quality(quality)) is not None:  # events come in time order: the latest holds
        run.stale = stale
    flow = (name, row.get("flow_name") or dataset)
    for item in quality.get("expectations") or []:
        target = base_dataset(item.get("dataset") or name)
        counts = per_flow.setdefault((update.update_id, target, str(item.get("name"))), {}).setdefault(flow, [0, 0])
        counts[0] += _int(item.get("passed_records"))
        counts[1] += _int(item.get("failed_records"))


def _fold_check(update: Update, check: dict[str, Any]) -> None:
    if check.get("suite") == FIGURES and isinstance(check.get(FIGURES), dict):
        update.figures = check[FIGURES]
    if check.get("data_docs"):
        update.data_docs = check["data_docs"]
    if check.get("accounting"):
        update.accounting.append(check["accounting"])
    for item in check.get("checks") or []:
        known = {k: item.get(k) for k in Check.__dataclass_fields__ if k in item}
        update.checks.append(Check(**known))


@dataclass(frozen=True)
class LoggedFigures:
    """What the quality step reads from the whole event log: each dataset's rows written and
    records quarantined (summed), and each gold table's latest stale-keys figure, with the time
    it was logged. Figures of two parts of the log merge (`merged`), so a step need only read
    the events appended since the last one's (`checks.logged`)."""

    rows: dict[str, tuple[int, int]] = field(default_factory=dict)
    stale_keys: dict[str, StaleKeys] = field(default_factory=dict)
    stale_at: dict[str, dt.datetime] = field(default_factory=dict)

    def merged(self, later: LoggedFigures) -> LoggedFigures:
        """These figures and those of the events logged after them."""
        rows = dict(self.rows)
        for name, (written, quarantined) in later.rows.items():
            before = rows.get(name, (0, 0))
            rows[name] = (before[0] + written, before[1] + quarantined)
        stale, stale_at = dict(self.stale_keys), dict(self.stale_at)
        for name, figure in later.stale_keys.items():
            at = later.stale_at.get(name)
            if name not in stale_at or (at is not None and at >= stale_at[name]):
                stale[name], stale_at[name] = figure, at
        return LoggedFigures(rows, stale, {k: v for k, v in stale_at.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": {name: list(counts) for name, counts in self.rows.items()},
            "stale": {
                name: {"quality": figure.as_quality(), "at": _iso(self.stale_at.get(name))}
                for name, figure in self.stale_keys.items()
            },
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LoggedFigures:
        rows = {name: (int(counts[0]), int(counts[1])) for name, counts in raw["rows"].items()}
        stale, stale_at = {}, {}
        for name, entry in raw["stale"].items():
            if (figure := StaleKeys.from_quality(entry["quality"])) is not None:
                stale[name] = figure
                if entry.get("at"):
                    stale_at[name] = dt.datetime.fromisoformat(entry["at"])
        return cls(rows, stale, stale_at)


def _iso(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def logged_figures(events: DataFrame) -> LoggedFigures:
    """Both figures in one aggregation, so the log is scanned once per quality step, not once
    per figure. A table's stale keys are its latest `flow_progress` that gave them, over the
    events given (a table may have had no batch for many updates: its figure still holds)."""
    quality = F.get_json_object("details", "$.flow_progress.data_quality")
    metric = "$.flow_progress.metrics.num_output_rows"
    quarantined = "$.flow_progress.data_quality.quarantined_records"
    gave_stale = F.get_json_object(quality, f"$.{STALE_KEYS}").isNotNull()
    figures = (
        events.filter(F.col("event_type") == "flow_progress")
        .select(
            F.col("origin.dataset_name").alias("dataset"),
            F.get_json_object("details", metric).cast("long").alias("rows"),
            F.get_json_object("details", quarantined).cast("long").alias("quarantined"),
            F.when(gave_stale, quality).alias("quality"),
            F.when(gave_stale, F.col("timestamp")).alias("at"),
        )
        .filter(F.col("dataset").isNotNull())
        .groupBy("dataset")
        .agg(
            F.sum("rows").alias("rows"),
            F.sum("quarantined").alias("quarantined"),
            F.max_by("quality", "at").alias("quality"),
            F.max("at").alias("at"),
        )
        .collect()
    )
    rows = {r["dataset"]: (int(r["rows"] or 0), int(r["quarantined"] or 0)) for r in figures}
    stale, stale_at = {}, {}
    for row in figures:
        if row["quality"] is not None and (found := StaleKeys.from_quality(json.loads(row["quality"]))) is not None:
            stale[row["dataset"]] = found
            if row["at"] is not None:
                stale_at[row["dataset"]] = row["at"]
    return LoggedFigures(rows, stale, stale_at)
