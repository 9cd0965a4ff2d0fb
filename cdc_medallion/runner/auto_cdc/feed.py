"""A batch of a change feed as events, and the tombstones kept for the flows of one spec.

The events are what every SCD type rebuilds from (`change_events`: the data columns, the
sequence, delete, truncate and which columns the image carries), computed and summarized once
per batch for every flow that reads the same feed the same way (`feed_spec`): gold's SCD1 and
SCD2 flows of one table share one `ChangeBatch` and one `FeedState`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DateType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampType,
)

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.identifiers import quote
from cdc_medallion.names import STATE_DIR
from cdc_medallion.runner.event_columns import DELETE, PRESENT, SEQ, TRUNCATE
from cdc_medallion.storage.delta_store import DeltaStore, Txn

#: Key types whose range in a batch narrows a MERGE to the target files that may hold its keys.
_RANGED = (ByteType, ShortType, IntegerType, LongType, StringType, DateType, TimestampType)


def _expr(value: str | Column | None, default: bool = False) -> Column:
    if value is None:
        return F.lit(default)
    return F.expr(value) if isinstance(value, str) else value


def data_columns(flow: AutoCdcFlow, source_columns: list[str]) -> list[str]:
    return flow.data_columns(source_columns)


def feed_spec(flow: AutoCdcFlow) -> tuple[Any, ...] | None:
    """What decides a flow's events and tombstones: flows that share it (gold's SCD1 and SCD2
    flows of one table) prepare each batch once and keep one state. None when an expression is
    a Column, which has no comparable text: such a flow keeps everything to itself."""
    parts = (flow.sequence_by, flow.apply_as_deletes, flow.apply_as_truncates)
    if any(isinstance(p, Column) for p in parts):
        return None
    return (
        flow.source,
        tuple(flow.keys),
        *parts,
        tuple(flow.column_list or ()) if flow.column_list is not None else None,
        tuple(flow.except_column_list or ()),
        flow.present_columns_column,
        flow.ignore_null_updates,
    )


def state_prefix(flow: AutoCdcFlow) -> str:
    """Where the tombstones of the flows sharing `flow`'s spec live: named by the source they
    read and a digest of the spec (a flow with a spec of its own: by its target)."""
    spec = feed_spec(flow)
    if spec is None:
        return f"{STATE_DIR}/{flow.target}"
    digest = hashlib.sha1(repr(spec).encode("utf-8")).hexdigest()[:10]
    return f"{STATE_DIR}/{flow.source}__{digest}"


@dataclass
class Summary:
    """What one job over a batch's events tells (`ChangeBatch.prepare`)."""

    events: int
    truncates: int
    deletes: int
    keys: int  # approximate: it only chooses a join strategy
    ranges: dict[str, tuple[Any, Any, bool]]
    partial: int  # upserts whose image lacks a value column: filled from earlier events


@dataclass
class ChangeBatch:
    """One micro-batch of a change feed, turned into events once for every flow of one spec:
    `rows` are its upserts and deletes, `new_truncates` the sequences of its truncates."""

    events: DataFrame
    rows: DataFrame
    new_truncates: DataFrame
    columns: list[str]
    summary: Summary
    state: FeedState

    @classmethod
    def prepare(cls, store: DeltaStore, flow: AutoCdcFlow, batch: DataFrame) -> ChangeBatch | None:
        """The batch's events, cached until `release` (None, and nothing cached, when it has none)."""
        columns = data_columns(flow, batch.columns)
        events = change_events(flow, batch, columns).persist()
        summary = _summary(flow, events, columns)
        if summary.events == 0:
            events.unpersist()
            return None
        return cls(
            events=events,
            rows=events.filter(~F.col(TRUNCATE)).drop(TRUNCATE),
            new_truncates=events.filter(F.col(TRUNCATE)).select(SEQ).distinct(),
            columns=columns,
            summary=summary,
            state=FeedState(store, flow),
        )

    def release(self) -> None:
        self.events.unpersist()


