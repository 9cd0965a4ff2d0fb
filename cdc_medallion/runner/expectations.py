"""Applying expectations to a batch: count, then warn / drop / quarantine / fail.

One pass marks each row with the names of the rules it fails; the counts come from that
marked batch, so `passed + failed = rows` per rule, as in the Databricks event log. A rule
whose SQL evaluates to NULL counts as failed: an unknown is not a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion.declarative.definitions import Action, Expectation
from cdc_medallion.errors import ExpectationFailed, GraphError

FAILED = "failed_expectations"


@dataclass
class ExpectationReport:
    dataset: str
    rows: int = 0
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (passed, failed)
    dropped: int = 0
    quarantined: int = 0

    def as_event_log(self) -> dict[str, object]:
        return {
            "dropped_records": self.dropped,
            "quarantined_records": self.quarantined,
            "expectations": [
                {"name": name, "dataset": self.dataset, "passed_records": passed, "failed_records": failed}
                for name, (passed, failed) in self.counts.items()
            ],
        }


def mark(df: DataFrame, expectations: tuple[Expectation, ...], dataset: str) -> DataFrame:
    """Add the array column `failed_expectations` (names of the rules the row fails)."""
    checks = []
    for rule in expectations:
        try:
            condition = F.expr(rule.constraint)
        except Exception as error:  # parse errors surface here, analysis errors on first use
            raise GraphError(f"expectation {rule.name!r} on {dataset}: bad SQL {rule.constraint!r}: {error}") from None
        checks.append(F.when(~F.coalesce(condition, F.lit(False)), F.lit(rule.name)))
    if not checks:
        return df.withColumn(FAILED, F.array().cast("array<string>"))
    return df.withColumn(FAILED, F.filter(F.array(*checks), lambda name: name.isNotNull()))


@dataclass
class Split:
    valid: DataFrame
    quarantine: DataFrame | None
    report: ExpectationReport


def split(marked: DataFrame, expectations: tuple[Expectation, ...], dataset: str) -> Split:
    """Count rule outcomes on a *cached* marked batch and split it by action."""
    report = ExpectationReport(dataset=dataset)
    names = [r.name for r in expectations]
    aggregates = [F.count(F.lit(1)).alias("__rows")]
    aggregates += [F.sum(F.array_contains(FAILED, n).cast("long")).alias(f"__f{i}") for i, n in enumerate(names)]
    by_action = {a: [r.name for r in expectations if r.action is a] for a in Action}

    def any_of(rules: list[str]):
        return F.exists(FAILED, lambda n: n.isin(rules)) if rules else F.lit(False)

    aggregates.append(F.sum(any_of(by_action[Action.QUARANTINE]).cast("long")).alias("__q"))
    aggregates.append(
        F.sum((any_of(by_action[Action.DROP]) & ~any_of(by_action[Action.QUARANTINE])).cast("long")).alias("__d")
    )
    try:
        totals = marked.agg(*aggregates).collect()[0]
    except Exception as error:
        raise GraphError(f"expectations on {dataset} cannot be evaluated: {error}") from None
    report.rows = int(totals["__rows"])
    for i, name in enumerate(names):
        failed = int(totals[f"__f{i}"] or 0)
        report.counts[name] = (report.rows - failed, failed)
    report.quarantined = int(totals["__q"] or 0)
    report.dropped = int(totals["__d"] or 0)
    failing = [n for n in by_action[Action.FAIL] if report.counts[n][1] > 0]
    if failing:
        sample = marked.filter(any_of(failing)).limit(1).collect()
        raise ExpectationFailed(
            f"{dataset}: expectation(s) {', '.join(failing)} failed on "
            f"{sum(report.counts[n][1] for n in failing)} row(s); nothing was committed. "
            f"First failing row: {sample[0].asDict() if sample else '?'}"
        )
    rejected = any_of(by_action[Action.DROP] + by_action[Action.QUARANTINE])
    valid = marked.filter(~rejected).drop(FAILED)
    quarantine = marked.filter(any_of(by_action[Action.QUARANTINE])) if by_action[Action.QUARANTINE] else None
    return Split(valid=valid, quarantine=quarantine, report=report)
