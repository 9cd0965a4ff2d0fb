"""Great Expectations suites over bronze, silver and gold, run after a local run.

Spark computes a narrow frame per dataset (the columns a suite looks at, plus derived facts such
as "this SCD2 version overlaps the next one of its key"); Great Expectations validates it as a
pandas dataframe (GX 1.x without the `[spark]` extra, which pins an older pyspark than ours; pandas
is also faster than GX's Spark engine on frames this small) and builds its Data Docs under
`<storage>/_system/quality/gx/`. Each result becomes a `Check` for the event log and report.

Suites:
- `bronze_<source>`: every landing position once (nothing landed twice); redelivered duplicates
  (same topic, key and bytes; warn); row count equals the event log's.
- `silver_<source>`: `kind` known, `op` in the unified set for changes, `bronze_ref` present,
  row count equals the event log's; `..._quarantine`: every row names a failed rule and a bronze
  reference, row count equals the event log's quarantined records.
- `silver_heartbeats`, `silver_schema_changes`: only their kind; row count equals the event log's.
- `gold_<table>` (SCD1): no NULL key, key unique.
- `gold_<table>_history` (SCD2): no NULL key, each version ends after it starts, versions of a
  key do not overlap, exactly one open version per live key (a key in SCD1) and none otherwise.
- `changes_<table>_quarantine`: each quarantined change once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from cdc_medallion.model import CHANGE_OPS, KIND_CHANGE, KIND_ERROR, KINDS, bronze_ref_column
from cdc_medallion.names import END_AT, FAILED, START_AT
from cdc_medallion.quality.events import Check

SUITE = "great_expectations"
GX_FOLDER = "quality"  # under <storage>/_system
DOCS_INDEX = Path("gx", "uncommitted", "data_docs", "local_site", "index.html")
#: A frame larger than this is not collected to the driver; the report says the suite was skipped.
MAX_ROWS = int(os.environ.get("CDC_MEDALLION_GX_MAX_ROWS", "5000000"))
DATASOURCE, ASSET, BATCH = "cdc_medallion", "tables", "whole"  # where GX finds the frames it validates
#: Validation results (and their Data Docs pages) kept per suite: the newest runs.
KEEP_RUNS = int(os.environ.get("CDC_MEDALLION_GX_KEEP_RUNS", "20"))


@dataclass(frozen=True)
class GoldTable:
    name: str  # gold_<table> (SCD1); the SCD2 table is `names.history_name(name)`
    keys: tuple[str, ...]


@dataclass
class Spec:
    """One expectation: GX class name, its arguments, and how the report names it."""

    name: str
    gx_type: str
    kwargs: dict[str, Any]
    description: str
    severity: str = "error"


@dataclass
class SuiteInput:
    dataset: str
    frame: DataFrame | None
    specs: list[Spec]


def _where(column: str, value: Any) -> Any:
    """A GX row condition `column == value` (GX's Condition objects; string conditions are deprecated)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    from great_expectations.expectations.row_conditions import Column

    return Column(column) == value


def docs_index(system_dir: Path) -> Path:
    return system_dir / GX_FOLDER / DOCS_INDEX


def _count_spec(expected: int | None, what: str) -> list[Spec]:
    if expected is None:
        return []
    return [
        Spec(
            "row_count_matches_event_log",
            "ExpectTableRowCountToEqual",
            {"value": int(expected)},
            f"The table holds as many rows as the event log says were written ({what}).",
        )
    ]


def bronze_suite(name: str, bronze: DataFrame, logged: int | None) -> SuiteInput:
    ref = bronze_ref_column()
    frame = bronze.select(
        ref.alias("bronze_ref"),
        F.coalesce(F.col("topic"), F.lit("")).alias("topic"),
        F.coalesce(F.sha2(F.col("key"), 256), F.lit("")).alias("key_hash"),
        # tombstones (no value) never count as duplicates of each other
        F.coalesce(F.sha2(F.col("value"), 256), F.concat(F.lit("null:"), ref)).alias("value_hash"),
    )
    specs = [
        Spec(
            "landed_once",
            "ExpectColumnValuesToBeUnique",
            {"column": "bronze_ref"},
            "Every landing position (topic/partition/offset or file:line) is in bronze once: nothing landed twice.",
        ),
        Spec(
            "not_redelivered",
            "ExpectCompoundColumnsToBeUnique",
            {"column_list": ["topic", "key_hash", "value_hash"]},
            "No message repeats the bytes of another (same topic and key): redelivered duplicates. Gold applies "
            "each change once (by sequence), so this is a warning.",
            severity="warn",
        ),
        *_count_spec(logged, "bronze flow output"),
    ]
    return SuiteInput(name, frame, specs)


def silver_suite(name: str, silver: DataFrame, logged: int | None) -> SuiteInput:
    frame = silver.select("kind", "op", "bronze_ref", "source_table", "sequence")
    specs = [
        Spec(
            "kind_known",
            "ExpectColumnValuesToBeInSet",
            {"column": "kind", "value_set": [k for k in KINDS if k != KIND_ERROR]},
            "Every event has one of the unified kinds (errors go to quarantine).",
        ),
        Spec("kind_present", "ExpectColumnValuesToNotBeNull", {"column": "kind"}, "Every event has a kind."),
        Spec(
            "op_known",
            "ExpectColumnValuesToBeInSet",
            {
                "column": "op",
                "value_set": list(CHANGE_OPS),
                "row_condition": _where("kind", KIND_CHANGE),
            },
            f"Every row change has one of the unified operations ({', '.join(CHANGE_OPS)}).",
        ),
        Spec(
            "op_present",
            "ExpectColumnValuesToNotBeNull",
            {"column": "op", "row_condition": _where("kind", KIND_CHANGE)},
            "Every row change has an operation.",
        ),
        Spec(
            "bronze_ref_present",
            "ExpectColumnValuesToNotBeNull",
            {"column": "bronze_ref"},
            "Every event points back to its bronze message.",
        ),
        *_count_spec(logged, "silver flow output"),
    ]
    return SuiteInput(name, frame, specs)


def quarantine_suite(name: str, quarantine: DataFrame, logged: int | None) -> SuiteInput:
    ref = "bronze_ref" if "bronze_ref" in quarantine.columns else "__bronze_ref"
    frame = quarantine.select(
        F.col(ref).alias("bronze_ref"),
        F.size(F.coalesce(F.col(FAILED), F.array().cast("array<string>"))).alias("failed_rules"),
        *([F.col("__sequence_by").alias("sequence")] if "__sequence_by" in quarantine.columns else []),
    )
    specs = [
        Spec(
            "names_failed_rule",
            "ExpectColumnValuesToBeBetween",
            {"column": "failed_rules", "min_value": 1},
            "Every quarantined row names the rule(s) it failed.",
        ),
        Spec(
            "bronze_ref_present",
            "ExpectColumnValuesToNotBeNull",
            {"column": "bronze_ref"},
            "Every quarantined row points back to its bronze message.",
        ),
    ]
    if "sequence" in frame.columns:
        specs.append(
            Spec(
                "quarantined_once",
                "ExpectCompoundColumnsToBeUnique",
                {"column_list": ["bronze_ref", "sequence"]},
                "Each quarantined change is in the table once.",
            )
        )
    specs += _count_spec(logged, "quarantined records")
    return SuiteInput(name, frame, specs)


def side_suite(name: str, table: DataFrame, kind: str, logged: int | None) -> SuiteInput:
    frame = table.select("kind", "source_name", "bronze_ref")
    specs = [
        Spec(
            "only_" + kind,
            "ExpectColumnValuesToBeInSet",
            {"column": "kind", "value_set": [kind]},
            f"Only {kind} events.",
        ),
        Spec(
            "source_present",
            "ExpectColumnValuesToNotBeNull",
            {"column": "source_name"},
            "Every event names its source.",
        ),
        *_count_spec(logged, "append flows' output"),
    ]
    return SuiteInput(name, frame, specs)


def _key_specs(keys: tuple[str, ...]) -> list[Spec]:
    return [
        Spec(f"key_{k}_not_null", "ExpectColumnValuesToNotBeNull", {"column": k}, f"Key column {k} is never NULL.")
        for k in keys
    ]


def scd1_suite(name: str, gold: DataFrame, keys: tuple[str, ...]) -> SuiteInput:
    frame = gold.select(*keys)
    unique = (
        Spec("key_unique", "ExpectColumnValuesToBeUnique", {"column": keys[0]}, "One row per key (SCD1).")
        if len(keys) == 1
        else Spec(
            "key_unique", "ExpectCompoundColumnsToBeUnique", {"column_list": list(keys)}, "One row per key (SCD1)."
        )
    )
    return SuiteInput(name, frame, [*_key_specs(keys), unique])


def scd2_suites(name: str, history: DataFrame, current: DataFrame | None, keys: tuple[str, ...]) -> list[SuiteInput]:
    by_key = Window.partitionBy(*keys).orderBy(START_AT)
    following = F.lead(START_AT).over(by_key)
    rows = history.select(*keys, START_AT, END_AT).select(
        *keys,
        START_AT,
        END_AT,
        (following.isNotNull() & (F.col(END_AT).isNull() | (F.col(END_AT) > following))).alias("overlaps_next"),
        (F.col(END_AT).isNull() | (F.col(END_AT) > F.col(START_AT))).alias("ends_after_start"),
    )
    versions = [
        *_key_specs(keys),
        Spec("start_present", "ExpectColumnValuesToNotBeNull", {"column": START_AT}, "Every version has a start."),
        Spec(
            "ends_after_start",
            "ExpectColumnValuesToBeInSet",
            {"column": "ends_after_start", "value_set": [True]},
            "Every closed version ends after it starts (__END_AT > __START_AT).",
        ),
        Spec(
            "intervals_do_not_overlap",
            "ExpectColumnValuesToBeInSet",
            {"column": "overlaps_next", "value_set": [False]},
            "The versions of a key do not overlap: each ends at or before the next one starts, only the last is open.",
        ),
    ]
    per_key = history.groupBy(*keys).agg(F.sum(F.col(END_AT).isNull().cast("int")).alias("open_versions"))
    if current is not None:
        live = current.select(*keys).distinct().withColumn("live", F.lit(1))
        per_key = per_key.join(live, list(keys), "left").fillna(0, subset=["live"])
    else:
        per_key = per_key.withColumn("live", F.lit(1))
    open_specs = [
        Spec(
            "one_open_version_per_live_key",
            "ExpectColumnValuesToBeBetween",
            {
                "column": "open_versions",
                "min_value": 1,
                "max_value": 1,
                "row_condition": _where("live", 1),
            },
            "Exactly one open version (__END_AT NULL) per key that is in the SCD1 table.",
        ),
        Spec(
            "no_open_version_for_deleted_key",
            "ExpectColumnValuesToBeBetween",
            {
                "column": "open_versions",
                "min_value": 0,
                "max_value": 0,
                "row_condition": _where("live", 0),
            },
            "A key deleted (or truncated) from the SCD1 table has no open version.",
        ),
    ]
    return [
        SuiteInput(name, rows, versions),
        SuiteInput(f"{name}__keys", per_key.select(*keys, "open_versions", "live"), open_specs),
    ]


# --- running ----------------------------------------------------------------------------------
def _context(project_dir: Path):
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no network: never phone home
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    project_dir.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(project_dir))
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    context.variables.save()
    return context


