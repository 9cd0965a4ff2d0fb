"""Applies an auto CDC flow's micro-batches to its target: the rebuild of the keys a batch touches.

For those keys, the target's stored rows are turned back into events, merged with the batch's
events and the kept tombstones, and each key's state is rebuilt in sequence order (`_fill`
carries absent columns forward within a key's life); `scd1` or `scd2` then makes the rows its
type stores, and `target` writes them. A late event therefore lands at its place in the history,
and a late update never resurrects a deleted row.

Every write names the batch (`Txn`), so a batch replayed after a crash skips what it already
committed: the state first, then the target, so a replay after the state's commit sees the
batch's own tombstones, which give the same result.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.identifiers import quote
from cdc_medallion.names import END_AT, SCD1_SEQUENCE, START_AT
from cdc_medallion.runner.auto_cdc import scd1, scd2
from cdc_medallion.runner.auto_cdc.feed import ChangeBatch
from cdc_medallion.runner.auto_cdc.target import ApplyResult, Rebuilt, Target, cols, shipped
from cdc_medallion.runner.event_columns import DELETE, OLD_END, ORIGIN, PRESENT, SEQ
from cdc_medallion.storage.delta_store import DeltaStore, Txn


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

    def apply(self, change: ChangeBatch, txn: Txn, session: SparkSession | None = None) -> ApplyResult:
        """Apply one prepared batch whose tombstones `change.state` holds already; the writes go
        through `session` (default: the batch's)."""
        session = session or change.rows.sparkSession
        wanted = self._target_schema(change.events, change.columns)
        name = self.flow.target
        if self.store.exists(name):
            schema = self.store.evolve(name, wanted)  # a column added by DDL, or a type widened
            target = self.store.read(name)
            # A target that holds nothing yet (made empty, by an earlier engine or by a first batch
            # of deletes only) takes the batch's rows by an append: no stored row can match, and
            # an append costs a fraction of a MERGE.
            empty_target = self.store.version(name) == 0 and self.store.rows_written_since(name, None) == 0
        else:
            # The batch's rows make the target, in the commit that writes them (`DeltaStore.append`).
            schema = wanted
            target = session.createDataFrame([], wanted)
            empty_target = True
        writes = Target(self.store, self.flow, schema, self.properties)
        result = self._apply(session, change, txn, target, writes, empty_target)
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
    def _apply(
        self, session: Any, change: ChangeBatch, txn: Txn, target: DataFrame, writes: Target, empty_target: bool
    ) -> ApplyResult:
        flow, rows, columns, summary = self.flow, change.rows, change.columns, change.summary
        keys = list(flow.keys)
        for column in columns:  # a column the batch lacks: treat as absent, keep previous values
            if column not in target.columns:
                target = target.withColumn(column, F.lit(None).cast(rows.schema[column].dataType))
        state = change.state.tombstones()
        new_truncates = summary.truncates > 0
        has_truncates = new_truncates or change.state.has_truncates()
        if flow.stored_as_scd_type == 1 and not has_truncates and summary.partial == 0:
            return scd1.write_latest(writes, session, change, state, txn, empty_target)
        to_release: list[DataFrame] = []
        if new_truncates:  # a new truncate touches every key of the table
            affected = target.select(*cols(keys)).union(rows.select(*cols(keys))).distinct().persist()
            to_release.append(affected)
            keys_in_batch = affected.count()
        else:  # a semi join needs no distinct keys: `rows` is cached, so reading them again is cheap
            affected = rows.select(*cols(keys)).distinct() if has_truncates else rows.select(*cols(keys))
            keys_in_batch = summary.keys
        seq_type = rows.schema[SEQ].dataType
        truncates = change.new_truncates
        if change.state.has_truncates():
            truncates = change.state.truncates(seq_type).unionByName(truncates).distinct()
        try:
            # A batch costs what it touches rather than what the table holds.
            affected = shipped(affected, keys_in_batch)
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
                        *cols(keys),
                        *[F.lit(None).cast(rows.schema[c].dataType).alias(c) for c in columns if c not in keys],
                        F.col(SEQ).cast(rows.schema[SEQ].dataType).alias(SEQ),
                        F.lit(True).alias(DELETE),
                        F.lit(None).cast(ArrayType(StringType())).alias(PRESENT),
                        F.lit(-1).alias(ORIGIN),
                    ),
                    allowMissingColumns=flow.stored_as_scd_type == 2,  # its OLD_END is NULL
                )
            ranges = {} if new_truncates else summary.ranges
            rebuilt = Rebuilt(writes, session, self._fill(everything, columns), columns, txn, ranges, empty_target)
            return scd1.write_rebuilt(rebuilt) if flow.stored_as_scd_type == 1 else scd2.write(rebuilt)
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
                *cols(columns),
                F.col(SCD1_SEQUENCE).alias(SEQ),
                F.lit(False).alias(DELETE),
                null_present.alias(PRESENT),
            )
        return rows.select(
            *cols(columns),
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
        by_key = Window.partitionBy(*cols(keys)).orderBy(*order)
        running = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        events = events.withColumn("__life", F.sum(F.col(DELETE).cast("int")).over(running) - F.col(DELETE).cast("int"))
        in_life = (
            Window.partitionBy(*cols(keys), "__life")
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
