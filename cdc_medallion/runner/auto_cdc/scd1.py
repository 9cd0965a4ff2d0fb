"""SCD type 1: each key's row is its last event's, with that event's sequence.

Two ways to the same rows: `write_rebuilt` takes each key's last event after the rebuild
(`applier`), and `write_latest` spares the rebuild when nothing needs it (no truncate ever, no
partial image in the batch), where the MERGE compares sequences with the stored row.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from cdc_medallion.identifiers import quote
from cdc_medallion.names import SCD1_SEQUENCE
from cdc_medallion.runner.auto_cdc.feed import ChangeBatch
from cdc_medallion.runner.auto_cdc.target import ApplyResult, Rebuilt, Target, cols, detached, release, shipped
from cdc_medallion.runner.event_columns import ACTION, DELETE, ORIGIN, SEQ
from cdc_medallion.storage.delta_store import Txn


def write_rebuilt(rebuilt: Rebuilt) -> ApplyResult:
    keys, columns = list(rebuilt.target.flow.keys), rebuilt.columns
    last = Window.partitionBy(*cols(keys)).orderBy(F.col(SEQ).desc(), F.col(ORIGIN).desc())
    final = detached(
        rebuilt.events.withColumn("__rn", F.row_number().over(last))
        .filter("__rn = 1")
        .select(*[F.col(quote(c)) for c in columns], SEQ, DELETE),
        rebuilt.empty_target,
    )
    try:
        return rebuilt.merge(_scd1_changes(final, columns), keys)
    finally:
        release(final)


def write_latest(
    target: Target, session: Any, change: ChangeBatch, state: DataFrame | None, txn: Txn, empty_target: bool
) -> ApplyResult:
    """SCD1 without a rebuild. With whole images and no truncate, a key's row is its last
    event's image, so earlier events and the stored row's values do not matter, only
    sequences: the batch's last event of a key applies where it is not older than the
    stored row (the MERGE's guard) nor, for an upsert, than the key's newest tombstone
    (a late upsert must not resurrect a deleted key). At equal sequences the batch's event
    wins, as in the rebuild. The MERGE's source reads no target, so the target is scanned
    once, by the MERGE; the source is still detached, since it reads the cached batch, which
    Delta refuses in a MERGE's source that it does not copy itself."""
    keys, columns, rows = list(target.flow.keys), change.columns, change.rows
    newest = Window.partitionBy(*cols(keys)).orderBy(F.col(SEQ).desc())
    latest = rows.withColumn("__rn", F.row_number().over(newest)).filter("__rn = 1")
    if state is not None:
        touched = shipped(rows.select(*cols(keys)), change.summary.keys)
        in_batch = state.join(touched, on=keys, how="left_semi")
        newest_deletes = in_batch.groupBy(*cols(keys)).agg(F.max(SEQ).alias("__deleted_at"))
        deleted_at = F.col("__deleted_at")
        latest = latest.join(newest_deletes, on=keys, how="left").filter(
            F.col(DELETE) | deleted_at.isNull() | (deleted_at <= F.col(SEQ))
        )
    changes = detached(_scd1_changes(latest, columns), empty_target)
    guard = F.col(f"t.{quote(SCD1_SEQUENCE)}") <= F.col(f"s.{quote(SCD1_SEQUENCE)}")
    try:
        return target.merge(session, changes, keys, txn, change.summary.ranges, empty_target, guard)
    finally:
        release(changes)


def _scd1_changes(final: DataFrame, columns: list[str]) -> DataFrame:
    """Each key's final event as the SCD1 row it leaves, with the MERGE's action."""
    return final.select(
        *cols(columns),
        F.col(SEQ).alias(SCD1_SEQUENCE),
        F.when(F.col(DELETE), F.lit("delete")).otherwise(F.lit("upsert")).alias(ACTION),
    )
