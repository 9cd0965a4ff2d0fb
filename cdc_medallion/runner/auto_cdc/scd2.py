"""SCD type 2: a version per change of a tracked column, from the rebuilt events of each key.

As DLT: a new version starts when a tracked column changes or the key comes back after a delete;
a change of an untracked column updates the current version in place; a delete closes the open
version at its sequence. Only versions that changed are rewritten.
"""

from __future__ import annotations

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.identifiers import quote
from cdc_medallion.names import END_AT, START_AT
from cdc_medallion.runner.auto_cdc.target import ApplyResult, Rebuilt, cols, detached, release
from cdc_medallion.runner.event_columns import ACTION, DELETE, OLD_END, ORIGIN, SEQ


def tracked_columns(flow: AutoCdcFlow, columns: list[str]) -> list[str]:
    values = [c for c in columns if c not in flow.keys]
    if flow.track_history_column_list is not None:
        return [c for c in values if c in flow.track_history_column_list]
    if flow.track_history_except_column_list is not None:
        return [c for c in values if c not in flow.track_history_except_column_list]
    return values


def write(rebuilt: Rebuilt) -> ApplyResult:
    keys, columns = list(rebuilt.target.flow.keys), rebuilt.columns
    tracked = tracked_columns(rebuilt.target.flow, columns)
    by_key = Window.partitionBy(*cols(keys)).orderBy(F.col(SEQ), F.col(ORIGIN))
    tracked_value = F.struct(*[F.col(quote(c)) for c in tracked]) if tracked else F.lit(0)
    marked = (
        rebuilt.events.withColumn("__tracked", tracked_value)
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
    in_version = Window.partitionBy(*cols(keys), "__version").orderBy(F.col(SEQ), F.col(ORIGIN))
    whole_version = in_version.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    latest = Window.partitionBy(*cols(keys), "__version").orderBy(F.col(SEQ).desc(), F.col(ORIGIN).desc())

    def as_row(end: str) -> Column:
        return F.struct(*[F.col(quote(c)) for c in columns], F.col(end).alias(END_AT))

    upserts = marked.filter(~F.col(DELETE) & (F.col("__version") > 0))
    ranked = (
        upserts.withColumn(START_AT, F.first(SEQ).over(whole_version))
        # The stored version this one began as, when its first event stands for one.
        .withColumn("__stored", F.first(F.when(stored, as_row(OLD_END))).over(whole_version))
        .withColumn("__rn", F.row_number().over(latest))
        # Whether any version still starts where this event's stored version started.
        .withColumn("__kept", F.max(F.col("__starts").cast("int")).over(Window.partitionBy(*cols(keys), SEQ)) == 1)
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
    changes = detached(changes.select("c.*"), rebuilt.empty_target)
    try:
        return rebuilt.merge(changes, [*keys, START_AT])
    finally:
        release(changes)
