"""Keys that a quarantined change left stale, per change feed (the auto CDC flows of one spec).

A change the feed's view quarantines (a value its column's type does not take, a NULL key) is
not applied, and its key's state in gold no longer follows the source: a column it changed keeps
its old value, a delete never happens. Later changes of the key are applied as usual, so gold
follows the columns they carry; the key stays stale until a change at a higher sequence leaves
nothing of the quarantined one: a whole image (every value column present), a delete or a
truncate. A quarantined change without a key names no row: only a truncate at a higher sequence
ends it; one without a sequence cannot be ordered against anything and stays (silver quarantines
those before gold sees them). docs/quality.md states the rule for users.

The state is `<state prefix>__stale` (beside the feed's tombstones), appended, never merged: per
batch, a row per key it quarantined a change of (`__quarantined_at`, the newest sequence; or
`__unplaced`), and per watched key it applied a whole image of (`__whole_at`). Deletes and
truncates are in the feed's tombstone tables already, every one. A key is stale while its newest
quarantined sequence is not below the newest of those. A whole image applied before its key was
watched is found when a quarantined change older than the key's stored row arrives (a late one):
then, and only then, the view is read over the whole stream for those keys (`history`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.identifiers import quote
from cdc_medallion.names import SCD1_SEQUENCE, STALE_SUFFIX
from cdc_medallion.quality.events import StaleKeys
from cdc_medallion.runner.auto_cdc.feed import (
    ChangeBatch,
    FeedState,
    change_events,
    data_columns,
    is_partial,
    state_prefix,
)
from cdc_medallion.runner.event_columns import SEQ, TRUNCATE
from cdc_medallion.storage.delta_store import DeltaStore, Txn

QUARANTINED_AT, WHOLE_AT, UNPLACED = "__quarantined_at", "__whole_at", "__unplaced"
SAMPLES = 5
#: State tables (by path) with no stale key as of the version noted, written by this process: a
#: batch that quarantines nothing cannot make a key stale, so it need not look at them.
_SETTLED: dict[str, int] = {}


class StaleKeyState:
    """The stale keys of one change feed (`flow` stands for the flows of its spec)."""

    def __init__(
        self,
        store: DeltaStore,
        flow: AutoCdcFlow,
        feed: FeedState,
        current: str | None,
        history: Callable[[], DataFrame] | None,
    ) -> None:
        self.store = store
        self.flow = flow
        self.feed = feed
        self.keys = list(flow.keys)
        self.name = f"{state_prefix(flow)}{STALE_SUFFIX}"
        #: An SCD1 target of the feed: each live key's row with the sequence of its last event.
        self.current = current
        #: The view's kept rows over what its input holds now (for late quarantined changes).
        self.history = history

    def update(self, change: ChangeBatch | None, quarantined: DataFrame | None, txn: Txn) -> StaleKeys | None:
        """Record what the batch did to the feed's stale keys (after its tombstones were written,
        before its targets' MERGEs: a replay after this commit skips it and finds the same), and
        count them; None when the batch cannot have changed them (it neither quarantined nor
        applied anything, or the feed never quarantined a change)."""
        tracked = self.store.exists(self.name)
        if quarantined is None and (change is None or not tracked):
            return None
        if quarantined is None and _SETTLED.get(self._path()) == self.store.version(self.name):
            return StaleKeys(0)
        watched = _newest(self.store.read(self.name).filter(~F.col(UNPLACED)), self.keys) if tracked else None
        rows: list[DataFrame] = []
        keys_now: DataFrame | None = None
        if quarantined is not None:
            rows.append(self._quarantined(quarantined))
            keys_now = rows[0].filter(~F.col(UNPLACED)).select(*_cols(self.keys))
        if watched is not None:
            seen = watched.select(*_cols(self.keys))
            keys_now = seen if keys_now is None else keys_now.unionByName(seen)
        if change is not None and keys_now is not None:
            whole = self._ending(change.events, change.columns)
            rows.append(self._ending_rows(whole.join(F.broadcast(keys_now.distinct()), self.keys, "left_semi")))
        if quarantined is not None and (late := self._late(rows[0], watched)) is not None:
            rows.append(late)
        new = reduce(DataFrame.unionByName, rows)
        if quarantined is not None or not new.isEmpty():
            self.store.append(self.name, self.store.conform(self.name, new), txn, {"layer": "state"})
        counted = self.count()
        if counted.keys == 0:
            _SETTLED[self._path()] = self.store.version(self.name) or 0
        else:
            _SETTLED.pop(self._path(), None)
        return counted

    def count(self) -> StaleKeys:
        """The stale keys as the state and the tombstones have them now."""
        stored = self.store.read(self.name)
        sequence = stored.schema[QUARANTINED_AT].dataType
        truncated = F.lit(self._truncated()).cast(sequence)
        newest = _newest(stored.filter(~F.col(UNPLACED)), self.keys)
        deleted_at = F.lit(None).cast(sequence)
        if self.store.exists(self.feed.tombstones_name):
            deletes = self.store.read(self.feed.tombstones_name).join(
                F.broadcast(newest.select(*_cols(self.keys))), self.keys, "left_semi"
            )
            newest = newest.join(
                deletes.groupBy(*_cols(self.keys)).agg(F.max(SEQ).alias("__deleted_at")), self.keys, "left"
            )
            deleted_at = F.col("__deleted_at")
        ended = F.greatest(F.col(WHOLE_AT), deleted_at, truncated)
        stale = newest.filter(
            F.col(QUARANTINED_AT).isNotNull() & ~F.coalesce(ended > F.col(QUARANTINED_AT), F.lit(False))
        )
        keys = stale.select(F.to_json(F.struct(*_cols(self.keys))).alias("key")).persist()
        try:
            samples = tuple(row["key"] for row in keys.orderBy("key").limit(SAMPLES).collect())
            placed = keys.count() if len(samples) == SAMPLES else len(samples)
        finally:
            keys.unpersist()
        unplaced = stored.filter(F.col(UNPLACED)).select(*_cols(self.keys), QUARANTINED_AT).distinct()
        # A change with no key is ended by a truncate after it; one with no sequence by nothing.
        without = unplaced.filter(~F.coalesce(truncated > F.col(QUARANTINED_AT), F.lit(False))).count()
        return StaleKeys(placed + without, without, samples)

    def _quarantined(self, rows: DataFrame) -> DataFrame:
        """The batch's quarantined changes: per key its newest sequence; a change with no key or
        no sequence as it is (`UNPLACED`)."""
        flow = self.flow
        sequence = F.col(flow.sequence_by) if isinstance(flow.sequence_by, str) else flow.sequence_by
        unplaced = reduce(lambda a, b: a | b, [F.col(quote(k)).isNull() for k in self.keys], sequence.isNull())
        changes = rows.select(*_cols(self.keys), sequence.alias(QUARANTINED_AT), unplaced.alias(UNPLACED))
        typed = changes.schema[QUARANTINED_AT].dataType
        placed = (
            changes.filter(~F.col(UNPLACED)).groupBy(*_cols(self.keys)).agg(F.max(QUARANTINED_AT).alias(QUARANTINED_AT))
        )
        return placed.select(
            *_cols(self.keys), QUARANTINED_AT, F.lit(None).cast(typed).alias(WHOLE_AT), F.lit(False).alias(UNPLACED)
        ).unionByName(changes.filter(F.col(UNPLACED)).withColumn(WHOLE_AT, F.lit(None).cast(typed)))

    def _ending(self, events: DataFrame, columns: list[str]) -> DataFrame:
        """The events (`change_events`) that leave nothing of a key's earlier ones: whole upserts
        and deletes (truncates are in the feed's truncates table)."""
        return events.filter(~F.col(TRUNCATE) & ~is_partial(self.flow, columns))

    def _ending_rows(self, events: DataFrame) -> DataFrame:
        """State rows: per key the newest sequence of `events` (of `_ending`)."""
        newest = events.groupBy(*_cols(self.keys)).agg(F.max(SEQ).alias(WHOLE_AT))
        return newest.select(
            *_cols(self.keys),
            F.lit(None).cast(newest.schema[WHOLE_AT].dataType).alias(QUARANTINED_AT),
            WHOLE_AT,
            F.lit(False).alias(UNPLACED),
        )

    def _late(self, quarantined: DataFrame, watched: DataFrame | None) -> DataFrame | None:
        """For keys whose newest quarantined change is new and older than a change already
        applied (the stored row's sequence is higher, or there is no SCD1 target to tell), the
        whole images and deletes applied after it, read from the view over the whole stream.
        None: no such key."""
        newer = quarantined.filter(~F.col(UNPLACED)).select(*_cols(self.keys), F.col(QUARANTINED_AT).alias("__q"))
        if watched is not None:
            known = watched.select(*_cols(self.keys), F.col(QUARANTINED_AT).alias("__known"))
            newer = newer.join(known, self.keys, "left").filter(
                F.col("__known").isNull() | (F.col("__q") > F.col("__known"))
            )
        if self.current is not None:
            if not self.store.exists(self.current):
                return None  # nothing applied yet, so nothing after it either
            stored = self.store.read(self.current).select(*_cols(self.keys), SCD1_SEQUENCE)
            newer = newer.join(stored, self.keys).filter(F.col(SCD1_SEQUENCE) > F.col("__q"))
        late = newer.select(*_cols(self.keys), "__q")
        if self.history is None or late.isEmpty():  # the usual case: one small job, and done
            return None
        view = self.history()
        columns = data_columns(self.flow, view.columns)
        ending = self._ending(change_events(self.flow, view, columns), columns)
        return self._ending_rows(ending.join(F.broadcast(late), self.keys).filter(F.col(SEQ) > F.col("__q")))

    def _truncated(self) -> object:
        """The newest truncate's sequence (None: none)."""
        if not self.feed.has_truncates():
            return None
        found = self.store.read(self.feed.truncates_name).agg(F.max(SEQ)).first()
        return None if found is None else found[0]

    def _path(self) -> str:
        return str(self.store.path(self.name))


def _newest(rows: DataFrame, keys: list[str]) -> DataFrame:
    """Per key the newest quarantined and whole sequences among state rows."""
    return rows.groupBy(*_cols(keys)).agg(F.max(QUARANTINED_AT).alias(QUARANTINED_AT), F.max(WHOLE_AT).alias(WHOLE_AT))


def _cols(names: list[str]) -> list[Column]:
    return [F.col(quote(name)) for name in names]
