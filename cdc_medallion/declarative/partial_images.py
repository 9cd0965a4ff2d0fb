"""Partial row images, filled before a Databricks auto CDC flow so that it takes whole images.

Why
---
A change message may carry only some of its row's columns: Qlik's columnMask, SharePlex's `upd`,
Debezium's TOAST placeholder. A column absent from the message keeps its value; a column the
message sets to NULL is NULL. The local runner applies that rule in its own auto CDC
(`present_columns_column`, an array of the columns each event carries). Databricks' auto CDC
documents no per-event way to say it: `ignore_null_updates` (and its column lists) keep the old
value wherever an update holds a NULL, so an explicit NULL is lost too ("columns with null
retain their existing values ... This also applies to nested columns with a value of null",
the AUTO CDC reference), and `columns_to_update` / `COLUMNS TO UPDATE` is listed without its
semantics (the column's type, what an insert or SCD type 2 does with it). So on Databricks the
flow runs with plain upserts, and this view makes every event a whole image first.

How
---
Spark's stateful operator `applyInPandasWithState` (the same code runs on Databricks), grouped by
the flow's keys, keeps each key's newest image by `sequence_by` and whether the key lives. Within
a micro-batch a key's events are taken in sequence order: an upsert's absent columns are taken
from the image before it (none after a delete: they stay NULL, as on an insert), a delete ends
the key's life; rows without a sequence and truncates pass untouched. A batch DataFrame (tools,
tests) is one micro-batch with nothing before it (`applyInPandas`).

Values cross to Python as text only, by exact codecs (`_encode` / `_decode`): a typed column in
pandas would turn a BIGINT with NULLs into float64, and a timestamp outside pandas' range would
fail.

Against the local runner the result is the same for whole images and for partial images in
sequence order within a micro-batch. It differs in two cases, both about late data: a partial
image whose key already has a later event from an earlier micro-batch is filled from the key's
newest image (locally: from the event before it); and a truncate, which names no key, is not
seen by a key's state, so a partial image after a truncate is filled from before it (locally its
absent columns are NULL). Sources send whole rows after a truncate (there is no row to update).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.errors import GraphError
from cdc_medallion.identifiers import quote

# Working columns of the operator's input; the output has the source's columns only.
ORDER, DELETE, PASS, CARRIED = "__fill_order", "__fill_delete", "__fill_pass", "__fill_carried"
STATE_SCHEMA = StructType([StructField("image", StringType())])
#: Nested values go through JSON: timestamps with their microseconds and offset.
_JSON = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}
#: Types whose text cast is exact both ways (a TIMESTAMP_NTZ has no zone to shift it).
_CAST = (
    BooleanType,
    ByteType,
    ShortType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    DateType,
    TimestampNTZType,
)


def _expr(value: str | Column | None) -> Column:
    if value is None:
        return F.lit(False)
    return F.expr(value) if isinstance(value, str) else value


def _encode(column: Column, kind: DataType) -> Column:
    """A value as text that `_decode` turns back into the same value."""
    if isinstance(kind, StringType):
        return column
    if isinstance(kind, BinaryType):
        return F.base64(column)
    if isinstance(kind, TimestampType):  # an instant: its microseconds, whatever the session's zone
        return F.unix_micros(column).cast("string")
    if isinstance(kind, _CAST):
        return column.cast("string")
    return F.to_json(F.struct(column.alias("v")), _JSON)


def _decode(text: Column, kind: DataType) -> Column:
    if isinstance(kind, StringType):
        return text
    if isinstance(kind, BinaryType):
        return F.unbase64(text)
    if isinstance(kind, TimestampType):
        return F.timestamp_micros(text.cast("long"))
    if isinstance(kind, _CAST):
        return text.cast(kind)
    return F.from_json(text, StructType([StructField("v", kind)]), _JSON).getField("v")


Key = Callable[[str], Any]


def _order(column: Column, kind: DataType, flow: str) -> tuple[Column, Key]:
    """The sequence as text, and how Python orders that text as Spark orders the sequence."""
    if isinstance(kind, StringType | DateType | TimestampNTZType):  # ISO dates and times sort as text
        return column.cast("string"), str
    if isinstance(kind, ByteType | ShortType | IntegerType | LongType | DecimalType):
        return column.cast("string"), Decimal
    if isinstance(kind, FloatType | DoubleType):
        return column.cast("string"), float
    if isinstance(kind, TimestampType):
        return F.unix_micros(column).cast("string"), int
    if isinstance(kind, StructType):
        parts = [_order(column.getField(f.name), f.dataType, flow) for f in kind.fields]
        keys = [key for _, key in parts]

        def struct_key(text: str) -> tuple[tuple[Any, ...], ...]:
            # NULL first, as Spark orders a struct's fields ascending
            return tuple((0,) if v is None else (1, key(v)) for v, key in zip(json.loads(text), keys, strict=True))

        return F.to_json(F.array(*[text for text, _ in parts])), struct_key
    raise GraphError(f"auto CDC flow {flow}: sequence_by of type {kind.simpleString()} cannot order partial images")


def fill_absent_columns(rows: DataFrame, flow: AutoCdcFlow) -> DataFrame:
    """`rows` with each event's absent columns (not in `flow.present_columns_column`) filled
    from its key's image before it, the present-columns column kept as it was."""
    present = flow.present_columns_column
    fields = rows.schema.fields
    names = [f.name for f in fields]
    if present is None or present not in names:
        raise GraphError(f"auto CDC flow {flow.name}: its source has no present-columns column {present!r}")
    values = [c for c in flow.data_columns(names) if c not in flow.keys and c != present]  # what may be absent
    sequence = F.col(quote(flow.sequence_by)) if isinstance(flow.sequence_by, str) else flow.sequence_by
    order, order_key = _order(sequence, rows.select(sequence).schema.fields[0].dataType, flow.name)
    slots = {name: f"c{i}" for i, name in enumerate(names)}
    encoded = rows.select(
        *[_encode(F.col(quote(f.name)), f.dataType).alias(slots[f.name]) for f in fields],
        order.alias(ORDER),
        F.coalesce(_expr(flow.apply_as_deletes), F.lit(False)).alias(DELETE),
        F.coalesce(_expr(flow.apply_as_truncates), F.lit(False)).alias(PASS),
        F.col(quote(present)).cast("array<string>").alias(CARRIED),
    )
    output = StructType([StructField(slots[name], StringType()) for name in names])
    fill = _Fill([slots[n] for n in names], [(slots[v], v) for v in values], order_key)
    grouped = encoded.groupBy(*[slots[k] for k in flow.keys])
    if rows.isStreaming:
        filled = grouped.applyInPandasWithState(
            lambda key, frames, state: fill.streaming(frames, state),  # Spark counts a method's `self`
            outputStructType=output,
            stateStructType=STATE_SCHEMA,
            outputMode="append",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    else:
        filled = grouped.applyInPandas(lambda key, frame: fill.apply(frame, None)[0], schema=output)
    return filled.select(*[_decode(F.col(slots[f.name]), f.dataType).alias(f.name) for f in fields])


Image = dict[str, Any]  # {"order": text, "alive": bool, "values": {slot: text or None}}


class _Fill:
    """One key's events in sequence order, each upsert's absent columns taken from the image
    before it. Runs in Python workers: plain data and text only."""

    def __init__(self, slots: list[str], values: list[tuple[str, str]], order_key: Key) -> None:
        self.slots = slots
        self.values = values  # (slot, column name) of every column an event may lack
        self.order_key = order_key

    def streaming(self, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        image = json.loads(state.get[0]) if state.exists else None
        out, image = self.apply(pd.concat(list(frames), ignore_index=True), image)
        if image is not None:
            state.update((json.dumps(image),))
        yield out

    def apply(self, frame: pd.DataFrame, image: Image | None) -> tuple[pd.DataFrame, Image | None]:
        out = frame[self.slots].astype(object).reset_index(drop=True)
        frame = frame.reset_index(drop=True)
        events = [i for i in range(len(frame)) if not _missing(frame.at[i, ORDER]) and not frame.at[i, PASS]]
        # Sequence order, arrival order among equals (a stable sort).
        for i in sorted(events, key=lambda i: self.order_key(frame.at[i, ORDER])):
            order = frame.at[i, ORDER]
            newer = image is None or self.order_key(order) >= self.order_key(image["order"])
            if frame.at[i, DELETE]:
                if newer:
                    image = {"order": order, "alive": False, "values": {}}
                continue
            carried = frame.at[i, CARRIED]
            if not _missing(carried) and image is not None and image["alive"]:
                names = set(carried)
                for slot, name in self.values:
                    if name not in names:
                        out.at[i, slot] = image["values"].get(slot)
            if newer:
                image = {"order": order, "alive": True, "values": {slot: out.at[i, slot] for slot, _ in self.values}}
        return out, image


def _missing(value: Any) -> bool:
    """A NULL as pandas hands it over: None, or NaN in a column it typed as numbers."""
    return value is None or (isinstance(value, float) and math.isnan(value))
