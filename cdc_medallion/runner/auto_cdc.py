"""`create_auto_cdc_flow` semantics on Delta tables: SCD type 1 and 2, out-of-order safe.

For the keys a batch touches, the target's existing rows are turned back into events, merged
with the new events, and the key's state is rebuilt in sequence order; the result replaces
the key's rows in one MERGE. A late event therefore lands at its place in the history, and a
late update never resurrects a deleted row: deletes leave a tombstone in the flow's state
table, truncates a table-wide marker (DLT keeps tombstones the same way).

Rules (as in DLT): a new SCD2 version starts when a tracked column changes or the key comes
back after a delete; changes to untracked columns update the current version in place; a
delete closes the open version at the delete's sequence. Columns absent from a partial image
keep their previous value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.errors import GraphError
from cdc_medallion.identifiers import quote
from cdc_medallion.runner import auto_cdc_driver as driver
from cdc_medallion.runner.event_columns import (
    ACTION,
    ARRIVAL,
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
from cdc_medallion.runner.merge_bounds import bounded, within_source_keys
from cdc_medallion.runner.small_batch import collect_small
from cdc_medallion.storage.delta_rs import STATE_DIR, DeltaRsStore, arrow_schema

BROADCAST_KEYS = 2_000_000  # batches are bounded by rows and bytes, so their keys are far fewer
# The driver finds a batch's stored rows by scanning the target's files within the batch's key
# range, in one Python thread. Random keys span the whole table, so past a few times the limit
# Spark's scan, on every core, is the cheaper one: 100k changes into 10M rows took 51.2 s and a
# 5.15 GiB driver in the driver (gold 35.6 s) against 42.4 s and 3.90 GiB in Spark; into 1M
# rows, 5 times the default limit, the driver was as fast (23.2 s against 23.8 s).
DRIVER_SCAN_FACTOR = 10


def driver_may_apply(store: DeltaRsStore, target: str, new_rows: int | None, limit: int) -> bool:
    """`driver_may_take` for a stored target, counted from the Delta log's statistics."""
    return driver_may_take(new_rows, limit, target_rows=lambda: store.count(target))


def driver_may_take(new_rows: int | None, limit: int, target_rows: Callable[[], int]) -> bool:
    """Whether a batch of `new_rows` into a target of `target_rows()` rows is tried in the
    driver, decided before its view batch is collected or split.

    Past `DRIVER_SCAN_FACTOR` times the limit, `_stored_rows` mostly leaves a batch to Spark
    (random keys span every file), and learning that late costs twice: the events were
    collected for nothing, and the view was split in the driver, so Spark rebuilds from a local
    relation instead of a cached scan. At 1M rows, forcing that route cost gold 26.9 s against
    19.5 s for Spark from the start. A batch of at most limit / DRIVER_SCAN_FACTOR rows is
    still tried whatever the target's size: it is cheap to collect, and keys that cluster (new
    ids appended) prune the scan to a few files. The target is counted only when that decides.
    """
    if limit <= 0:
        return False
    if new_rows is not None and new_rows <= limit // DRIVER_SCAN_FACTOR:
        return True
    return target_rows() <= DRIVER_SCAN_FACTOR * limit


@dataclass
class ApplyResult:
    upserted: int = 0
    deleted: int = 0
    truncates: int = 0
    in_driver: bool = False  # rebuilt by auto_cdc_driver.py rather than by Spark


def _expr(value: str | Column | None, default: bool = False) -> Column:
    if value is None:
        return F.lit(default)
    return F.expr(value) if isinstance(value, str) else value


def data_columns(flow: AutoCdcFlow, source_columns: list[str]) -> list[str]:
    if flow.column_list is not None:
        missing = [c for c in flow.column_list if c not in source_columns]
        if missing:
            raise GraphError(f"auto CDC flow {flow.name}: column_list names unknown columns {missing}")
        columns = list(flow.column_list)
    else:
        excluded = set(flow.except_column_list or ())
        columns = [c for c in source_columns if c not in excluded]
    for key in flow.keys:
        if key not in columns:
            raise GraphError(f"auto CDC flow {flow.name}: key {key!r} is not among the columns {columns}")
    return columns


