"""An auto CDC flow's target and how a batch's changed rows reach it: one MERGE (or an append
while it holds nothing), narrowed to the files that may hold the batch's keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.faults import commit_point
from cdc_medallion.identifiers import quote
from cdc_medallion.runner.event_columns import ACTION
from cdc_medallion.storage.delta_store import DeltaStore, Txn

BROADCAST_KEYS = 2_000_000  # batches are bounded by rows and bytes, so their keys are far fewer


@dataclass
class ApplyResult:
    upserted: int = 0
    deleted: int = 0
    truncates: int = 0


@dataclass(frozen=True)
class Rebuilt:
    """A batch's events rebuilt with what the target holds of their keys (`applier`), ready for
    an SCD type's writer: it makes the changed rows, `merge` writes them into the target."""

    target: Target
    session: Any
    events: DataFrame  # every event of the touched keys, absent columns filled, in sequence order
    columns: list[str]
    txn: Txn
    ranges: dict[str, tuple[Any, Any, bool]]  # the batch's key ranges (none after a new truncate)
    empty_target: bool

    def merge(self, changes: DataFrame, match: list[str]) -> ApplyResult:
        return self.target.merge(self.session, changes, match, self.txn, self.ranges, self.empty_target)


@dataclass
class Target:
    """One flow's target table for one batch: its columns for this batch's writes (the table's,
    or the batch's own for a target its first rows make) and the properties a first write sets."""

    store: DeltaStore
    flow: AutoCdcFlow
    schema: StructType
    properties: Mapping[str, str] = field(default_factory=dict)

    def merge(
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
        schema = self.schema
        changes = changes.select(
            *[
                (F.col(quote(f.name)) if f.name in changes.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                for f in schema.fields
            ],
            ACTION,
        )
        if empty_target:
            return self.insert(changes, txn)
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

    def insert(self, changes: DataFrame, txn: Txn) -> ApplyResult:
        """The upserts of a batch into a target that holds nothing yet (deletes find nothing).
        The rows are counted by the commit itself, not by a job of their own; a batch with none
        commits an empty append, after which the target takes MERGEs."""
        before = self.store.version(self.flow.target)
        upserts = changes.filter(F.col(ACTION) == "upsert").drop(ACTION)
        self.store.append(self.flow.target, upserts, txn, self.properties)
        return ApplyResult(upserted=self.store.rows_written_since(self.flow.target, before))


def shipped(keys: DataFrame, count: int) -> DataFrame:
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


def detached(changes: DataFrame, empty_target: bool) -> DataFrame:
    """A MERGE's source, computed once before the MERGE and kept without its lineage
    (`localCheckpoint`). The rebuild reads the target itself; a cached plan reading the target is
    recached by Delta when the MERGE commits to that same table, which Delta refuses mid-MERGE,
    and without a copy Delta would compute the rebuild twice. A first batch into an empty target
    is appended instead (`Target.insert`): its rebuild reads no target and an append computes its rows
    once, so it is written as it is, without the copy's job."""
    return changes if empty_target else changes.localCheckpoint(eager=True)


def release(detached: DataFrame) -> None:
    """Free a `localCheckpoint`'s blocks now. `unpersist` does not reach them (they are not in
    the cache manager), and Spark's cleaner frees them only once the JVM collects the plan, so
    a long-running driver would fill its storage memory with finished MERGE sources."""
    plan = detached._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)


def cols(names: list[str]) -> list[Column]:
    """Columns by name, quoted: a source column may be called `a.b` or `x``y`, which a bare
    string would read as a nested field or a syntax error."""
    return [F.col(quote(name)) for name in names]