def _whole_frame(context: Any) -> Any:
    """The one batch definition every suite validates its frame through (the frame is the run's
    parameter). Kept across runs: each asset or definition GX adds rewrites its whole project
    file, and one per dataset per run was a sixth of the checks' time on the sample."""
    source = _get_or_add(context.data_sources.get, context.data_sources.add_pandas, DATASOURCE)
    asset = _get_or_add(source.get_asset, source.add_dataframe_asset, ASSET)
    return _get_or_add(asset.get_batch_definition, asset.add_batch_definition_whole_dataframe, BATCH)


def _get_or_add(get: Any, add: Any, name: str) -> Any:
    """GX's object `name`, added when the project lacks it (GX's lookups raise one of three)."""
    try:
        return get(name)
    except (KeyError, LookupError, ValueError):
        return add(name)


def run_suites(suites: Iterable[SuiteInput], project_dir: Path, run_name: str) -> tuple[list[Check], Path]:
    """Validate each suite's frame with GX, build Data Docs; returns the checks and the docs index."""
    context = _context(project_dir)
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.core.run_identifier import RunIdentifier

    batch = _whole_frame(context)
    run_id = RunIdentifier(run_name=run_name)
    checks: list[Check] = []
    for suite_input in suites:
        if suite_input.frame is None or not suite_input.specs:
            continue
        frame = suite_input.frame.limit(MAX_ROWS + 1).toPandas()
        if len(frame) > MAX_ROWS:
            checks.append(
                Check(
                    SUITE,
                    suite_input.dataset,
                    "suite_skipped",
                    success=True,
                    severity="warn",
                    observed=f"> {MAX_ROWS:,} rows",
                    description="Too large to validate on the driver (CDC_MEDALLION_GX_MAX_ROWS): not checked.",
                )
            )
            continue
        suite = gx.ExpectationSuite(name=suite_input.dataset)
        for spec in suite_input.specs:
            meta = {"name": spec.name, "severity": spec.severity, "notes": spec.description}
            suite.add_expectation(getattr(gxe, spec.gx_type)(**spec.kwargs, meta=meta))
        suite = context.suites.add_or_update(suite)
        definition = context.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=suite_input.dataset, data=batch, suite=suite)
        )
        result = definition.run(batch_parameters={"dataframe": frame}, result_format="SUMMARY", run_id=run_id)
        checks.extend(_checks(suite_input, result))
    prune_results(project_dir / "gx" / "uncommitted", KEEP_RUNS)
    context.build_data_docs()
    return checks, project_dir / DOCS_INDEX


