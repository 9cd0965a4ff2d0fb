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
  same arguments. Which keywords each function takes is the table `KEYWORDS`, from the references
  (not from the runtime's signatures, which may be `(*args, **kwargs)` wrappers); an option a
  reference does not document is an error here, before Databricks sees it.
- Auto CDC flows, our extension `present_columns_column` (partial images): Databricks documents
  no per-event "this column is absent". `ignore_null_updates` keeps the old value wherever an
  update holds a NULL (explicit NULLs too, nested fields too), and `columns_to_update` /
  `COLUMNS TO UPDATE` is listed without its semantics. So such a flow reads a private view of its
  source, `<flow>__input`, in which each event's absent columns are filled from its key's image
  before it (`partial_images.fill_absent_columns`), and gets no `ignore_null_updates`: the flow
  upserts whole images, an explicit NULL is a NULL, an absent column keeps its value, on both
  engines. `ignore_null_updates=True` given by a flow itself is passed as it is.
- An SCD type 2 auto CDC flow gets no `apply_as_truncates`: Databricks supports APPLY AS TRUNCATE
  WHEN for SCD type 1 only. Its `<flow>__input` view leaves the truncate events out, so a
  truncate never reaches it; its history keeps the versions that were open at the truncate open
  (locally they are closed at the truncate's sequence).
- Each `<flow>__input` view belongs to its flow and is declared with it, every time: nothing is
  remembered from one evaluation of the pipeline's files to the next, so a runtime that evaluates
  them again in a warm interpreter gets the same graph. (The one thing kept between calls,
  which streaming tables take quarantine rules on behalf of their append flows, is set anew by
  every `create_streaming_table`.)
- Expectations become the native decorators, chained: each returns a new object, the next
  decorator (and finally the dataset decorator) receives it, as the runtime requires (only that
  object carries the rule). Constraints are passed as `constraints.null_safe` makes them, the
  text the local runner evaluates too: on lines of their own (a `--` comment ends at its line)
  and NULL-safe (a NULL result fails, as locally; natively it would pass).
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
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdc_medallion.declarative.constraints import null_safe
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
from cdc_medallion.declarative.partial_images import fill_absent_columns
from cdc_medallion.declarative.registry import GraphElementRegistry
from cdc_medallion.declarative.runtime import current_reader
from cdc_medallion.errors import GraphError
from cdc_medallion.names import CHECKED_SUFFIX, FAILED, INPUT_SUFFIX, QUARANTINE_SUFFIX

API_MODULES = ("pyspark.pipelines", "dlt")
_REQUIRED = ("table", "create_streaming_table", "append_flow", "expect", "expect_or_drop", "expect_or_fail")
_AUTO_CDC = ("create_auto_cdc_flow", "apply_changes")

QUARANTINED = "__quarantined"

PIPELINES, DLT = "pyspark.pipelines", "dlt"
_DATASET = frozenset(
    {"name", "comment", "spark_conf", "table_properties", "path", "partition_cols", "cluster_by_auto", "cluster_by"}
    | {"schema", "row_filter", "private"}
)
_CDC = frozenset(
    {"target", "source", "keys", "sequence_by", "ignore_null_updates", "apply_as_deletes", "apply_as_truncates"}
    | {"column_list", "except_column_list", "stored_as_scd_type", "track_history_column_list"}
    | {"track_history_except_column_list", "once", "ignore_null_updates_column_list"}
    | {"ignore_null_updates_except_column_list", "columns_to_update"}
)
_DLT_DATASET = frozenset({"name", "comment", "spark_conf", "table_properties", "partition_cols", "path", "schema"})
#: The keywords each API function takes, as its reference documents them: `pyspark.pipelines` by
#: the Databricks pipeline Python reference (ldp-python-ref-table, -materialized-view, -view,
#: -streaming-table, -append-flow, -apply-changes), `dlt` by the official `databricks-dlt` stubs
#: (`tests/test_databricks_standins.py` compares them), whose `apply_changes` the reference says
#: `create_auto_cdc_flow` shares, but for `name`. The facade decides by this table, never by a
#: runtime function's signature: a runtime may hand out `(*args, **kwargs)` wrappers.
KEYWORDS: dict[str, dict[str, frozenset[str]]] = {
    PIPELINES: {
        "table": _DATASET,
        "materialized_view": _DATASET | {"refresh_policy"},
        "temporary_view": frozenset({"name", "comment"}),
        "create_streaming_table": _DATASET | {"expect_all", "expect_all_or_drop", "expect_all_or_fail"},
        "append_flow": frozenset({"target", "name", "once", "spark_conf", "comment"}),
        "create_auto_cdc_flow": _CDC | {"system_sequence_by", "name"},
    },
    DLT: {
        "table": _DLT_DATASET | {"temporary", "cluster_by", "row_filter"},
        "view": frozenset({"name", "comment", "spark_conf"}),
        "create_streaming_table": _DLT_DATASET
        | {"expect_all", "expect_all_or_drop", "expect_all_or_fail", "cluster_by", "row_filter"},
        "append_flow": frozenset({"name", "target", "comment", "spark_conf", "once"}),
        "apply_changes": _CDC | {"where", "flow_name"},
        "create_auto_cdc_flow": _CDC | {"where", "name"},
    },
}


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
    """The registry forwarding to the Databricks API, when that API is in charge. One per API
    module: it keeps nothing that a second evaluation of the pipeline's files would find stale."""
    module = find_pipelines_module()
    if module is None:
        return None
    registry = _registries.get(id(module))
    if registry is None or registry.api is not module:
        registry = _registries[id(module)] = DatabricksRegistry(module)
    return registry


# --- the quarantine pattern's row marking (shared by the twin's query) ------------------------
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


def _condition(value: str | Column) -> Column:
    return F.expr(value) if isinstance(value, str) else value


class DatabricksRegistry(GraphElementRegistry):
    """Hands each definition to the Databricks pipeline API as it is registered."""

    def __init__(self, api: ModuleType) -> None:
        if not is_databricks_api(api):
            raise GraphError(f"module {getattr(api, '__name__', api)!r} is not the Databricks pipeline API")
        self.api = api
        #: Whose keywords `KEYWORDS` gives: Databricks' `pyspark.pipelines`, or a `dlt` module.
        self.flavor = PIPELINES if getattr(api, "__name__", None) == PIPELINES else DLT
        # Streaming tables declared with quarantine rules and fed by append flows: their checked
        # twin. Every create_streaming_table sets or clears its own entry, so a second evaluation
        # of the pipeline's files finds only what it declared itself.
        self._twins: dict[str, tuple[str, tuple[Expectation, ...]]] = {}

    # --- calling the API ----------------------------------------------------------------------
    @property
    def module_name(self) -> str:
        return getattr(self.api, "__name__", "pipelines")

    def _function(self, *names: str) -> str:
        """The first of `names` the API has (whether a function exists, not what it takes)."""
        for name in names:
            if callable(getattr(self.api, name, None)):
                return name
        raise GraphError(f"{self.module_name} has none of {', '.join(names)}")

    def _keywords(self, function: str) -> frozenset[str]:
        return KEYWORDS[self.flavor].get(function, frozenset())

    def _call(self, function: str, what: str, *args: Any, **kwargs: Any) -> Any:
        """Call with the options that are set; one its reference does not document is an error."""
        given = {k: v for k, v in kwargs.items() if _is_set(v)}
        unknown = sorted(set(given) - self._keywords(function))
        if unknown:
            raise GraphError(
                f"{what}: {self.module_name}.{function} documents no parameter {unknown[0]!r}; "
                "remove that option (or use a runtime whose reference has it)"
            )
        return getattr(self.api, function)(*args, **given)

    def _private_option(self, function: str) -> dict[str, bool]:
        keywords = self._keywords(function)
        for option in ("private", "temporary"):  # pyspark.pipelines / dlt
            if option in keywords:
                return {option: True}
        return {}

    def _expect(self, func: QueryFunction, expectations: tuple[Expectation, ...]) -> Any:
        """The query wrapped in the native expectation decorators, to hand to the dataset decorator.

        Each decorator returns a new object and only that object carries its rule (the runtime's
        contract, as in the `databricks-dlt` stubs), so each result is what the next one receives.
        """
        decorators = {
            Action.WARN: self.api.expect,
            Action.QUARANTINE: self.api.expect,
            Action.DROP: self.api.expect_or_drop,
            Action.FAIL: self.api.expect_or_fail,
        }
        declared: Any = func
        for rule in reversed(expectations):  # innermost first, so they read top-down as declared
            declared = decorators[rule.action](rule.name, null_safe(rule.constraint))(declared)
        return declared

    def _dataset_function(self, kind: DatasetKind) -> str:
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
        options = self._options(dataset)
        quarantine = [e for e in dataset.expectations if e.action is Action.QUARANTINE]
        if not quarantine:
            self._twins.pop(dataset.name, None)
            self._call(
                "create_streaming_table",
                f"streaming table {dataset.name!r}",
                dataset.name,
                **options,
                **self._rules(dataset),
            )
            return
        # Quarantine on a table fed by append flows: the flows feed the twin (see register_flow).
        twin = dataset.name + CHECKED_SUFFIX
        twin_rules = self._twin_rules(dataset.expectations)
        self._call(
            "create_streaming_table",
            f"streaming table {twin!r}",
            twin,
            **self._twin_options(dataset),
            **self._private_option("create_streaming_table"),
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
            "append_flow",
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
        name_option = "name" if "name" in self._keywords(function) else "flow_name"
        scd2 = int(flow.stored_as_scd_type) == 2
        drops_truncates = scd2 and flow.apply_as_truncates is not None
        source = flow.source
        if flow.present_columns_column is not None or drops_truncates:
            source = self._flow_input(flow, drops_truncates)
        options: dict[str, Any] = {
            "ignore_null_updates": flow.ignore_null_updates,  # never with present_columns_column (api)
            "apply_as_deletes": flow.apply_as_deletes,
            "apply_as_truncates": None if scd2 else flow.apply_as_truncates,
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

    def _flow_input(self, flow: AutoCdcFlow, drops_truncates: bool) -> str:
        """`<flow>__input`, a private view of the flow's source as Databricks' auto CDC takes it.

        - Partial images (`present_columns_column`): each event's absent columns filled from its
          key's image before it, so the flow upserts whole images (see the module docstring).
        - SCD type 2 with truncates: the truncate events left out. Databricks applies APPLY AS
          TRUNCATE WHEN to SCD type 1 only, and a truncate (no key) must not reach an SCD2 flow
          as an upsert either; so versions open at a truncate stay open until their key's next
          change or delete (the SCD1 table is emptied).

        Declared with its flow every time, never looked up: a second evaluation of the
        pipeline's files declares it again, as it declares the flow again.
        """
        name = flow.name + INPUT_SUFFIX
        truncates = flow.apply_as_truncates if drops_truncates else None
        fills = flow.present_columns_column is not None

        def flow_input() -> DataFrame:
            rows = current_reader().read_stream(flow.source)
            if truncates is not None:
                rows = rows.filter(~F.coalesce(_condition(truncates), F.lit(False)))
            return fill_absent_columns(rows, flow) if fills else rows

        flow_input.__qualname__ = f"auto_cdc_input.{flow.name}"
        what = [
            *(["each event's absent columns filled from its key's image before it"] if fills else []),
            *(["without its truncate events (SCD type 2 on Databricks takes none)"] if truncates is not None else []),
        ]
        comment = f"{flow.source} as auto CDC flow {flow.name} takes it: {'; '.join(what)}"
        self._define(DatasetKind.TEMPORARY_VIEW, name, flow_input, (), {"comment": comment})
        return name
