"""The facade on Databricks: definitions handed to `pyspark.pipelines` (or `dlt` on older runtimes).

How Databricks is detected
--------------------------
The local runner (and every test) runs the definitions with a registry of its own in a context
variable. When none is active — Lakeflow executing `transformations/*.py` — the facade asks
`find_pipelines_module()` for the Databricks pipeline API and forwards every definition there.
Importability alone is not a signal: pyspark 4.1+ ships Apache Spark's own `pyspark.pipelines`,
importable on any laptop, and `dlt` on PyPI is an unrelated project (dltHub). The signal is the
API itself: a module counts only when it has the expectation decorators (`expect`,
`expect_or_drop`, `expect_or_fail`), the dataset and flow functions and an auto CDC function
(`create_auto_cdc_flow`, or `apply_changes` on older `dlt`). Databricks' `pyspark.pipelines`
and `dlt` have them; Apache Spark's `pyspark.pipelines` has no expectations and dltHub's `dlt` has
none of them. `pyspark.pipelines` is preferred, `dlt` is the fallback for older runtimes. Nothing
found: the usual "no active pipeline registry" error.

What is handed over
-------------------
- `@table` (streaming table with a query), `@materialized_view`, `@temporary_view`,
  `create_streaming_table`, `@append_flow` and `create_auto_cdc_flow` go to their namesakes
  (`dlt.table` / `dlt.view` / `dlt.apply_changes` on a `dlt` without the newer names), with the
  same arguments. Our local extension `present_columns_column` becomes
  `ignore_null_updates=True` (an absent column keeps its value; unlike locally, an explicit NULL
  in an update is ignored too).
- An SCD type 2 auto CDC flow gets no `apply_as_truncates`: Databricks supports APPLY AS TRUNCATE
  WHEN for SCD type 1 only. It reads a private view of its source without the truncate events
  (`<source>__without_truncates`), so a truncate never reaches it; its history keeps the versions
  that were open at the truncate open (locally they are closed at the truncate's sequence).
- Expectations become the native decorators, chained: each returns a new object, the next
  decorator (and finally the dataset decorator) receives it, as the runtime requires (only that
  object carries the rule). Constraints are passed as
  `COALESCE((<constraint>), FALSE)`: a constraint that evaluates to NULL fails, as it does locally
  (natively a NULL result would pass).
- `expect_or_quarantine` compiles to the documented quarantine pattern ("Expectation
  recommendations and advanced patterns"): the dataset's query feeds a private twin
  `<dataset>__checked` that adds `failed_expectations` (names of every rule the row fails, as
  locally) and `__quarantined`, carries the quarantine rules as `expect` (warn, so every row is
  counted) and the `fail` rules, and is partitioned by `__quarantined`; `<dataset>` reads the rows
  that are not quarantined and carries the `warn` and `drop` rules; `<dataset>_quarantine` reads
  the quarantined rows, with `failed_expectations`. Event-log metrics of the quarantine and fail
  rules are therefore reported under `<dataset>__checked`, those of warn and drop rules under
  `<dataset>` (counted over the rows that were not quarantined).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdc_medallion.declarative.definitions import (
    Action,
    AnyFlow,
    AutoCdcFlow,
    Dataset,
    DatasetKind,
    Expectation,
    Flow,
    QueryFunction,
)
from cdc_medallion.declarative.registry import GraphElementRegistry
from cdc_medallion.declarative.runtime import current_reader
from cdc_medallion.errors import GraphError

API_MODULES = ("pyspark.pipelines", "dlt")
_REQUIRED = ("table", "create_streaming_table", "append_flow", "expect", "expect_or_drop", "expect_or_fail")
_AUTO_CDC = ("create_auto_cdc_flow", "apply_changes")

CHECKED_SUFFIX = "__checked"
QUARANTINE_SUFFIX = "_quarantine"
FAILED = "failed_expectations"  # the same column the local runner writes to quarantine tables
QUARANTINED = "__quarantined"
NO_TRUNCATES_SUFFIX = "__without_truncates"


# --- detection --------------------------------------------------------------------------------
def is_databricks_api(module: object) -> bool:
    """True for a module with the Databricks pipeline API (see the module docstring)."""
    return all(callable(getattr(module, name, None)) for name in _REQUIRED) and any(
        callable(getattr(module, name, None)) for name in _AUTO_CDC
    )


def find_pipelines_module() -> ModuleType | None:
    """The Databricks pipeline API in charge here, or None (locally, or outside a pipeline)."""
    for name in API_MODULES:
        module = sys.modules.get(name)
        if module is None:
            try:
                if importlib.util.find_spec(name) is None:
                    continue
                module = importlib.import_module(name)
            except Exception:  # an unrelated or broken module of that name is not the API
                continue
        if is_databricks_api(module):
            return module
    return None


_registries: dict[int, DatabricksRegistry] = {}


def databricks_registry() -> DatabricksRegistry | None:
    """The registry forwarding to the Databricks API, when that API is in charge."""
    module = find_pipelines_module()
    if module is None:
        return None
    registry = _registries.get(id(module))
    if registry is None or registry.api is not module:
        registry = _registries[id(module)] = DatabricksRegistry(module)
    return registry


# --- the quarantine pattern's row marking (shared by the twin's query) ------------------------
def null_safe(constraint: str) -> str:
    """A constraint that fails (instead of passing) when it evaluates to NULL, as locally."""
    return f"COALESCE(({constraint}), FALSE)"


def flag(df: DataFrame, expectations: tuple[Expectation, ...], dataset: str) -> DataFrame:
    """Add `failed_expectations` (every rule the row fails) and `__quarantined`."""
    from cdc_medallion.runner.expectations import mark

    marked = mark(df, expectations, dataset)
    quarantine = [e.name for e in expectations if e.action is Action.QUARANTINE]
    return marked.withColumn(QUARANTINED, F.exists(F.col(FAILED), lambda name: name.isin(quarantine)))


def _query(func: Callable[[], DataFrame], original: Callable[..., Any] | None = None) -> QueryFunction:
    """A fresh zero-argument function for the native decorators, pointing back at `original`."""

    def query() -> DataFrame:
        return func()

    source = original or func
    functools.update_wrapper(query, source, assigned=("__module__", "__name__", "__qualname__", "__doc__"), updated=())
    query.__wrapped__ = source  # type: ignore[attr-defined]
    return query


def _is_set(value: Any) -> bool:
    """An option worth passing: not None, not False, not empty (Columns are never compared)."""
    if value is None or value is False:
        return False
    return not (isinstance(value, dict | list | tuple) and not value)


def _parameters(func: Callable[..., Any]) -> set[str] | None:
    try:
        return set(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None


class DatabricksRegistry(GraphElementRegistry):
    """Hands each definition to the Databricks pipeline API as it is registered."""

    def __init__(self, api: ModuleType) -> None:
        if not is_databricks_api(api):
            raise GraphError(f"module {getattr(api, '__name__', api)!r} is not the Databricks pipeline API")
        self.api = api
        # Streaming tables declared with quarantine rules and fed by append flows: their checked twin.
        self._twins: dict[str, tuple[str, tuple[Expectation, ...]]] = {}
        # (source, truncate condition) -> the view SCD type 2 flows read instead of the source.
        self._no_truncate_views: dict[tuple[str, str], str] = {}

    # --- calling the API ----------------------------------------------------------------------
    @property
    def module_name(self) -> str:
        return getattr(self.api, "__name__", "pipelines")

    def _function(self, *names: str) -> Callable[..., Any]:
        for name in names:
            function = getattr(self.api, name, None)
            if callable(function):
                return function
        raise GraphError(f"{self.module_name} has none of {', '.join(names)}")

    def _call(self, function: Callable[..., Any], what: str, *args: Any, **kwargs: Any) -> Any:
        """Call with the options that are set; an option the API does not take is an error."""
        given = {k: v for k, v in kwargs.items() if _is_set(v)}
        accepted = _parameters(function)
        if accepted is not None:
            unknown = sorted(set(given) - accepted)
            if unknown:
                raise GraphError(
                    f"{what}: {self.module_name}.{function.__name__} has no parameter {unknown[0]!r} "
                    "on this runtime; remove that option or use a newer runtime"
                )
        return function(*args, **given)

    def _private_option(self, function: Callable[..., Any]) -> dict[str, bool]:
        accepted = _parameters(function) or set()
        for option in ("private", "temporary"):  # pyspark.pipelines / dlt
            if option in accepted:
                return {option: True}
        return {}

    def _expect(self, func: QueryFunction, expectations: tuple[Expectation, ...]) -> Any:
        """The query wrapped in the native expectation decorators, to hand to the dataset decorator.

        Each decorator returns a new object and only that object carries its rule (the runtime's
        contract, as in the `databricks-dlt` stubs), so each result is what the next one receives.
        """
        decorators = {
            Action.WARN: self._function("expect"),
            Action.QUARANTINE: self._function("expect"),
            Action.DROP: self._function("expect_or_drop"),
            Action.FAIL: self._function("expect_or_fail"),
        }
        declared: Any = func
        for rule in reversed(expectations):  # innermost first, so they read top-down as declared
            declared = decorators[rule.action](rule.name, null_safe(rule.constraint))(declared)
        return declared

    def _dataset_function(self, kind: DatasetKind) -> Callable[..., Any]:
        if kind is DatasetKind.STREAMING_TABLE:
            return self._function("table")
        if kind is DatasetKind.MATERIALIZED_VIEW:
            return self._function("materialized_view", "table")  # dlt: @table with a batch query
        return self._function("temporary_view", "view")

    def _define(
        self,
        kind: DatasetKind,
        name: str,
        query: QueryFunction,
        expectations: tuple[Expectation, ...],
        options: Mapping[str, Any],
        private: bool = False,
    ) -> None:
        function = self._dataset_function(kind)
        declared = self._expect(query, expectations)
        extra = self._private_option(function) if private else {}
        decorator = self._call(function, f"dataset {name!r}", name=name, **options, **extra)
        decorator(declared)

    @staticmethod
    def _options(dataset: Dataset) -> dict[str, Any]:
        options: dict[str, Any] = {"comment": dataset.comment, "spark_conf": dict(dataset.spark_conf) or None}
        if dataset.kind is not DatasetKind.TEMPORARY_VIEW:
            options.update(
                table_properties=dict(dataset.table_properties) or None,
                partition_cols=list(dataset.partition_cols) or None,
                cluster_by=list(dataset.cluster_by) or None,
                schema=dataset.schema,
            )
        return options

    # --- the registry interface ---------------------------------------------------------------
    def register_dataset(self, dataset: Dataset) -> None:
        if dataset.query is None:  # create_streaming_table: fed by flows
            self._streaming_table(dataset)
        else:
            self._with_query(dataset, dataset.query)

    def register_query_table(self, dataset: Dataset, flow: Flow) -> None:
        self._with_query(dataset, flow.query)

    def register_flow(self, flow: AnyFlow) -> None:
        if isinstance(flow, AutoCdcFlow):
            self._auto_cdc(flow)
        else:
            self._append_flow(flow)

    def add_expectations(self, dataset_name: str, expectations: tuple[Expectation, ...]) -> None:
        names = ", ".join(e.name for e in expectations)
        raise GraphError(
            f"expectations {names} on {dataset_name!r} are placed above its dataset decorator; on Databricks "
            "put expectation decorators below @table / @materialized_view / @temporary_view"
        )

    # --- datasets -----------------------------------------------------------------------------
    def _with_query(self, dataset: Dataset, func: QueryFunction) -> None:
        quarantine = [e for e in dataset.expectations if e.action is Action.QUARANTINE]
        options = self._options(dataset)
        if not quarantine:
            self._define(dataset.kind, dataset.name, _query(func), dataset.expectations, options)
            return
        twin = dataset.name + CHECKED_SUFFIX
        expectations = dataset.expectations
        self._define(
            dataset.kind,
            twin,
            _query(lambda: flag(func(), expectations, dataset.name), func),
            self._twin_rules(expectations),
            self._twin_options(dataset),
            private=True,
        )
        self._split(dataset, twin, options, self._reader(dataset.kind, func))

    @staticmethod
    def _twin_rules(expectations: tuple[Expectation, ...]) -> tuple[Expectation, ...]:
        """On the twin: the quarantine rules (counted, as `expect`) and the fail rules."""
        return tuple(
            Expectation(e.name, e.constraint, Action.WARN if e.action is Action.QUARANTINE else e.action, e.description)
            for e in expectations
            if e.action in (Action.QUARANTINE, Action.FAIL)
        )

    @staticmethod
    def _twin_options(dataset: Dataset) -> dict[str, Any]:
        options: dict[str, Any] = {
            "comment": f"{dataset.name} with its expectation outcomes (quarantine pattern)",
            "spark_conf": dict(dataset.spark_conf) or None,
        }
        if dataset.kind is not DatasetKind.TEMPORARY_VIEW:
            options["partition_cols"] = [QUARANTINED]
        return options

    @staticmethod
    def _reader(kind: DatasetKind, probe: QueryFunction | None) -> Callable[[str], DataFrame]:
        """How the valid and quarantine datasets read the twin: as a stream or as a batch."""

        def read(name: str) -> DataFrame:
            reader = current_reader()
            if kind is DatasetKind.MATERIALIZED_VIEW:
                return reader.read(name)
            if kind is DatasetKind.TEMPORARY_VIEW and probe is not None and not probe().isStreaming:
                return reader.read(name)
            return reader.read_stream(name)

        return read

    def _split(self, dataset: Dataset, twin: str, options: Mapping[str, Any], read: Callable[[str], DataFrame]) -> None:
        """`<dataset>` (rows not quarantined) and `<dataset>_quarantine` (with the rule names)."""
        kept = tuple(e for e in dataset.expectations if e.action in (Action.WARN, Action.DROP))

        def valid() -> DataFrame:
            return read(twin).filter(~F.col(QUARANTINED)).drop(FAILED, QUARANTINED)

        def quarantined() -> DataFrame:
            return read(twin).filter(F.col(QUARANTINED)).drop(QUARANTINED)

        valid.__qualname__ = quarantined.__qualname__ = f"quarantine_pattern.{dataset.name}"
        self._define(dataset.kind, dataset.name, valid, kept, options)
        quarantine_kind = (
            DatasetKind.MATERIALIZED_VIEW
            if dataset.kind is DatasetKind.MATERIALIZED_VIEW
            else DatasetKind.STREAMING_TABLE  # `@table`: a streaming table for a streaming read
        )
        self._define(
            quarantine_kind,
            dataset.name + QUARANTINE_SUFFIX,
            quarantined,
            (),
            {
                "comment": f"Rows of {dataset.name} that failed a quarantine expectation ({FAILED} names them)",
                "table_properties": {"layer": "quarantine", "quarantine_of": dataset.name},
            },
        )

    def _streaming_table(self, dataset: Dataset) -> None:
        create = self._function("create_streaming_table")
        options = self._options(dataset)
        quarantine = [e for e in dataset.expectations if e.action is Action.QUARANTINE]
        if not quarantine:
            self._call(create, f"streaming table {dataset.name!r}", dataset.name, **options, **self._rules(dataset))
            return
        # Quarantine on a table fed by append flows: the flows feed the twin (see register_flow).
        twin = dataset.name + CHECKED_SUFFIX
        twin_rules = self._twin_rules(dataset.expectations)
        self._call(
            create,
            f"streaming table {twin!r}",
            twin,
            **self._twin_options(dataset),
            **self._private_option(create),
            expect_all={e.name: null_safe(e.constraint) for e in twin_rules if e.action is Action.WARN} or None,
            expect_all_or_fail={e.name: null_safe(e.constraint) for e in twin_rules if e.action is Action.FAIL} or None,
        )
        self._twins[dataset.name] = (twin, dataset.expectations)
        self._split(dataset, twin, options, self._reader(DatasetKind.STREAMING_TABLE, None))

    @staticmethod
    def _rules(dataset: Dataset) -> dict[str, Any]:
        by_action: dict[str, dict[str, str]] = {"expect_all": {}, "expect_all_or_drop": {}, "expect_all_or_fail": {}}
        keyword = {Action.WARN: "expect_all", Action.DROP: "expect_all_or_drop", Action.FAIL: "expect_all_or_fail"}
        for rule in dataset.expectations:
            by_action[keyword[rule.action]][rule.name] = null_safe(rule.constraint)
        return {k: v or None for k, v in by_action.items()}

    # --- flows --------------------------------------------------------------------------------
    def _append_flow(self, flow: Flow) -> None:
        target, query = flow.target, _query(flow.query)
        if flow.target in self._twins:  # quarantine on the target: rows are checked on the way in
            target, expectations = self._twins[flow.target]
            func = flow.query
            query = _query(lambda: flag(func(), expectations, flow.target), func)
        decorator = self._call(
            self._function("append_flow"),
            f"flow {flow.name!r}",
            target=target,
            name=flow.name,
            once=flow.once,
            spark_conf=dict(flow.spark_conf) or None,
            comment=flow.comment,
        )
        decorator(query)

    def _auto_cdc(self, flow: AutoCdcFlow) -> None:
        if flow.target in self._twins:
            raise GraphError(
                f"auto CDC flow {flow.name!r}: its target {flow.target!r} has quarantine expectations, which "
                "apply to appended rows only; put them on the source view instead"
            )
        function = self._function(*_AUTO_CDC)
        accepted = _parameters(function) or {"name"}
        name_option = "name" if "name" in accepted else "flow_name"
        source, truncates = flow.source, flow.apply_as_truncates
        if int(flow.stored_as_scd_type) == 2 and truncates is not None:
            source, truncates = self._without_truncates(flow.source, truncates), None
        options: dict[str, Any] = {
            "ignore_null_updates": flow.ignore_null_updates or flow.present_columns_column is not None,
            "apply_as_deletes": flow.apply_as_deletes,
            "apply_as_truncates": truncates,
            "column_list": list(flow.column_list) if flow.column_list is not None else None,
            "except_column_list": list(flow.except_column_list) if flow.except_column_list is not None else None,
            "stored_as_scd_type": flow.stored_as_scd_type,
            "track_history_column_list": list(flow.track_history_column_list or ()) or None,
            "track_history_except_column_list": list(flow.track_history_except_column_list or ()) or None,
            "once": flow.once,
            name_option: flow.name,
        }
        self._call(
            function,
            f"auto CDC flow {flow.name!r}",
            target=flow.target,
            source=source,
            keys=list(flow.keys),
            sequence_by=flow.sequence_by,
            **options,
        )

    def _without_truncates(self, source: str, truncates: str | Column) -> str:
        """A private view of `source` without its truncate events, for SCD type 2 flows.

        Databricks applies `apply_as_truncates` (APPLY AS TRUNCATE WHEN) to SCD type 1 only, and a
        truncate event (no key) must not reach an SCD2 flow as an upsert either. So on Databricks
        a truncate leaves history as it is: versions open at the truncate stay open until their
        key's next change or delete (the SCD1 table is emptied). One view per source and condition.
        """
        spec = (source, truncates if isinstance(truncates, str) else str(truncates))
        name = self._no_truncate_views.get(spec)
        if name is not None:
            return name
        name = source + NO_TRUNCATES_SUFFIX
        if name in self._no_truncate_views.values():  # another condition on the same source
            name += "_" + hashlib.sha1(spec[1].encode()).hexdigest()[:8]
        self._no_truncate_views[spec] = name

        def without_truncates() -> DataFrame:
            condition = F.expr(truncates) if isinstance(truncates, str) else truncates
            return current_reader().read_stream(source).filter(~F.coalesce(condition, F.lit(False)))

        without_truncates.__qualname__ = f"scd2_without_truncates.{source}"
        comment = f"{source} without its truncate events: SCD type 2 flows on Databricks take no truncates"
        self._define(DatasetKind.TEMPORARY_VIEW, name, without_truncates, (), {"comment": comment})
        return name