def prune_results(uncommitted: Path, keep: int) -> None:
    """Keep the newest `keep` runs of each suite's validation results and Data Docs pages, so
    that the docs build stays fast however many runs there were."""
    import shutil

    results = uncommitted / "validations"
    if not results.is_dir():
        return
    for suite in (d for d in results.iterdir() if d.is_dir()):
        runs = sorted((d for d in suite.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
        for old in runs[keep:]:
            shutil.rmtree(old, ignore_errors=True)
            shutil.rmtree(uncommitted / "data_docs" / "local_site" / "validations" / suite.name / old.name, True)


def _checks(suite_input: SuiteInput, result: Any) -> list[Check]:
    checks = []
    for item in result.results:
        config = item.expectation_config
        meta = config.meta or {}
        outcome = item.result or {}
        passed = failed = None
        observed = expected = ""
        if "unexpected_count" in outcome:
            failed = int(outcome.get("unexpected_count") or 0)
            total = int(outcome.get("element_count") or 0)
            missing = (
                0 if config.type == "expect_column_values_to_not_be_null" else int(outcome.get("missing_count") or 0)
            )
            passed = total - failed - missing
            sample = outcome.get("partial_unexpected_list") or []
            observed = f"{failed:,} unexpected" + (f", e.g. {sample[:3]}" if sample else "")
        else:
            observed = str(outcome.get("observed_value", ""))
            expected = str(config.kwargs.get("value", ""))
        if item.exception_info and item.exception_info.get("raised_exception"):
            observed = f"error: {str(item.exception_info.get('exception_message'))[:200]}"
        checks.append(
            Check(
                suite=SUITE,
                dataset=suite_input.dataset,
                name=str(meta.get("name") or config.type),
                success=bool(item.success),
                severity=str(meta.get("severity") or "error"),
                observed=observed,
                expected=expected,
                passed=passed,
                failed=failed,
                description=str(meta.get("notes") or ""),
            )
        )
    return checks
