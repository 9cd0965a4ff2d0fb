"""The state store side of the stateful formats: where a group's `Kept` lives between batches.

`StepProcessor` runs `stateful_step.step` under `transformWithStateInPandas` (the operator
Databricks recommends over the legacy ones). A group keeps two list states, so the store holds
a row per held message and a row per context event, and a change writes only what changed:

- `held`: the bronze rows still held, as they landed (byte-exact);
- `context`: one entry per context key, with its event and when its message landed.

A timed format (`Format.timed`) runs in processing time with one timer per group, at the
earliest moment a held message times out; when it fires the group's held messages are parsed
again with nothing new, so an incomplete transaction is quarantined at its timeout even when
the source is quiet. Under `trigger(availableNow=True)` a batch runs only when some input has
something new, so a timed format's query also reads `TICK_GROUP` rows (`stateful.py`): one per
start, which the processor ignores, so that an update with nothing new still runs one batch
and the timers that are due fire in it.

`legacy_step` runs the same step under `applyInPandasWithState` for a checkpoint made with it
(state layouts 1 and 2): one state row per group, (the held rows as Arrow IPC, the context as
JSON), kept to the same bounds, without timers.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.state import GroupState
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues
from pyspark.sql.types import BinaryType, StringType, StructField, StructType, TimestampType

from cdc_medallion.formats.values import EPOCH
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.parsing.stateful_step import (
    Kept,
    Remembered,
    bronze_arrow,
    bronze_rows,
    no_new_rows,
    refs,
    step,
)

if TYPE_CHECKING:
    from cdc_medallion.formats.base import Format

#: The group that receives only tick rows (`stateful.py`): it keeps nothing and emits nothing.
TICK_GROUP = -2
HELD_STATE = "held"
CONTEXT_STATE = "context"
CONTEXT_ENTRY = StructType(
    [StructField("key", StringType()), StructField("event", StringType()), StructField("landed", TimestampType())]
)
#: The state row of a legacy (applyInPandasWithState) group.
LEGACY_STATE = StructType([StructField("held", BinaryType()), StructField("context", StringType())])
_LANDED = "__landed"  # a legacy context event's landing time, beside its fields


class StepProcessor(StatefulProcessor):
    """`stateful_step.step` per group, its `Kept` in list states, a timer for a timed format."""

    def __init__(self, parser: Format, columns: list[str]) -> None:
        self.parser = parser
        self.columns = columns  # of its input rows, which it is given by position

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.held = handle.getListState(HELD_STATE, BRONZE_SCHEMA)
        self.context = handle.getListState(CONTEXT_STATE, CONTEXT_ENTRY)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        new = bronze_rows(rows, self.columns)
        if key[0] == TICK_GROUP:
            return
        yield from self._step(new)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        yield from self._step(no_new_rows())

    def close(self) -> None:
        pass

    def _step(self, new: pa.Table) -> Iterator[pd.DataFrame]:
        before = Kept(self._held(), self._context())
        outcome = step(self.parser, before, new)
        self._keep_held(before.held, outcome.kept.held)
        self._keep_context(before.context, outcome.kept.context)
        if self.parser.timed:
            self._wake_at(outcome.wake_at)
        if len(outcome.emitted):
            yield outcome.emitted

    def _held(self) -> pa.Table:
        names = BRONZE_SCHEMA.fieldNames()
        rows = [dict(zip(names, row, strict=True)) for row in self.held.get()]
        return _as_bronze(rows)

    def _context(self) -> dict[str, Remembered]:
        return {key: Remembered(json.loads(event), _utc(landed)) for key, event, landed in self.context.get()}

    def _keep_held(self, before: pa.Table, after: pa.Table) -> None:
        """Write only what changed: new held rows appended, or the list replaced when some left."""
        known, now = set(refs(before)), refs(after)
        if known == set(now):
            return
        if not now:
            self.held.clear()
        elif known <= set(now):
            added = pa.array([ref not in known for ref in now], pa.bool_())
            self.held.appendList(_tuples(after.filter(added)))
        else:
            self.held.put(_tuples(after))

    def _keep_context(self, before: dict[str, Remembered], after: dict[str, Remembered]) -> None:
        if after == before:
            return
        entries = [(key, json.dumps(r.event), r.landed) for key, r in after.items()]
        if not entries:
            self.context.clear()
        elif all(after.get(key) == r for key, r in before.items()) and list(after)[: len(before)] == list(before):
            self.context.appendList(entries[len(before) :])
        else:
            self.context.put(entries)

    def _wake_at(self, when: dt.datetime | None) -> None:
        """One timer per group, at `when` (whole milliseconds, not before it)."""
        wanted = [] if when is None else [math.ceil(when.timestamp() * 1000)]
        current = list(self.handle.listTimers())
        if current == wanted:
            return
        for timer in current:
            self.handle.deleteTimer(timer)
        for timer in wanted:
            self.handle.registerTimer(timer)


def legacy_step(parser: Format) -> Callable[[Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """`stateful_step.step` for `applyInPandasWithState`: a checkpoint made with that operator."""

    def run(key: Any, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        outcome = step(parser, _legacy_kept(parser, state), bronze_rows(frames))
        state.update(_legacy_state(outcome.kept))
        yield outcome.emitted

    return run


def batch_step(parser: Format) -> Callable[[Any, pd.DataFrame], pd.DataFrame]:
    """`stateful_step.step` for `applyInPandas`: a batch parsed on its own holds nothing before it."""

    def run(key: Any, frame: pd.DataFrame) -> pd.DataFrame:
        return step(parser, Kept.nothing(), bronze_rows(iter([frame]))).emitted

    return run


def _legacy_kept(parser: Format, state: GroupState) -> Kept:
    if not state.exists:
        return Kept.nothing()
    held, context = state.get
    table = pa.ipc.open_stream(held).read_all().cast(bronze_arrow()) if held else bronze_arrow().empty_table()
    kept: dict[str, Remembered] = {}
    for event in json.loads(context or "[]"):  # a checkpoint of an earlier version kept every one
        landed = event.pop(_LANDED, None)
        key = parser.context_key(event)
        if key is not None:
            kept.pop(key, None)
            kept[key] = Remembered(event, dt.datetime.fromisoformat(landed) if landed else None)
    return Kept(table, kept)


def _legacy_state(kept: Kept) -> tuple[bytes, str]:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, kept.held.schema) as writer:
        writer.write_table(kept.held)
    events = [{**r.event, _LANDED: r.landed.isoformat() if r.landed else None} for r in kept.context.values()]
    return sink.getvalue(), json.dumps(events)


def _as_bronze(rows: list[dict[str, Any]]) -> pa.Table:
    """Held rows, as the state store gives them back, as bronze Arrow rows."""
    for row in rows:
        for name in ("timestamp", "_ingest_ts"):
            row[name] = _utc(row[name])
        if row["headers"] is not None:
            row["headers"] = [dict(zip(("key", "value"), h, strict=True)) for h in row["headers"]]
    return pa.Table.from_pylist(rows, schema=bronze_arrow())


def _tuples(rows: pa.Table) -> list[tuple[Any, ...]]:
    names = BRONZE_SCHEMA.fieldNames()
    return [tuple(row[name] for name in names) for row in rows.to_pylist()]


def _utc(value: dt.datetime | int | None) -> dt.datetime | None:
    """A time as the state store gives it back: microseconds, or a naive local time (pyspark's
    `fromInternal`), as an aware UTC time."""
    if value is None:
        return None
    if isinstance(value, int):
        return EPOCH + dt.timedelta(microseconds=value)
    return value.astimezone(dt.UTC)