def tracked_columns(flow: AutoCdcFlow, columns: list[str]) -> list[str]:
    values = [c for c in columns if c not in flow.keys]
    if flow.track_history_column_list is not None:
        return [c for c in values if c in flow.track_history_column_list]
    if flow.track_history_except_column_list is not None:
        return [c for c in values if c not in flow.track_history_except_column_list]
    return values


class AutoCdcApplier:
    """Applies one batch of one auto CDC flow."""

    def __init__(
        self,
        store: DeltaRsStore,
        flow: AutoCdcFlow,
        properties: dict[str, str],
        driver_rows: int = 0,
        input_over_driver_rows: bool = False,
        collected_events: list[tuple[DataFrame, pa.Table | None]] | None = None,
    ) -> None:
        self.store = store
        self.spark = store.spark
        self.flow = flow
        self.properties = properties
        self.state_name = f"{STATE_DIR}/{flow.target}"
        self.driver_rows = driver_rows  # batches up to this many rows are rebuilt in the driver
        self.input_over_driver_rows = input_over_driver_rows  # its new input: its events likely too
        # Events other flows collected from the same view batch (gold's SCD1 and SCD2 flows
        # make the same events of it), and where this flow leaves its own for them.
        self.collected_events = collected_events

    # --- public -----------------------------------------------------------------------------
    def apply(self, batch: DataFrame, txns: dict[str, int], known_empty: bool = False) -> ApplyResult:
        """`known_empty`: the caller has counted `batch` empty already, so only progress is recorded."""
        flow = self.flow
        columns = data_columns(flow, batch.columns)
        if known_empty:  # no job, and no plan either once the tables exist (15 ms a flow)
            if not (self.store.exists(flow.target) and self.store.exists(self.state_name)):
                self._ensure_target(self._events(batch, columns), columns)
            return self._nothing_to_apply(txns)
        events = self._events(batch, columns)
        events.persist()
        try:
            self._ensure_target(events, columns)
            applied = self._apply_in_driver(events, columns, txns) if self.driver_rows else None
            return applied if applied is not None else self._apply_with_spark(events, columns, txns)
        finally:
            events.unpersist()

    def _apply_with_spark(self, events: DataFrame, columns: list[str], txns: dict[str, int]) -> ApplyResult:
        flow = self.flow
        # One job answers what used to take three: is there anything, which truncates, how many keys.
        is_row = ~F.col(TRUNCATE)
        summary = events.agg(
            F.count(F.lit(1)).alias("events"),
            F.collect_set(F.when(F.col(TRUNCATE), F.col(SEQ))).alias("truncates"),
            # Only chooses a join strategy: an estimate spares the two shuffles of an exact count.
            F.approx_count_distinct(F.when(is_row, F.struct(*[F.col(quote(k)) for k in flow.keys]))).alias("keys"),
        ).first()
        if summary is None or summary["events"] == 0:
            return self._nothing_to_apply(txns)
        new_truncates = list(summary["truncates"])
        rows = events.filter(is_row).drop(TRUNCATE)
        result = self._apply(rows, columns, new_truncates, txns, summary["keys"])
        result.truncates = len(new_truncates)
        return result

    def _nothing_to_apply(self, txns: dict[str, int]) -> ApplyResult:
        """Silver moved on, but not for this table: progress is recorded all the same."""
        for name in (self.state_name, self.flow.target):
            if not self._already_committed(name, txns):
                self.store.commit_progress(name, txns)
        return ApplyResult()

    # --- the rebuild in the driver (auto_cdc_driver.py) ---------------------------------------
    def _apply_in_driver(self, events: DataFrame, columns: list[str], txns: dict[str, int]) -> ApplyResult | None:
        """The batch rebuilt with Arrow in the driver when it and the rows its keys hold are few;
        None leaves it to Spark.

        The events are the Spark rebuild's, made the way `_existing_events` and `_apply` make
        them: the new ones, what the target and state hold for the touched keys (every key of
        the table after a new truncate), and each truncate for every touched key.
        """
        keys = list(self.flow.keys)
        schema = arrow_schema(events.schema)
        key_types = [schema.field(k).type for k in keys]
        if not driver.orderable(schema.field(SEQ).type) or not all(driver.groupable(t) for t in key_types):
            return None
        collected = self._collect(events)
        if collected is None:
            return None
        collected = collected.cast(schema)
        if collected.num_rows == 0:
            return self._nothing_to_apply(txns)
        is_truncate = pc.fill_null(collected.column(TRUNCATE), False)
        new_truncates = pc.unique(collected.column(SEQ).filter(is_truncate))
        rows = collected.filter(pc.invert(is_truncate))
        if any(rows.column(k).null_count for k in keys):
            return None  # Spark groups NULL keys but never joins them: left to its exact rules
        batch_keys = rows.select(keys).group_by(keys).aggregate([])
        everything = len(new_truncates) > 0  # a new truncate touches every key of the table
        since = None
        if self.flow.stored_as_scd_type == 2 and not everything:
            earliest = rows.group_by(keys).aggregate([(SEQ, "min")])
            since = pa.table({**{k: earliest.column(k) for k in keys}, driver.SINCE: earliest.column(f"{SEQ}_min")})
        stored = self._stored_rows(batch_keys, everything=everything, since=since)
        if stored is None or stored.num_rows + rows.num_rows > self.driver_rows:
            return None
        affected = batch_keys
        if everything:
            stored_keys = stored.select(keys).cast(batch_keys.schema)
            affected = pa.concat_tables([batch_keys, stored_keys]).group_by(keys).aggregate([])
        ordered = self._history_in_driver(rows, stored, affected, new_truncates, columns, schema)
        truncated = new_truncates.to_pylist()
        if self.flow.stored_as_scd_type == 1:
            final = driver.last_per_key(ordered, keys).select([*columns, SEQ, DELETE])
            result = self._commit_scd1(ds.dataset(final), columns, txns, truncated)
        else:
            changes = driver.scd2_versions(ordered, keys, columns, tracked_columns(self.flow, columns))
            result = self._commit_scd2(ds.dataset(changes), txns, truncated)
        result.truncates = len(truncated)
        result.in_driver = True
        return result

    def _collect(self, events: DataFrame) -> pa.Table | None:
        """The events in the driver (None: too many), collected once for every flow that makes
        the same events of the same view batch: gold's SCD2 flow reuses what its SCD1 flow
        collected, which at 1M changes took 10-15 s a flow."""
        shared = self.collected_events
        for earlier, collected in shared or ():
            if earlier.sameSemantics(events):
                return collected
        collected = collect_small(events, self.driver_rows, many=self.input_over_driver_rows)
        if shared is not None:
            shared.append((events, collected))
        return collected

    def _history_in_driver(
        self,
        rows: pa.Table,
        stored: pa.Table,
        affected: pa.Table,
        new_truncates: pa.Array,
        columns: list[str],
        schema: pa.Schema,
    ) -> pa.Table:
        """Every touched key's events in history order, absent columns filled: the new `rows`,
        the `stored` rows as events, the deletes the state or the stored versions stand for, and
        each truncate for every `affected` key."""
        keys = list(self.flow.keys)
        scd1 = self.flow.stored_as_scd_type == 1
        seq = schema.field(SEQ)
        ends = [] if scd1 else [seq.with_name(OLD_END)]
        wanted = pa.schema(
            [*(schema.field(c) for c in columns), seq, schema.field(DELETE), schema.field(PRESENT), *ends]
        )
        state = self._state_table(keys, schema)
        stored_truncates = state.filter(pc.equal(state.column("kind"), "truncate")).column(SEQ)
        truncates = pc.unique(pa.chunked_array([*stored_truncates.chunks, new_truncates], seq.type))
        new_events = (rows.select([*columns, SEQ, PRESENT]), 1, pc.fill_null(rows.column(DELETE), False))
        if scd1:
            tombstones = state.filter(pc.equal(state.column("kind"), "tombstone"))
            parts = [
                new_events,
                (stored.select(columns).append_column(SEQ, stored.column(SCD1_SEQUENCE)), 0, False),
                (driver.with_keys_among(tombstones, keys, affected).select([*keys, SEQ]), 0, True),
            ]
        else:
            versions = stored.select(columns).append_column(SEQ, stored.column(START_AT))
            parts = [
                new_events,
                (versions.append_column(OLD_END, stored.column(END_AT)), 0, False),
                (driver.ended_by_delete(stored, keys), 0, True),
            ]
        for truncate in truncates:
            parts.append((affected.append_column(SEQ, pa.repeat(truncate, affected.num_rows)), -1, True))
        # Arrival order breaks ties in (sequence, origin), as the Spark rebuild's stable sort would.
        events = pa.concat_tables([_as_events(part, origin, delete, wanted) for part, origin, delete in parts])
        events = events.append_column(ARRIVAL, pa.array(range(events.num_rows), pa.int64()))
        return driver.fill_absent(driver.in_history_order(events, keys), keys, columns)

    def _stored_rows(self, batch_keys: pa.Table, *, everything: bool, since: pa.Table | None = None) -> pa.Table | None:
        """The target's rows of the batch's keys (all of them after a truncate), read by delta-rs
        in the target's Spark schema; None when there are too many, when finding them means
        scanning more than `DRIVER_SCAN_FACTOR` times the driver's limit, or a stored key is NULL.
        With `since` (SCD2), only the versions a key's new events can change (`open_since`)."""
        keys = list(self.flow.keys)
        table = self.store.table(self.flow.target)
        if everything and table.count() > self.driver_rows:
            return None
        target = arrow_schema(self.store.spark_schema(self.flow.target))
        # Read in Spark's types and filtered here: delta-rs reads strings as string_view, which
        # a filter pushed into the scan cannot compare with its statistics (pyarrow 22). Files
        # outside the batch's key range are skipped by delta-rs itself, from the log's statistics,
        # so a small batch into a big target does not read the whole target.
        pruning = None if everything else within_source_keys(ds.dataset(batch_keys), keys, alias=None)
        data = table.to_pyarrow_dataset(schema=target, file_pruning_predicate=pruning)
        if not everything and data.count_rows() > DRIVER_SCAN_FACTOR * self.driver_rows:  # files' footers
            return None  # (a truncate's whole table was counted above)
        wanted = None if everything else driver.key_filter(batch_keys, keys)
        parts, kept = [target.empty_table()], 0
        for batch in data.to_batches():
            part = pa.Table.from_batches([batch], schema=target)
            part = part if wanted is None else part.filter(wanted)
            parts.append(part if since is None else driver.open_since(part, keys, since))
            kept += parts[-1].num_rows
            if kept > self.driver_rows:
                return None
        found = pa.concat_tables(parts)
        if any(found.column(k).null_count for k in keys):
            return None
        if everything or len(keys) == 1 or since is not None:  # the filters were exact
            return found
        return driver.with_keys_among(found, keys, batch_keys)

    def _state_table(self, keys: list[str], schema: pa.Schema) -> pa.Table:
        """The state table: keys and sequence in the batch's types, and each row's kind."""
        stored = arrow_schema(self.store.spark_schema(self.state_name))
        state = self.store.table(self.state_name).to_pyarrow_dataset(schema=stored).to_table()
        return state.cast(pa.schema([*(schema.field(k) for k in keys), schema.field(SEQ), stored.field("kind")]))

    # --- event preparation -------------------------------------------------------------------
    def _events(self, batch: DataFrame, columns: list[str]) -> DataFrame:
        flow = self.flow
        if flow.present_columns_column:
            present = F.col(flow.present_columns_column)
        elif flow.ignore_null_updates:
            present = F.filter(
                F.array(*[F.when(F.col(c).isNotNull(), F.lit(c)) for c in columns]), lambda x: x.isNotNull()
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

    def _target_schema(self, events: DataFrame, columns: list[str]) -> StructType:
        fields = [events.schema[c] for c in columns]
        seq_type = events.schema[SEQ].dataType
        if self.flow.stored_as_scd_type == 1:
            extra = [StructField(SCD1_SEQUENCE, seq_type)]
        else:
            extra = [StructField(START_AT, seq_type), StructField(END_AT, seq_type)]
        return StructType([StructField(f.name, f.dataType, True) for f in fields] + extra)

    def _ensure_target(self, events: DataFrame, columns: list[str]) -> None:
        schema = self._target_schema(events, columns)
        self.store.ensure_table(self.flow.target, schema, self.properties)
        existing = self.store.spark_schema(self.flow.target)
        missing = [f for f in schema.fields if f.name not in existing.fieldNames()]
        if missing:  # schema evolution: a column appeared (e.g. added by DDL)
            from deltalake.schema import Field

            new_fields = [Field.from_arrow(f) for f in arrow_schema(StructType(missing))]
            self.store.table(self.flow.target).alter.add_columns(new_fields)
        key_schema = StructType([schema[k] for k in self.flow.keys])
        state_schema = StructType(
            [*key_schema.fields, StructField(SEQ, schema.fields[-1].dataType), StructField("kind", StringType())]
        )
        self.store.ensure_table(self.state_name, state_schema, {"layer": "state"})

    # --- rebuild -----------------------------------------------------------------------------
    def _apply(
        self, events: DataFrame, columns: list[str], new_truncates: list[str], txns: dict[str, int], keys_in_batch: int
    ) -> ApplyResult:
        flow = self.flow
        keys = list(flow.keys)
        target = self.store.read(flow.target)
        for column in columns:  # a column the batch lacks: treat as absent, keep previous values
            if column not in target.columns:
                target = target.withColumn(column, F.lit(None).cast(events.schema[column].dataType))
        state = self.store.read(self.state_name)
        all_truncates = sorted(set(new_truncates) | set(self._stored_truncates()))
        to_release: list[DataFrame] = []
        if all_truncates:  # each touched key gets the truncate events: its keys must be distinct
            # A new truncate touches every key of the table.
            affected = target.select(*keys).union(events.select(*keys)) if new_truncates else events.select(*keys)
            affected = affected.distinct().persist()
            to_release.append(affected)
            if new_truncates:
                keys_in_batch = affected.count()
        else:  # a semi join needs no distinct keys: `events` is cached, so reading them again is cheap
            affected = events.select(*keys)
        try:
            # The keys a batch touches are few next to the table's: shipping them to every task
            # filters the target as it is read, instead of shuffling the whole target to meet
            # them, so a batch costs what it touches rather than what the table holds.
            if keys_in_batch <= BROADCAST_KEYS:
                affected = F.broadcast(affected)
            touched = target.join(affected, on=keys, how="left_semi")
            if flow.stored_as_scd_type == 2:  # read by SCD2 three times below: the target is scanned once
                touched = touched.persist()
                to_release.append(touched)
            history = self._existing_events(touched, state, affected, columns)
            everything = events.withColumn(ORIGIN, F.lit(1))
            if flow.stored_as_scd_type == 2:
                everything = everything.withColumn(OLD_END, F.lit(None).cast(events.schema[SEQ].dataType))
            everything = everything.unionByName(history)
            if all_truncates:
                truncate_events = affected.crossJoin(
                    self.spark.createDataFrame(
                        [(t,) for t in all_truncates], StructType([StructField(SEQ, StringType())])
                    )
                )
                everything = everything.unionByName(
                    truncate_events.select(
                        *keys,
                        *[F.lit(None).cast(events.schema[c].dataType).alias(c) for c in columns if c not in keys],
                        F.col(SEQ).cast(events.schema[SEQ].dataType).alias(SEQ),
                        F.lit(True).alias(DELETE),
                        F.lit(None).cast(ArrayType(StringType())).alias(PRESENT),
                        F.lit(-1).alias(ORIGIN),
                    ),
                    allowMissingColumns=flow.stored_as_scd_type == 2,  # its OLD_END is NULL
                )
            filled = self._fill(everything, columns)
            if flow.stored_as_scd_type == 1:
                result = self._write_scd1(filled, columns, txns, new_truncates)
            else:
                result = self._write_scd2(filled, columns, txns, new_truncates)
        finally:
            for df in to_release:
                df.unpersist()
        return result

    def _stored_truncates(self) -> list[Any]:
        """The truncate markers in the state table, read by delta-rs: a Spark job cost more
        than the read, and every flow asks on every batch (bench: 0.18 s a flow and batch)."""
        # No filter pushed down: delta-rs reads the strings as string_view, which the pruning
        # by column statistics cannot compare (pyarrow 22).
        state = self.store.table(self.state_name).to_pyarrow_table(columns=["kind", SEQ])
        truncate = pc.equal(state.column("kind").cast(pa.string()), "truncate")
        values = state.column(SEQ).filter(truncate).to_pylist()
        if pa.types.is_timestamp(state.schema.field(SEQ).type):  # as Spark's collect: naive, local
            values = [dt.datetime.fromtimestamp(v.timestamp()) for v in values]
        return values

    def _existing_events(self, rows: DataFrame, state: DataFrame, affected: DataFrame, columns: list[str]) -> DataFrame:
        """The target's rows of the touched keys (`rows`) turned back into events."""
        keys = list(self.flow.keys)
        schema = rows.schema
        null_present = F.lit(None).cast(ArrayType(StringType()))
        if self.flow.stored_as_scd_type == 1:
            upserts = rows.select(
                *columns, F.col(SCD1_SEQUENCE).alias(SEQ), F.lit(False).alias(DELETE), null_present.alias(PRESENT)
            )
            tombstones = state.filter(F.col("kind") == "tombstone").join(affected, on=keys, how="left_semi")
            deletes = tombstones.select(
                *keys,
                *[F.lit(None).cast(schema[c].dataType).alias(c) for c in columns if c not in keys],
                F.col(SEQ),
                F.lit(True).alias(DELETE),
                null_present.alias(PRESENT),
            )
            return upserts.unionByName(deletes).withColumn(ORIGIN, F.lit(0))
        upserts = rows.select(
            *columns,
            F.col(START_AT).alias(SEQ),
            F.lit(False).alias(DELETE),
            null_present.alias(PRESENT),
            F.col(END_AT).alias(OLD_END),
        )
        starts = rows.select(*keys, F.col(START_AT).alias("__s"))
        closed = rows.filter(F.col(END_AT).isNotNull()).alias("v")
        # A version whose end is not another version's start was ended by a delete.
        join = [F.col(f"v.{quote(k)}").eqNullSafe(F.col(f"n.{quote(k)}")) for k in keys] + [
            F.col(f"v.{END_AT}") == F.col("n.__s")
        ]
        ended_by_delete = closed.join(starts.alias("n"), on=join, how="left_anti")
        deletes = ended_by_delete.select(
            *[F.col(f"v.{quote(k)}").alias(k) for k in keys],
            *[F.lit(None).cast(schema[c].dataType).alias(c) for c in columns if c not in keys],
            F.col(f"v.{END_AT}").alias(SEQ),
            F.lit(True).alias(DELETE),
            null_present.alias(PRESENT),
            F.lit(None).cast(schema[END_AT].dataType).alias(OLD_END),
        )
        return upserts.unionByName(deletes).withColumn(ORIGIN, F.lit(0))

    def _fill(self, events: DataFrame, columns: list[str]) -> DataFrame:
        """Carry absent columns forward within a key's life (since its last delete)."""
        keys = list(self.flow.keys)
        order = [F.col(SEQ), F.col(ORIGIN)]
        by_key = Window.partitionBy(*keys).orderBy(*order)
        running = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        events = events.withColumn("__life", F.sum(F.col(DELETE).cast("int")).over(running) - F.col(DELETE).cast("int"))
        in_life = (
            Window.partitionBy(*keys, "__life")
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
        self, filled: DataFrame, columns: list[str], txns: dict[str, int], new_truncates: list[str]
    ) -> ApplyResult:
        keys = list(self.flow.keys)
        last = Window.partitionBy(*keys).orderBy(F.col(SEQ).desc(), F.col(ORIGIN).desc())
        final = filled.withColumn("__rn", F.row_number().over(last)).filter("__rn = 1")
        # The final row per touched key is all both writes need: spilled once, the state's
        # tombstones and the target's changes are cut from it as delta-rs streams it.
        latest = self.store.spill(final.select(*[F.col(quote(c)) for c in columns], SEQ, DELETE))
        return self._commit_scd1(latest, columns, txns, new_truncates)

    def _commit_scd1(
        self, latest: ds.Dataset, columns: list[str], txns: dict[str, int], new_truncates: list[Any]
    ) -> ApplyResult:
        """Each touched key's final row (columns, SEQ, DELETE) into the state, then the target."""
        keys = list(self.flow.keys)
        self._write_state((latest, _scd1_state_rows(keys)), new_truncates, txns)
        return self._merge(latest, keys, txns, _scd1_changes(columns))

    # --- SCD2 -------------------------------------------------------------------------------
    def _write_scd2(
        self, filled: DataFrame, columns: list[str], txns: dict[str, int], new_truncates: list[str]
    ) -> ApplyResult:
        keys = list(self.flow.keys)
        tracked = tracked_columns(self.flow, columns)
        by_key = Window.partitionBy(*keys).orderBy(F.col(SEQ), F.col(ORIGIN))
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
        # over the target. Rewriting every version of every touched key instead made a batch's
        # cost, and the rows fetched to the driver, grow with each key's history: the 10M bench
        # ran the heap out of memory in SCD2.
        stored = F.col(ORIGIN) == 0
        in_version = Window.partitionBy(*keys, "__version").orderBy(F.col(SEQ), F.col(ORIGIN))
        whole_version = in_version.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        latest = Window.partitionBy(*keys, "__version").orderBy(F.col(SEQ).desc(), F.col(ORIGIN).desc())

        def as_row(end: str) -> Column:
            return F.struct(*[F.col(quote(c)) for c in columns], F.col(end).alias(END_AT))

        upserts = marked.filter(~F.col(DELETE) & (F.col("__version") > 0))
        ranked = (
            upserts.withColumn(START_AT, F.first(SEQ).over(whole_version))
            # The stored version this one began as, when its first event stands for one.
            .withColumn("__stored", F.first(F.when(stored, as_row(OLD_END))).over(whole_version))
            .withColumn("__rn", F.row_number().over(latest))
            # Whether any version still starts where this event's stored version started.
            .withColumn("__kept", F.max(F.col("__starts").cast("int")).over(Window.partitionBy(*keys, SEQ)) == 1)
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
        return self._commit_scd2(self.store.spill(changes.select("c.*")), txns, new_truncates)

    def _commit_scd2(self, changes: ds.Dataset, txns: dict[str, int], new_truncates: list[Any]) -> ApplyResult:
        """The changed versions (columns, start, end, action); the state keeps only truncates."""
        if new_truncates:
            self._write_state(None, new_truncates, txns)
        return self._merge(changes, [*self.flow.keys, START_AT], txns)

    # --- writes -----------------------------------------------------------------------------
    def _write_state(
        self,
        rows: tuple[ds.Dataset, Callable[[pa.Table], pa.Table]] | None,
        new_truncates: list[str],
        txns: dict[str, int],
    ) -> None:
        """Tombstones and truncate markers; committed before the target, idempotently.

        `rows` are SCD1's final rows with how a batch of them becomes state rows; SCD2 keeps
        only truncate markers in its state and passes None.
        """
        dataset, as_state = rows if rows is not None else (None, None)
        if self._already_committed(self.state_name, txns):
            return
        keys = list(self.flow.keys)
        schema = arrow_schema(self.store.spark_schema(self.state_name))
        truncates = pa.table(
            {
                **{k: pa.nulls(len(new_truncates), schema.field(k).type) for k in keys},
                SEQ: pa.array(new_truncates).cast(schema.field(SEQ).type),
                "kind": pa.array(["truncate"] * len(new_truncates), pa.string()),
            },
            schema=schema,
        )
        if truncates.num_rows + (dataset.count_rows() if dataset is not None else 0) == 0:
            self.store.commit_progress(self.state_name, txns)
            return
        data = _stream(schema, truncates.to_batches(), dataset, as_state)
        on = " AND ".join(f"(t.{quote(k)} <=> s.{quote(k)})" for k in keys)
        predicate = bounded(f"({on}) AND t.`kind` <> 'truncate' AND s.`kind` <> 'truncate'", dataset, keys)
        self.store.merge(
            self.state_name,
            data,
            _datafusion(predicate),
            txns,
            assignments={quote(f.name): f"s.{quote(f.name)}" for f in schema},
            delete_when="s.`kind` = 'clear'",
            update_when="s.`kind` = 'tombstone'",
            insert_when="s.`kind` <> 'clear'",
        )

    def _already_committed(self, name: str, txns: dict[str, int]) -> bool:
        return bool(txns) and all((self.store.txn_version(name, k) or -1) >= v for k, v in txns.items())

    def _merge(
        self,
        changes: ds.Dataset,
        match: list[str],
        txns: dict[str, int],
        as_changes: Callable[[pa.Table], pa.Table] | None = None,
    ) -> ApplyResult:
        if self._already_committed(self.flow.target, txns):
            return ApplyResult()
        schema = self.store.spark_schema(self.flow.target)
        if changes.count_rows() == 0:
            self.store.commit_progress(self.flow.target, txns)
            return ApplyResult()
        on = " AND ".join(f"(t.{quote(c)} <=> s.{quote(c)})" for c in match)
        predicate = bounded(on, changes, list(self.flow.keys))
        data = _stream(arrow_schema(schema).append(pa.field(ACTION, pa.string())), [], changes, as_changes)
        metrics = self.store.merge(
            self.flow.target,
            data,
            _datafusion(predicate),
            txns,
            assignments={quote(c): f"s.{quote(c)}" for c in schema.fieldNames()},
            delete_when=f"s.{ACTION} = 'delete'",
            update_when=f"s.{ACTION} = 'upsert'",
            insert_when=f"s.{ACTION} = 'upsert'",
        )
        return ApplyResult(
            upserted=int(metrics.get("num_target_rows_inserted", 0)) + int(metrics.get("num_target_rows_updated", 0)),
            deleted=int(metrics.get("num_target_rows_deleted", 0)),
        )


def _as_events(part: pa.Table, origin: int, delete: bool | pa.ChunkedArray, schema: pa.Schema) -> pa.Table:
    """Rows as `_apply_in_driver` events: `schema`'s columns (absent ones NULL), then origin.
    `delete` is each row's flag, or one flag for every row."""
    flags = delete if isinstance(delete, pa.ChunkedArray) else pa.repeat(delete, part.num_rows)
    events = _conform(part.append_column(DELETE, flags), schema)
    return events.append_column(ORIGIN, pa.repeat(pa.scalar(origin, pa.int8()), part.num_rows))


def _scd1_state_rows(keys: list[str]) -> Callable[[pa.Table], pa.Table]:
    """SCD1's final rows as state rows: a delete leaves a tombstone, anything else clears it."""

    def state_rows(rows: pa.Table) -> pa.Table:
        deleted = rows.column(DELETE).fill_null(False)
        kind = pc.if_else(deleted, "tombstone", "clear")
        return pa.table({**{k: rows.column(k) for k in keys}, SEQ: rows.column(SEQ), "kind": kind})

    return state_rows


def _scd1_changes(columns: list[str]) -> Callable[[pa.Table], pa.Table]:
    """SCD1's final rows as the target's changes."""

    def changes(rows: pa.Table) -> pa.Table:
        deleted = rows.column(DELETE).fill_null(False)
        return pa.table(
            {
                **{c: rows.column(c) for c in columns},
                SCD1_SEQUENCE: rows.column(SEQ),
                ACTION: pc.if_else(deleted, "delete", "upsert"),
            }
        )

    return changes


def _stream(
    schema: pa.Schema,
    first: list[pa.RecordBatch],
    rows: ds.Dataset | None,
    convert: Callable[[pa.Table], pa.Table] | None,
) -> pa.RecordBatchReader:
    """`first`, then `rows` batch by batch through `convert`, all in `schema`: what delta-rs reads."""

    def batches() -> Iterator[pa.RecordBatch]:
        yield from first
        for batch in rows.to_batches() if rows is not None else ():
            table = pa.Table.from_batches([batch])
            yield from _conform(convert(table) if convert is not None else table, schema).to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """`data` with exactly `schema`'s columns, in its order and types (absent ones NULL)."""
    columns = [
        data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _datafusion(predicate: str) -> str:
    """DataFusion spells null-safe equality `IS NOT DISTINCT FROM`."""
    return predicate.replace(" <=> ", " IS NOT DISTINCT FROM ")
