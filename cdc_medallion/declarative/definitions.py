"""Immutable definitions of datasets, flows and expectations.

Decorators only build these and hand them to the active registry; what runs them (the local
runner, or Lakeflow on Databricks) is swappable, as in Spark's `pyspark.pipelines`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame

QueryFunction = Callable[[], DataFrame]


class Action(enum.StrEnum):
    """What happens to a row that fails an expectation (sqlglot-style error-level policy)."""

    WARN = "warn"
    DROP = "drop"
    FAIL = "fail"
    QUARANTINE = "quarantine"


@dataclass(frozen=True)
class Expectation:
    name: str
    constraint: str
    action: Action = Action.WARN
    description: str = ""


class DatasetKind(enum.StrEnum):
    STREAMING_TABLE = "streaming_table"
    MATERIALIZED_VIEW = "materialized_view"
    TEMPORARY_VIEW = "temporary_view"


@dataclass(frozen=True)
class Dataset:
    name: str
    kind: DatasetKind
    comment: str | None = None
    table_properties: Mapping[str, str] = field(default_factory=dict)
    partition_cols: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    schema: Any = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    expectations: tuple[Expectation, ...] = ()
    # Views and materialized views are defined by a query; streaming tables get flows.
    query: QueryFunction | None = None

    @property
    def is_view(self) -> bool:
        return self.kind is DatasetKind.TEMPORARY_VIEW


@dataclass(frozen=True)
class Flow:
    """An append flow: the query's new rows are appended to `target` on every update."""

    name: str
    target: str
    query: QueryFunction
    once: bool = False
    comment: str | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AutoCdcFlow:
    """`create_auto_cdc_flow`: apply a change feed to `target` as SCD type 1 or 2.

    `present_columns_column` is a local extension for formats whose images are partial
    (absent column ≠ NULL); on Databricks it compiles to `ignore_null_updates`.
    """

    name: str
    target: str
    source: str
    keys: tuple[str, ...]
    sequence_by: str | Column
    ignore_null_updates: bool = False
    apply_as_deletes: str | Column | None = None
    apply_as_truncates: str | Column | None = None
    column_list: tuple[str, ...] | None = None
    except_column_list: tuple[str, ...] | None = None
    stored_as_scd_type: int = 1
    track_history_column_list: tuple[str, ...] | None = None
    track_history_except_column_list: tuple[str, ...] | None = None
    once: bool = False
    present_columns_column: str | None = None


AnyFlow = Flow | AutoCdcFlow
