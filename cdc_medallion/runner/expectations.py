"""Applying expectations to a batch: count, then warn / drop / quarantine / fail.

One pass marks each row with the names of the rules it fails; the counts come from that
marked batch, so `passed + failed = rows` per rule, as in the Databricks event log. A rule
whose SQL evaluates to NULL counts as failed: an unknown is not a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.declarative.constraints import null_safe
from cdc_medallion.declarative.definitions import Action, Expectation
from cdc_medallion.errors import ExpectationFailed, GraphError
from cdc_medallion.identifiers import sql_text
from cdc_medallion.names import FAILED


@dataclass
class ExpectationReport:
    dataset: str
    rows: int = 0
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (passed, failed)
    dropped: int = 0
    quarantined: int = 0

    @property
    def kept(self) -> int:
        """Rows that go on to the dataset (neither dropped nor quarantined)."""
        return self.rows - self.dropped - self.quarantined

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
    """Add the array column `failed_expectations` (names of the rules the row fails).

    Built as one SQL expression: every Column a Python expression builds is a round trip to the
    JVM, and in a small batch those round trips cost more than the data.
    """
    if not expectations:
        return df.withColumn(FAILED, F.array().cast("array<string>"))
    # Each constraint as both engines evaluate it (`null_safe`: on lines of its own, NULL fails).
    checks = ",\n".join(f"CASE WHEN NOT {null_safe(r.constraint)} THEN {sql_text(r.name)} END" for r in expectations)
    try:
        failed = F.expr(f"filter(array(\n{checks}\n), failed_rule -> failed_rule IS NOT NULL)")
    except Exception:  # parse errors surface here, analysis errors on first use: name the rule
        for rule in expectations:
            try:
                F.expr(rule.constraint)
            except Exception as error:
                raise GraphError(
                    f"expectation {rule.name!r} on {dataset}: bad SQL {rule.constraint!r}: {error}"
                ) from None
        raise
    return df.withColumn(FAILED, failed)


def _any_of(rules: list[str]) -> str:
    if not rules:
        return "false"
    return f"exists({FAILED}, failed_rule -> failed_rule IN ({', '.join(sql_text(r) for r in rules)}))"


@dataclass
class Split:
    valid: DataFrame
    quarantine: DataFrame | None
    report: ExpectationReport

    @property
    def kept(self) -> int:
        """Rows that go on to the dataset (neither dropped nor quarantined)."""
        return self.report.kept


def kept(marked: DataFrame, expectations: tuple[Expectation, ...]) -> DataFrame:
    """The rows of a marked frame that `split` keeps (they fail no drop or quarantine rule),
    without counting them: for a frame read whole, not a batch."""
    rejected = [r.name for r in expectations if r.action in (Action.DROP, Action.QUARANTINE)]
    return marked.filter(f"NOT ({_any_of(rejected)})").drop(FAILED)


def split(marked: DataFrame, expectations: tuple[Expectation, ...], dataset: str) -> Split:
    """Count rule outcomes on a *cached* marked batch and split it by action."""
    report = ExpectationReport(dataset=dataset)
    names = [r.name for r in expectations]
    by_action = {a: [r.name for r in expectations if r.action is a] for a in Action}
    quarantine, drop = _any_of(by_action[Action.QUARANTINE]), _any_of(by_action[Action.DROP])
    aggregates = ["count(1) AS __rows"]
    aggregates += [f"sum(CAST(array_contains({FAILED}, {sql_text(n)}) AS long)) AS __f{i}" for i, n in enumerate(names)]
    aggregates.append(f"sum(CAST({quarantine} AS long)) AS __q")
    aggregates.append(f"sum(CAST(({drop}) AND NOT ({quarantine}) AS long)) AS __d")
    try:
        totals = marked.selectExpr(*aggregates).collect()[0]
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
        # Through Arrow: `collect()` fails on a date or timestamp outside years 1-9999.
        sample = python_rows(marked.filter(_any_of(failing)).limit(1).drop(FAILED).toArrow())
        raise ExpectationFailed(
            f"{dataset}: expectation(s) {', '.join(failing)} failed on "
            f"{sum(report.counts[n][1] for n in failing)} row(s); nothing was committed. "
            f"First failing row: {sample[0] if sample else '?'}"
        )
    rejected = _any_of(by_action[Action.DROP] + by_action[Action.QUARANTINE])
    valid = marked.filter(f"NOT ({rejected})").drop(FAILED)
    quarantined = marked.filter(quarantine) if by_action[Action.QUARANTINE] else None
    return Split(valid=valid, quarantine=quarantined, report=report)
