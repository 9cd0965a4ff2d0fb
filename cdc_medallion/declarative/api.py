"""Lakeflow / DLT Python API names, building immutable definitions for the active registry.

The signatures follow `pyspark.pipelines` (and `dlt` for the expectation decorators and
`create_streaming_table(expect_all...)`), so transformation files run unchanged on Databricks.
`expect_or_quarantine` / `expect_all_or_quarantine` are our extension; on Databricks they compile
to the documented quarantine pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pyspark.sql import Column, DataFrame

from cdc_medallion.declarative.definitions import (
    Action,
    AutoCdcFlow,
    Dataset,
    DatasetKind,
    Expectation,
    Flow,
    QueryFunction,
)
from cdc_medallion.declarative.registry import active_registry
from cdc_medallion.declarative.runtime import current_reader
from cdc_medallion.errors import GraphError

F = TypeVar("F", bound=Callable[..., Any])
_EXPECTATIONS_ATTR = "__cdc_medallion_expectations__"
_DATASET_ATTR = "__cdc_medallion_dataset__"


# --- expectations -----------------------------------------------------------------------------
def _attach(expectations: Sequence[Expectation]) -> Callable[[F], F]:
    """Expectations attach to the query function; the dataset decorator collects them.

    Placed above the dataset decorator they are added to the already-registered dataset, so
    both decorator orders work, as on Databricks.
    """

    def decorator(func: F) -> F:
        registered = getattr(func, _DATASET_ATTR, None)
        if registered is not None:
            active_registry().add_expectations(registered, tuple(expectations))
            return func
        existing: list[Expectation] = list(getattr(func, _EXPECTATIONS_ATTR, []))
        setattr(func, _EXPECTATIONS_ATTR, [*expectations, *existing])
        return func

    return decorator


def _many(rules: Mapping[str, str], action: Action) -> list[Expectation]:
    if not isinstance(rules, Mapping):
        raise GraphError(f"expect_all* takes a dict of name -> SQL constraint, got {type(rules).__name__}")
    return [Expectation(name, constraint, action) for name, constraint in rules.items()]


def expect(name: str, constraint: str) -> Callable[[F], F]:
    return _attach([Expectation(name, constraint, Action.WARN)])


def expect_or_drop(name: str, constraint: str) -> Callable[[F], F]:
    return _attach([Expectation(name, constraint, Action.DROP)])


def expect_or_fail(name: str, constraint: str) -> Callable[[F], F]:
    return _attach([Expectation(name, constraint, Action.FAIL)])


def expect_or_quarantine(name: str, constraint: str) -> Callable[[F], F]:
    return _attach([Expectation(name, constraint, Action.QUARANTINE)])


def expect_all(rules: Mapping[str, str]) -> Callable[[F], F]:
    return _attach(_many(rules, Action.WARN))


def expect_all_or_drop(rules: Mapping[str, str]) -> Callable[[F], F]:
    return _attach(_many(rules, Action.DROP))


def expect_all_or_fail(rules: Mapping[str, str]) -> Callable[[F], F]:
    return _attach(_many(rules, Action.FAIL))


def expect_all_or_quarantine(rules: Mapping[str, str]) -> Callable[[F], F]:
    return _attach(_many(rules, Action.QUARANTINE))


def expectations_from(items: Sequence[Expectation]) -> Callable[[F], F]:
    """Attach already-built expectations (e.g. loaded from expectations/*.yml)."""
    return _attach(list(items))


# --- datasets ---------------------------------------------------------------------------------
def _dataset_decorator(kind: DatasetKind, query_function: QueryFunction | None, **options: Any) -> Any:
    """The one body behind `table`, `materialized_view` and `temporary_view`."""

    def register(func: QueryFunction) -> QueryFunction:
        if not callable(func):
            raise GraphError(f"@{kind.value} must decorate a function returning a DataFrame")
        name = options.pop("name", None) or func.__name__
        expectations = tuple(getattr(func, _EXPECTATIONS_ATTR, ()))
        dataset = Dataset(
            name=name,
            kind=kind,
            comment=options.get("comment"),
            table_properties=dict(options.get("table_properties") or {}),
            partition_cols=tuple(options.get("partition_cols") or ()),
            cluster_by=tuple(options.get("cluster_by") or ()),
            schema=options.get("schema"),
            spark_conf=dict(options.get("spark_conf") or {}),
            expectations=expectations,
            query=func if kind is not DatasetKind.STREAMING_TABLE else None,
        )
        registry = active_registry()
        if kind is DatasetKind.STREAMING_TABLE:
            registry.register_query_table(dataset, Flow(name=name, target=name, query=func, comment=dataset.comment))
        else:
            registry.register_dataset(dataset)
        setattr(func, _DATASET_ATTR, name)
        return func

    if query_function is not None:
        return register(query_function)
    return register


def table(
    query_function: QueryFunction | None = None,
    *,
    name: str | None = None,
    comment: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    table_properties: Mapping[str, str] | None = None,
    partition_cols: Sequence[str] | None = None,
    cluster_by: Sequence[str] | None = None,
    schema: Any = None,
) -> Any:
    """A streaming table whose defining query's new rows are appended on each update."""
    return _dataset_decorator(
        DatasetKind.STREAMING_TABLE,
        query_function,
        name=name,
        comment=comment,
        spark_conf=spark_conf,
        table_properties=table_properties,
        partition_cols=partition_cols,
        cluster_by=cluster_by,
        schema=schema,
    )


def materialized_view(
    query_function: QueryFunction | None = None,
    *,
    name: str | None = None,
    comment: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    table_properties: Mapping[str, str] | None = None,
    partition_cols: Sequence[str] | None = None,
    cluster_by: Sequence[str] | None = None,
    schema: Any = None,
) -> Any:
    """A table recomputed from its query on every update."""
    return _dataset_decorator(
        DatasetKind.MATERIALIZED_VIEW,
        query_function,
        name=name,
        comment=comment,
        spark_conf=spark_conf,
        table_properties=table_properties,
        partition_cols=partition_cols,
        cluster_by=cluster_by,
        schema=schema,
    )


def temporary_view(
    query_function: QueryFunction | None = None,
    *,
    name: str | None = None,
    comment: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
) -> Any:
    """A view inlined into every flow that reads it; never stored."""
    return _dataset_decorator(
        DatasetKind.TEMPORARY_VIEW, query_function, name=name, comment=comment, spark_conf=spark_conf
    )


def create_streaming_table(
    name: str,
    *,
    comment: str | None = None,
    table_properties: Mapping[str, str] | None = None,
    partition_cols: Sequence[str] | None = None,
    cluster_by: Sequence[str] | None = None,
    schema: Any = None,
    expect_all: Mapping[str, str] | None = None,
    expect_all_or_drop: Mapping[str, str] | None = None,
    expect_all_or_fail: Mapping[str, str] | None = None,
    expect_all_or_quarantine: Mapping[str, str] | None = None,
) -> None:
    """A streaming table fed by separately declared flows (append flows, auto CDC flows)."""
    expectations = (
        _many(expect_all or {}, Action.WARN)
        + _many(expect_all_or_drop or {}, Action.DROP)
        + _many(expect_all_or_fail or {}, Action.FAIL)
        + _many(expect_all_or_quarantine or {}, Action.QUARANTINE)
    )
    active_registry().register_dataset(
        Dataset(
            name=name,
            kind=DatasetKind.STREAMING_TABLE,
            comment=comment,
            table_properties=dict(table_properties or {}),
            partition_cols=tuple(partition_cols or ()),
            cluster_by=tuple(cluster_by or ()),
            schema=schema,
            expectations=tuple(expectations),
        )
    )


def append_flow(
    *,
    target: str,
    name: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    once: bool = False,
    comment: str | None = None,
) -> Callable[[QueryFunction], QueryFunction]:
    """Append the query's new rows to an existing streaming table `target`."""

    def register(func: QueryFunction) -> QueryFunction:
        active_registry().register_flow(
            Flow(
                name=name or func.__name__,
                target=target,
                query=func,
                once=once,
                comment=comment,
                spark_conf=dict(spark_conf or {}),
            )
        )
        return func

    return register


def create_auto_cdc_flow(
    target: str,
    source: str,
    keys: Sequence[str],
    sequence_by: str | Column,
    ignore_null_updates: bool = False,
    apply_as_deletes: str | Column | None = None,
    apply_as_truncates: str | Column | None = None,
    column_list: Sequence[str] | None = None,
    except_column_list: Sequence[str] | None = None,
    stored_as_scd_type: int | str = 1,
    track_history_column_list: Sequence[str] | None = None,
    track_history_except_column_list: Sequence[str] | None = None,
    name: str | None = None,
    once: bool = False,
    present_columns_column: str | None = None,
) -> None:
    """Apply the change feed `source` to `target` as an SCD type 1 or 2 table (DLT semantics).

    `present_columns_column` (our extension) names an array column listing the columns each
    event carries: a column absent from it keeps its value, an explicit NULL is a NULL.
    `ignore_null_updates` (Databricks') keeps the value wherever an update holds a NULL. They
    answer the same question two ways, so a flow takes one of them.
    """
    scd = int(stored_as_scd_type)
    if scd not in (1, 2):
        raise GraphError(f"stored_as_scd_type must be 1 or 2, got {stored_as_scd_type!r} (flow into {target})")
    if column_list is not None and except_column_list is not None:
        raise GraphError(f"auto CDC flow into {target}: give column_list or except_column_list, not both")
    if not keys:
        raise GraphError(f"auto CDC flow into {target}: keys must not be empty")
    if ignore_null_updates and present_columns_column is not None:
        raise GraphError(
            f"auto CDC flow into {target}: give present_columns_column or ignore_null_updates, not both "
            "(with present_columns_column an explicit NULL is a NULL)"
        )
    active_registry().register_flow(
        AutoCdcFlow(
            name=name or target,
            target=target,
            source=source,
            keys=tuple(keys),
            sequence_by=sequence_by,
            ignore_null_updates=ignore_null_updates,
            apply_as_deletes=apply_as_deletes,
            apply_as_truncates=apply_as_truncates,
            column_list=tuple(column_list) if column_list is not None else None,
            except_column_list=tuple(except_column_list) if except_column_list is not None else None,
            stored_as_scd_type=scd,
            track_history_column_list=tuple(track_history_column_list) if track_history_column_list else None,
            track_history_except_column_list=(
                tuple(track_history_except_column_list) if track_history_except_column_list else None
            ),
            once=once,
            present_columns_column=present_columns_column,
        )
    )


# --- reading other datasets -------------------------------------------------------------------
def read(name: str) -> DataFrame:
    """The whole current content of a dataset of this pipeline (batch)."""
    return current_reader().read(name)


def read_stream(name: str) -> DataFrame:
    """The rows of a dataset this flow has not processed yet (streaming)."""
    return current_reader().read_stream(name)
