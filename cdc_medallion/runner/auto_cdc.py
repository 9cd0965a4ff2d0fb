"""`create_auto_cdc_flow` semantics on Delta tables: SCD type 1 and 2, out-of-order safe.

One micro-batch of a flow's change feed at a time (the flow's `foreachBatch`). For the keys a
batch touches, the target's existing rows are turned back into events, merged with the new
events, and each key's state is rebuilt in sequence order; the changed rows go into the target
in one MERGE. A late event therefore lands at its place in the history, and a late update never
resurrects a deleted row: deletes leave a tombstone in the flow's state table, truncates a
table-wide marker (DLT keeps tombstones the same way). SCD1 skips the rebuild when nothing needs
it (no truncate ever, no partial image in the batch): each key's last event then decides alone,
and the MERGE compares sequences with the stored row (`_write_scd1_latest`).

Rules (as in DLT): a new SCD2 version starts when a tracked column changes or the key comes
back after a delete; changes to untracked columns update the current version in place; a
delete closes the open version at the delete's sequence. Columns absent from a partial image
keep their previous value.

Every write names the batch (`Txn`), so a batch replayed after a crash skips what it already
committed: the state first, then the target, so a replay after the state's commit sees the
batch's own tombstones, which give the same result.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DateType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.faults import commit_point
from cdc_medallion.identifiers import quote
from cdc_medallion.runner.event_columns import (
    ACTION,
    DELETE,
    END_AT,
    OLD_END,
    ORIGIN,
    PRESENT,
    SCD1_SEQUENCE,
    SEQ,
    START_AT,
    TRUNCATE,
)
from cdc_medallion.storage.delta_store import STATE_DIR, DeltaStore, Txn

BROADCAST_KEYS = 2_000_000  # batches are bounded by rows and bytes, so their keys are far fewer
#: Key types whose range in a batch narrows a MERGE to the target files that may hold its keys.
_RANGED = (ByteType, ShortType, IntegerType, LongType, StringType, DateType, TimestampType)


@dataclass
class ApplyResult:
    upserted: int = 0
    deleted: int = 0
    truncates: int = 0


def _expr(value: str | Column | None, default: bool = False) -> Column:
    if value is None:
        return F.lit(default)
    return F.expr(value) if isinstance(value, str) else value


def data_columns(flow: AutoCdcFlow, source_columns: list[str]) -> list[str]:
    return flow.data_columns(source_columns)


def tracked_columns(flow: AutoCdcFlow, columns: list[str]) -> list[str]:
    values = [c for c in columns if c not in flow.keys]
    if flow.track_history_column_list is not None:
        return [c for c in values if c in flow.track_history_column_list]
    if flow.track_history_except_column_list is not None:
        return [c for c in values if c not in flow.track_history_except_column_list]
    return values


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


def apply_batch(
    store: DeltaStore, flow: AutoCdcFlow, batch: DataFrame, txn: Txn, properties: Mapping[str, str] | None = None
) -> ApplyResult:
    """One flow applies one batch on its own: events, tombstones, then the target."""
    change = ChangeBatch.prepare(store, flow, batch)
    if change is None:
        return ApplyResult()
    try:
        change.state.write(change, txn)
        return AutoCdcApplier(store, flow, properties or {}).apply(change, txn)
    finally:
        change.release()


class AutoCdcApplier:
    """Applies the micro-batches of one auto CDC flow to its target."""

    def __init__(self, store: DeltaStore, flow: AutoCdcFlow, properties: Mapping[str, str]) -> None:
        self.store = store
        self.flow = flow
        self.properties = dict(properties)
        #: The target's columns for this batch's writes (`apply` sets it: the table's, or the
        #: batch's own for a target its first rows make).
        self.target_schema = StructType()

    def apply(self, change: ChangeBatch, txn: Txn, session: SparkSession | None = None) -> ApplyResult:
        """Apply one prepared batch whose tombstones `change.state` holds already; the writes go
        through `session` (default: the batch's)."""
        session = session or change.rows.sparkSession
        wanted = self._target_schema(change.events, change.columns)
        name = self.flow.target
        if self.store.exists(name):
            self.target_schema = self.store.evolve(name, wanted)  # a column added by DDL, or a type widened
            target = self.store.read(name)
            # A target that holds nothing yet (made empty, by an earlier engine or by a first batch
            # of deletes only) takes the batch's rows by an append: no stored row can match, and
            # an append costs a fraction of a MERGE.
            empty_target = self.store.version(name) == 0 and self.store.rows_written_since(name, None) == 0
        else:
            # The batch's rows make the target, in the commit that writes them (`DeltaStore.append`).
            self.target_schema = wanted
            target = session.createDataFrame([], wanted)
            empty_target = True
        result = self._apply(session, change, txn, target, empty_target)
        result.truncates = change.summary.truncates
        return result

    def _target_schema(self, events: DataFrame, columns: list[str]) -> StructType:
        fields = [events.schema[c] for c in columns]
        seq_type = events.schema[SEQ].dataType
        if self.flow.stored_as_scd_type == 1:
            extra = [StructField(SCD1_SEQUENCE, seq_type)]
        else:
            extra = [StructField(START_AT, seq_type), StructField(END_AT, seq_type)]
        return StructType([StructField(f.name, f.dataType, True) for f in fields] + extra)

    # --- rebuild -----------------------------------------------------------------------------
    def _apply(self, session: Any, change: ChangeBatch, txn: Txn, target: DataFrame, empty_target: bool) -> ApplyResult:
        flow, rows, columns, summary = self.flow, change.rows, change.columns, change.summary
        keys = list(flow.keys)
        for column in columns:  # a column the batch lacks: treat as absent, keep previous values
            if column not in target.columns:
                target = target.withColumn(column, F.lit(None).cast(rows.schema[column].dataType))
        state = change.state.tombstones()
        new_truncates = summary.truncates > 0
        has_truncates = new_truncates or change.state.has_truncates()
        if flow.stored_as_scd_type == 1 and not has_truncates and summary.partial == 0:
            return self._write_scd1_latest(session, change, state, txn, empty_target)
        to_release: list[DataFrame] = []
        if new_truncates:  # a new truncate touches every key of the table
            affected = target.select(*_cols(keys)).union(rows.select(*_cols(keys))).distinct().persist()
            to_release.append(affected)
            keys_in_batch = affected.count()
        else:  # a semi join needs no distinct keys: `rows` is cached, so reading them again is cheap
            affected = rows.select(*_cols(keys)).distinct() if has_truncates else rows.select(*_cols(keys))
            keys_in_batch = summary.keys
        seq_type = rows.schema[SEQ].dataType
        truncates = change.new_truncates
        if change.state.has_truncates():
            truncates = change.state.truncates(seq_type).unionByName(truncates).distinct()
        try:
            # A batch costs what it touches rather than what the table holds.
            affected = _shipped(affected, keys_in_batch)
            # An empty target has no rows to reread: not scanning it spares a table's first
            # batch a file listing and a broadcast (its tombstones are still read).
            touched = None if empty_target else target.join(affected, on=keys, how="left_semi")
            history = self._existing_events(target.schema, touched, state, affected, columns)
            everything = rows.withColumn(ORIGIN, F.lit(1))
            if flow.stored_as_scd_type == 2:
                everything = everything.withColumn(OLD_END, F.lit(None).cast(rows.schema[SEQ].dataType))
            if history is not None:
                everything = everything.unionByName(history)
            if has_truncates:  # each truncate is a delete of every touched key
                everything = everything.unionByName(
                    affected.crossJoin(truncates).select(
                        *_cols(keys),
                        *[F.lit(None).cast(rows.schema[c].dataType).alias(c) for c in columns if c not in keys],
                        F.col(SEQ).cast(rows.schema[SEQ].dataType).alias(SEQ),
                        F.lit(True).alias(DELETE),
                        F.lit(None).cast(ArrayType(StringType())).alias(PRESENT),
                        F.lit(-1).alias(ORIGIN),
                    ),
                    allowMissingColumns=flow.stored_as_scd_type == 2,  # its OLD_END is NULL
                )
            filled = self._fill(everything, columns)
            ranges = {} if new_truncates else summary.ranges
            if flow.stored_as_scd_type == 1:
                return self._write_scd1(session, filled, columns, txn, ranges, empty_target)
            return self._write_scd2(session, filled, columns, txn, ranges, empty_target)
        finally:
            for df in to_release:
                df.unpersist()

    def _existing_events(
        self,
        schema: StructType,
        rows: DataFrame | None,
        state: DataFrame | None,
        affected: DataFrame,
        columns: list[str],
    ) -> DataFrame | None:
        """The target's rows of the touched keys (`rows`, of the target's `schema`; None when the
        target is empty) and the state's tombstones of those keys (none while the flow has seen
        no delete), turned back into events; None when there are neither."""
        events: list[DataFrame] = []
        if rows is not None:
            events.append(self._stored_rows_as_events(rows, columns))
        if state is not None:
            events.append(self._tombstones_as_events(schema, state, affected, columns))
        if not events:
            return None
        return reduce(DataFrame.unionByName, events).withColumn(ORIGIN, F.lit(0))

    def _stored_rows_as_events(self, rows: DataFrame, columns: list[str]) -> DataFrame:
        """A stored row is the upsert that made it: SCD1 keeps its sequence, SCD2 its start and end."""
        null_present = F.lit(None).cast(ArrayType(StringType()))
        if self.flow.stored_as_scd_type == 1:
            return rows.select(
                *_cols(columns),
                F.col(SCD1_SEQUENCE).alias(SEQ),
                F.lit(False).alias(DELETE),
                null_present.alias(PRESENT),
            )
        return rows.select(
            *_cols(columns),
            F.col(START_AT).alias(SEQ),
            F.lit(False).alias(DELETE),
            null_present.alias(PRESENT),
            F.col(END_AT).alias(OLD_END),
        )

    def _tombstones_as_events(
        self, schema: StructType, state: DataFrame, affected: DataFrame, columns: list[str]
    ) -> DataFrame:
        """A stored tombstone is the delete that made it, for the touched keys only."""
        keys = list(self.flow.keys)
        deletes = state.join(affected, on=keys, how="left_semi").select(
            *[F.col(quote(k)).cast(schema[k].dataType).alias(k) for k in keys],
            *[F.lit(None).cast(schema[c].dataType).alias(c) for c in columns if c not in keys],
            F.col(SEQ),
            F.lit(True).alias(DELETE),
            F.lit(None).cast(ArrayType(StringType())).alias(PRESENT),
        )
        if self.flow.stored_as_scd_type == 2:
            deletes = deletes.withColumn(OLD_END, F.lit(None).cast(schema[END_AT].dataType))
        return deletes

    def _fill(self, events: DataFrame, columns: list[str]) -> DataFrame:
        """Carry absent columns forward within a key's life (since its last delete)."""
        keys = list(self.flow.keys)
        order = [F.col(SEQ), F.col(ORIGIN)]
        by_key = Window.partitionBy(*_cols(keys)).orderBy(*order)
        running = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        events = events.withColumn("__life", F.sum(F.col(DELETE).cast("int")).over(running) - F.col(DELETE).cast("int"))
        in_life = (
            Window.partitionBy(*_cols(keys), "__life")
            .orderBy(*order)
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        values = [c for c in columns if c not in keys]
        if not values:
            return events
        present = F.col(PRESENT)
        return events.select(
            *[F.col(quote(k)) for k in keys],
            *[
                F.last(
                    F.when(present.isNull() | F.array_contains(present, c), F.struct(F.col(quote(c)).alias("v"))),
                    ignorenulls=True,
                )
                .over(in_life)
                .getField("v")
                .alias(c)
                for c in values
            ],
            SEQ,
            DELETE,
            ORIGIN,
            "__life",
            *[c for c in events.columns if c == OLD_END],
        )

    # --- SCD1 -------------------------------------------------------------------------------
    def _write_scd1(
        self,
        session: Any,
        filled: DataFrame,
        columns: list[str],
        txn: Txn,
        ranges: dict[str, tuple[Any, Any, bool]],
        empty_target: bool,
    ) -> ApplyResult:
        keys = list(self.flow.keys)
        last = Window.partitionBy(*_cols(keys)).orderBy(F.col(SEQ).desc(), F.col(ORIGIN).desc())
        final = _detached(
            filled.withColumn("__rn", F.row_number().over(last))
            .filter("__rn = 1")
            .select(*[F.col(quote(c)) for c in columns], SEQ, DELETE),
            empty_target,
        )
        try:
            return self._merge(session, _scd1_changes(final, columns), keys, txn, ranges, empty_target)
        finally:
            _release(final)

    def _write_scd1_latest(
        self, session: Any, change: ChangeBatch, state: DataFrame | None, txn: Txn, empty_target: bool
    ) -> ApplyResult:
        """SCD1 without a rebuild. With whole images and no truncate, a key's row is its last
        event's image, so earlier events and the stored row's values do not matter, only
        sequences: the batch's last event of a key applies where it is not older than the
        stored row (the MERGE's guard) nor, for an upsert, than the key's newest tombstone
        (a late upsert must not resurrect a deleted key). At equal sequences the batch's event
        wins, as in the rebuild. The MERGE's source reads no target, so the target is scanned
        once, by the MERGE; the source is still detached, since it reads the cached batch, which
        Delta refuses in a MERGE's source that it does not copy itself."""
        keys, columns, rows = list(self.flow.keys), change.columns, change.rows
        newest = Window.partitionBy(*_cols(keys)).orderBy(F.col(SEQ).desc())
        latest = rows.withColumn("__rn", F.row_number().over(newest)).filter("__rn = 1")
        if state is not None:
            touched = _shipped(rows.select(*_cols(keys)), change.summary.keys)
            in_batch = state.join(touched, on=keys, how="left_semi")
            newest_deletes = in_batch.groupBy(*_cols(keys)).agg(F.max(SEQ).alias("__deleted_at"))
            deleted_at = F.col("__deleted_at")
            latest = latest.join(newest_deletes, on=keys, how="left").filter(
                F.col(DELETE) | deleted_at.isNull() | (deleted_at <= F.col(SEQ))
            )
        changes = _detached(_scd1_changes(latest, columns), empty_target)
        guard = F.col(f"t.{quote(SCD1_SEQUENCE)}") <= F.col(f"s.{quote(SCD1_SEQUENCE)}")
        try:
            return self._merge(session, changes, keys, txn, change.summary.ranges, empty_target, guard)
        finally:
            _release(changes)

    # --- SCD2 -------------------------------------------------------------------------------
    def _write_scd2(
        self,
        session: Any,
        filled: DataFrame,
        columns: list[str],
        txn: Txn,
        ranges: dict[str, tuple[Any, Any, bool]],
        empty_target: bool,
    ) -> ApplyResult:
        keys = list(self.flow.keys)
        tracked = tracked_columns(self.flow, columns)
        by_key = Window.partitionBy(*_cols(keys)).orderBy(F.col(SEQ), F.col(ORIGIN))
        tracked_value = F.struct(*[F.col(quote(c)) for c in tracked]) if tracked else F.lit(0)
        marked = (
            filled.withColumn("__tracked", tracked_value)
            .withColumn("__prev_delete", F.lag(DELETE).over(by_key))
            .withColumn("__prev_tracked", F.lag("__tracked").over(by_key))
            .withColumn(
                "__starts",
                ~F.col(DELETE)
                & (
                    F.col("__prev_delete").isNull()
                    | F.col("__prev_delete")
                    | ~F.col("__tracked").eqNullSafe(F.col("__prev_tracked"))
                ),
            )
        )
        following = by_key.rowsBetween(1, Window.unboundedFollowing)
        marked = marked.withColumn(
            "__next_boundary", F.min(F.when(F.col(DELETE) | F.col("__starts"), F.col(SEQ))).over(following)
        ).withColumn(
            "__version", F.sum(F.col("__starts").cast("int")).over(by_key.rowsBetween(Window.unboundedPreceding, 0))
        )
        # What the target holds for these keys travels with the events: an event of ORIGIN 0 that
        # is not a delete stands for one stored version (its start is the event's sequence, its end
        # OLD_END). So what changed is found within each key's partition, with no second pass
        # over the target, and only versions that changed are rewritten.
        stored = (F.col(ORIGIN) == 0) & ~F.col(DELETE)
        in_version = Window.partitionBy(*_cols(keys), "__version").orderBy(F.col(SEQ), F.col(ORIGIN))
        whole_version = in_version.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        latest = Window.partitionBy(*_cols(keys), "__version").orderBy(F.col(SEQ).desc(), F.col(ORIGIN).desc())

        def as_row(end: str) -> Column:
            return F.struct(*[F.col(quote(c)) for c in columns], F.col(end).alias(END_AT))

        upserts = marked.filter(~F.col(DELETE) & (F.col("__version") > 0))
        ranked = (
            upserts.withColumn(START_AT, F.first(SEQ).over(whole_version))
            # The stored version this one began as, when its first event stands for one.
            .withColumn("__stored", F.first(F.when(stored, as_row(OLD_END))).over(whole_version))
            .withColumn("__rn", F.row_number().over(latest))
            # Whether any version still starts where this event's stored version started.
            .withColumn("__kept", F.max(F.col("__starts").cast("int")).over(Window.partitionBy(*_cols(keys), SEQ)) == 1)
        )
        # One pass yields both kinds of change, so the windows above are computed once.
        changed = F.when(
            (F.col("__rn") == 1) & ~as_row("__next_boundary").eqNullSafe(F.col("__stored")),
            F.struct(
                *[F.col(quote(c)) for c in columns],
                F.col(START_AT),
                F.col("__next_boundary").alias(END_AT),
                F.lit("upsert").alias(ACTION),
            ),
        )
        vanished = F.when(
            stored & ~F.col("__kept"),
            F.struct(
                *[F.col(quote(c)) for c in columns],
                F.col(SEQ).alias(START_AT),
                F.col(OLD_END).alias(END_AT),
                F.lit("delete").alias(ACTION),
            ),
        )
        changes = ranked.select(F.explode(F.filter(F.array(changed, vanished), lambda c: c.isNotNull())).alias("c"))
        changes = _detached(changes.select("c.*"), empty_target)
        try:
            return self._merge(session, changes, [*keys, START_AT], txn, ranges, empty_target)
        finally:
            _release(changes)

    # --- writes -----------------------------------------------------------------------------
    def _merge(
        self,
        session: Any,
        changes: DataFrame,
        match: list[str],
        txn: Txn,
        ranges: dict[str, tuple[Any, Any, bool]],
        empty_target: bool,
        guard: Column | None = None,
    ) -> ApplyResult:
        """The changed rows (with their ACTION) into the target, in one MERGE (an append while
        the target holds nothing); a matched row changes only where `guard` holds."""
        schema = self.target_schema
        changes = changes.select(
            *[
                (F.col(quote(f.name)) if f.name in changes.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                for f in schema.fields
            ],
            ACTION,
        )
        if empty_target:
            return self._insert(changes, txn)
        on = _all([F.col(f"t.{quote(c)}").eqNullSafe(F.col(f"s.{quote(c)}")) for c in match]) & _within(ranges, "t")
        assignments = {quote(c): F.col(f"s.{quote(c)}") for c in schema.fieldNames()}
        matched = F.lit(True) if guard is None else guard
        commit_point(f"before merge into {self.flow.target}")
        with self.store.idempotent(session, txn), self.store.merging(session):
            metrics = (
                self.store.merge_table(self.flow.target, session)
                .alias("t")
                .merge(changes.alias("s"), on)
                .whenMatchedDelete((F.col(f"s.{ACTION}") == "delete") & matched)
                .whenMatchedUpdate((F.col(f"s.{ACTION}") == "upsert") & matched, set=assignments)
                .whenNotMatchedInsert(F.col(f"s.{ACTION}") == "upsert", values=assignments)
                .execute()
            )
        commit_point(f"after merge into {self.flow.target}")
        counts = metrics.first() if metrics is not None else None
        if counts is None:
            return ApplyResult()
        values = counts.asDict()
        return ApplyResult(
            upserted=int(values.get("num_inserted_rows") or 0) + int(values.get("num_updated_rows") or 0),
            deleted=int(values.get("num_deleted_rows") or 0),
        )

    def _insert(self, changes: DataFrame, txn: Txn) -> ApplyResult:
        """The upserts of a batch into a target that holds nothing yet (deletes find nothing).
        The rows are counted by the commit itself, not by a job of their own; a batch with none
        commits an empty append, after which the target takes MERGEs."""
        before = self.store.version(self.flow.target)
        upserts = changes.filter(F.col(ACTION) == "upsert").drop(ACTION)
        self.store.append(self.flow.target, upserts, txn, self.properties)
        return ApplyResult(upserted=self.store.rows_written_since(self.flow.target, before))


def _scd1_changes(final: DataFrame, columns: list[str]) -> DataFrame:
    """Each key's final event as the SCD1 row it leaves, with the MERGE's action."""
    return final.select(
        *_cols(columns),
        F.col(SEQ).alias(SCD1_SEQUENCE),
        F.when(F.col(DELETE), F.lit("delete")).otherwise(F.lit("upsert")).alias(ACTION),
    )


def _shipped(keys: DataFrame, count: int) -> DataFrame:
    """A batch's keys, broadcast while they are few (`BROADCAST_KEYS`): shipped to every task,
    they filter a big table as it is read instead of shuffling it to meet them."""
    return F.broadcast(keys) if count <= BROADCAST_KEYS else keys


def _all(conditions: list[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result & condition
    return result


def _within(ranges: dict[str, tuple[Any, Any, bool]], alias: str) -> Column:
    """Each ranged key between the batch's lowest and highest value (or NULL, when the batch has
    a NULL key): literals Delta prunes the target's files by, from their statistics. Files are
    pruned, never rows: a target row outside the range matches no batch row anyway."""
    condition = F.lit(True)
    for key, (low, high, has_null) in ranges.items():
        column = F.col(f"{alias}.{quote(key)}")
        within = column.between(F.lit(low), F.lit(high))
        condition = condition & ((within | column.isNull()) if has_null else within)
    return condition


def _detached(changes: DataFrame, empty_target: bool) -> DataFrame:
    """A MERGE's source, computed once before the MERGE and kept without its lineage
    (`localCheckpoint`). The rebuild reads the target itself; a cached plan reading the target is
    recached by Delta when the MERGE commits to that same table, which Delta refuses mid-MERGE,
    and without a copy Delta would compute the rebuild twice. A first batch into an empty target
    is appended instead (`_insert`): its rebuild reads no target and an append computes its rows
    once, so it is written as it is, without the copy's job."""
    return changes if empty_target else changes.localCheckpoint(eager=True)


def _release(detached: DataFrame) -> None:
    """Free a `localCheckpoint`'s blocks now. `unpersist` does not reach them (they are not in
    the cache manager), and Spark's cleaner frees them only once the JVM collects the plan, so
    a long-running driver would fill its storage memory with finished MERGE sources."""
    plan = detached._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)


def _cols(names: list[str]) -> list[Column]:
    """Columns by name, quoted: a source column may be called `a.b` or `x``y`, which a bare
    string would read as a nested field or a syntax error."""
    return [F.col(quote(name)) for name in names]
