"""Immutable definitions of datasets, flows and expectations.

Decorators only build these and hand them to the active registry; what runs them (the local
runner, or Lakeflow on Databricks) is swappable, as in Spark's `pyspark.pipelines`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame

from cdc_medallion.errors import GraphError

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
    (absent column ≠ NULL): it names an array column listing the columns each event carries.
    On Databricks the registry fills the absent columns before the flow (see
    `declarative/databricks.py`), so the flow there takes whole images.
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

    def data_columns(self, source_columns: Sequence[str]) -> list[str]:
        """The source columns the flow writes to its target (`column_list`, or every column but
        `except_column_list`), its keys among them: one rule for every engine."""
        if self.column_list is not None:
            missing = [c for c in self.column_list if c not in source_columns]
            if missing:
                raise GraphError(f"auto CDC flow {self.name}: column_list names unknown columns {missing}")
            columns = list(self.column_list)
        else:
            excluded = set(self.except_column_list or ())
            columns = [c for c in source_columns if c not in excluded]
        for key in self.keys:
            if key not in columns:
                raise GraphError(f"auto CDC flow {self.name}: key {key!r} is not among the columns {columns}")
        return columns


AnyFlow = Flow | AutoCdcFlow