class FeedState:
    """The tombstones of the flows of one spec: every delete's key and sequence, appended, never
    merged (a tombstone older than a key's stored row changes nothing in a rebuild, so none needs
    removing), and each truncate's sequence in a table made at the first truncate, so whether
    there are any is a look at the file system, not a job."""

    def __init__(self, store: DeltaStore, flow: AutoCdcFlow) -> None:
        self.store = store
        self.keys = list(flow.keys)
        prefix = state_prefix(flow)
        self.tombstones_name = prefix
        self.truncates_name = f"{prefix}__truncates"
        # Looked at before this batch writes its own (`write`): the table is made by the first delete.
        self.had_tombstones = store.exists(self.tombstones_name)

    def tombstones(self) -> DataFrame | None:
        """None while no earlier batch left a tombstone. This batch's own deletes are among its
        events already, and a tombstone beside the delete that made it rebuilds the same (which
        is what makes a replay after `write` safe), so reading them back would cost a scan and
        a broadcast for nothing."""
        return self.store.read(self.tombstones_name) if self.had_tombstones else None

    def has_truncates(self) -> bool:
        return self.store.exists(self.truncates_name)

    def truncates(self, seq_type: Any) -> DataFrame:
        return self.store.read(self.truncates_name).select(F.col(SEQ).cast(seq_type).alias(SEQ))

    def write(self, change: ChangeBatch, txn: Txn) -> None:
        """The batch's deletes and truncates, before any flow's target: a replay after this
        commit sees them as stored tombstones beside the same events, which rebuild the same.
        A batch with neither writes nothing."""
        if change.summary.truncates:
            self.store.append(self.truncates_name, change.new_truncates, txn, {"layer": "state"})
        if change.summary.deletes:
            tombstones = change.rows.filter(F.col(DELETE)).select(*[F.col(quote(k)) for k in self.keys], SEQ)
            tombstones = self.store.conform(self.tombstones_name, tombstones)  # a key's type widens with its table
            self.store.append(self.tombstones_name, tombstones, txn, {"layer": "state"})


def is_partial(flow: AutoCdcFlow, columns: list[str]) -> Column:
    """Whether an event (of `change_events`) is an upsert whose image lacks a value column, which
    then keeps its value from the key's earlier events."""
    values = [c for c in columns if c not in flow.keys]
    lacking = F.array_except(F.array(*[F.lit(c) for c in values]), F.col(PRESENT)) if values else F.array()
    return ~F.col(TRUNCATE) & ~F.col(DELETE) & F.col(PRESENT).isNotNull() & (F.size(lacking) > 0)


def _summary(flow: AutoCdcFlow, events: DataFrame, columns: list[str]) -> Summary:
    """One job: how many events, deletes, truncates and partial images, about how many keys, and
    each orderable key's range (which narrows the MERGEs to the target files that may hold the
    batch's keys)."""
    is_row = ~F.col(TRUNCATE)
    keys = list(flow.keys)
    ranged = [k for k in keys if isinstance(events.schema[k].dataType, _RANGED)]
    aggregates = [
        F.count(F.lit(1)).alias("events"),
        F.count(F.when(F.col(TRUNCATE), 1)).alias("truncates"),
        F.count(F.when(is_row & F.col(DELETE), 1)).alias("deletes"),
        # Only chooses a join strategy: an estimate spares the two shuffles of an exact count.
        F.approx_count_distinct(F.when(is_row, F.struct(*[F.col(quote(k)) for k in keys]))).alias("keys"),
        F.count(F.when(is_partial(flow, columns), 1)).alias("partial"),
    ]
    for i, key in enumerate(ranged):
        value = F.when(is_row, F.col(quote(key)))
        aggregates += [F.min(value).alias(f"lo{i}"), F.max(value).alias(f"hi{i}")]
        aggregates.append(F.max(F.when(is_row & F.col(quote(key)).isNull(), 1)).alias(f"null{i}"))
    row = events.agg(*aggregates).first()
    assert row is not None
    ranges = {}
    for i, key in enumerate(ranged):
        if row[f"lo{i}"] is not None:
            ranges[key] = (row[f"lo{i}"], row[f"hi{i}"], row[f"null{i}"] is not None)
    return Summary(row["events"], row["truncates"], row["deletes"], row["keys"], ranges, row["partial"])


def change_events(flow: AutoCdcFlow, batch: DataFrame, columns: list[str]) -> DataFrame:
    """The flow's events of `batch`: its `columns`, SEQ, DELETE, TRUNCATE and PRESENT (the value
    columns the image carries; NULL: all), events without a sequence left out."""
    if flow.present_columns_column:
        present = F.col(flow.present_columns_column)
    elif flow.ignore_null_updates:
        present = F.filter(
            F.array(*[F.when(F.col(quote(c)).isNotNull(), F.lit(c)) for c in columns]), lambda x: x.isNotNull()
        )
    else:
        present = F.lit(None).cast(ArrayType(StringType()))
    sequence = F.col(flow.sequence_by) if isinstance(flow.sequence_by, str) else flow.sequence_by
    return batch.select(
        *[F.col(quote(c)) for c in columns],
        sequence.alias(SEQ),
        F.coalesce(_expr(flow.apply_as_deletes), F.lit(False)).alias(DELETE),
        F.coalesce(_expr(flow.apply_as_truncates), F.lit(False)).alias(TRUNCATE),
        present.alias(PRESENT),
    ).filter(F.col(SEQ).isNotNull())
