"""The rebuild of `auto_cdc.py`, for a small batch, in the driver with Arrow and Python.

On two cores a Spark job costs a tenth of a second to a second however few rows it holds, and
the Spark rebuild is a dozen jobs a flow: a 10k-change batch spent 2-3 s a flow there and about
two thirds of a whole run in gold (bench, 20k changes). Here the batch's events are collected
once, the rows the target and state hold for its keys are read by delta-rs, and each key's
history is rebuilt in a Python loop, or, for SCD1 of whole rows, picked by an Arrow sort
(`last_per_key`). The result is exactly what the Spark rebuild hands to the MERGE (SCD1's
final rows, SCD2's changed versions), so both paths share the writes.

The rules are the Spark path's, event for event; `tests/test_auto_cdc_driver.py` applies
random batches through both and compares the tables. Where Python would order or compare
values differently than Spark (floating-point keys or sequences, nested sequences) or a key
is NULL, the batch is left to Spark.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# Sequence types Python orders exactly as Spark does (str: code point order is UTF-8 byte order).
_ORDERED = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_integer,
    pa.types.is_timestamp,
    pa.types.is_date,
    pa.types.is_decimal,
    pa.types.is_binary,
)
_NAN = object()  # Spark compares NaN equal to NaN; Python does not


def orderable(data_type: pa.DataType) -> bool:
    return any(test(data_type) for test in _ORDERED)


def groupable(data_type: pa.DataType) -> bool:
    """A key type whose Python equality and hashing match Spark's grouping."""
    return not (pa.types.is_floating(data_type) or pa.types.is_nested(data_type))


@dataclass(slots=True)
class Event:
    """One event of a key's history: new (origin 1), stored (0), or a truncate (-1)."""

    row: list[Any]  # values in the flow's column order, keys included
    seq: Any
    origin: int
    delete: bool
    present: frozenset[str] | None  # None: every column is present
    old_end: Any = None  # SCD2: the end the stored version this event stands for had


def _normal(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(_NAN if isinstance(v, float) and math.isnan(v) else v for v in values)


class KeyHistories:
    """Events grouped by key, for the columns of one flow."""

    def __init__(self, columns: Sequence[str], keys: Sequence[str]) -> None:
        self.columns = list(columns)
        self.key_index = [self.columns.index(k) for k in keys]
        self.value_index = [i for i, c in enumerate(self.columns) if c not in keys]
        self.by_key: dict[tuple[Any, ...], list[Event]] = {}

    def add(self, key: tuple[Any, ...], event: Event) -> None:
        self.by_key.setdefault(key, []).append(event)

    def empty_row(self, key: tuple[Any, ...]) -> list[Any]:
        row: list[Any] = [None] * len(self.columns)
        for i, value in zip(self.key_index, key, strict=True):
            row[i] = value
        return row

    def filled(self) -> Iterable[tuple[tuple[Any, ...], list[Event]]]:
        """Each key's events in (sequence, origin) order, absent columns carried forward within
        the key's life (since its last delete), as the Spark rebuild's `_fill`."""
        for key, events in self.by_key.items():
            events.sort(key=lambda e: (e.seq, e.origin))  # stable: ties keep arrival order
            carried: dict[int, Any] = {}
            for event in events:
                for i in self.value_index:
                    if event.present is None or self.columns[i] in event.present:
                        carried[i] = event.row[i]
                    event.row[i] = carried.get(i)
                if event.delete:
                    carried = {}
            yield key, events


def scd1_final(histories: KeyHistories) -> list[list[Any]]:
    """Each touched key's last event: its row, then sequence and is-delete."""
    return [[*events[-1].row, events[-1].seq, events[-1].delete] for _, events in histories.filled()]


def scd2_changes(histories: KeyHistories, tracked: Sequence[str]) -> list[list[Any]]:
    """The versions to upsert and to delete, as `_write_scd2`: row, then start, end and action."""
    tracked_index = [histories.columns.index(c) for c in tracked]
    out: list[list[Any]] = []
    for _, events in histories.filled():
        n = len(events)
        starts = [False] * n
        previous_delete: bool | None = None
        previous_tracked: tuple[Any, ...] | None = None
        for i, event in enumerate(events):
            value = _normal(event.row[j] for j in tracked_index)
            starts[i] = not event.delete and (previous_delete is None or previous_delete or value != previous_tracked)
            previous_delete, previous_tracked = event.delete, value
        next_boundary: list[Any] = [None] * n
        boundary = None
        for i in range(n - 1, -1, -1):
            next_boundary[i] = boundary
            if events[i].delete or starts[i]:
                boundary = events[i].seq
        starting_at = {events[i].seq for i in range(n) if starts[i]}
        group: list[int] = []
        version = 0
        for i in range(n + 1):
            if i == n or starts[i]:
                if group:
                    out.extend(_version_changes(events, group, next_boundary))
                group = []
            if i == n:
                break
            version += starts[i]
            if not events[i].delete and version > 0:
                group.append(i)
        for event in events:  # stored versions that no version starts at any more
            if event.origin == 0 and not event.delete and event.seq not in starting_at:
                out.append([*event.row, event.seq, event.old_end, "delete"])
    return out


def _version_changes(events: list[Event], group: list[int], next_boundary: list[Any]) -> list[list[Any]]:
    """One version's upsert, unless it is a stored version that stays as it was: its latest
    values with the end the next boundary gives it, started where its first event is."""
    first, last = events[group[0]], events[group[-1]]
    end = next_boundary[group[-1]]
    if first.origin == 0:
        stored = _normal([*first.row, first.old_end])
        if _normal([*last.row, end]) == stored:
            return []
    return [[*last.row, first.seq, end, "upsert"]]


# --- Arrow in and out ------------------------------------------------------------------------
def rows_of(table: pa.Table, columns: Sequence[str]) -> list[list[Any]]:
    """Each row's values in `columns` order, as a list the rebuild fills in place."""
    lists = [table.column(c).to_pylist() for c in columns]
    return list(map(list, zip(*lists, strict=True))) if lists else [[] for _ in range(table.num_rows)]


def present_sets(column: pa.ChunkedArray) -> list[frozenset[str] | None]:
    """Each event's present columns. A batch repeats a few sets many times, so the strings are
    converted in one flat pass and each distinct set is built once: converting the lists
    themselves cost a third of a second for 16k events (bench)."""
    out: list[frozenset[str] | None] = []
    known: dict[tuple[str, ...], frozenset[str]] = {}
    for chunk in column.chunks:
        names, offsets, valid = chunk.values.to_pylist(), chunk.offsets.to_pylist(), chunk.is_valid().to_pylist()
        for i, is_valid in enumerate(valid):
            if not is_valid:
                out.append(None)
                continue
            present = tuple(names[offsets[i] : offsets[i + 1]])
            found = known.get(present)
            if found is None:
                found = known[present] = frozenset(present)
            out.append(found)
    return out


def keys_of(table: pa.Table, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    return list(zip(*(table.column(k).to_pylist() for k in keys), strict=True))


def key_filter(
    keys: Sequence[str], key_values: Iterable[tuple[Any, ...]], types: Sequence[pa.DataType]
) -> pc.Expression:
    """A superset filter (each key column in its values); the exact match on the whole key
    is made in Python."""
    values = list(key_values)
    expression = pc.scalar(True)
    for i, (name, data_type) in enumerate(zip(keys, types, strict=True)):
        expression = expression & pc.field(name).isin(pa.array({v[i] for v in values}, data_type))
    return expression


def table_of(rows: list[list[Any]], schema: pa.Schema) -> pa.Table:
    columns = zip(*rows, strict=True) if rows else ([] for _ in schema)
    return pa.Table.from_arrays(
        [pa.array(list(values), f.type) for values, f in zip(columns, schema, strict=True)], schema=schema
    )


def truthy(array: pa.ChunkedArray) -> list[bool]:
    return pc.fill_null(array, False).to_pylist()


# --- SCD1 of whole rows, without Python rows ---------------------------------------------------
def whole_images(present: pa.ChunkedArray, value_columns: Sequence[str]) -> bool:
    """Every event carries every value column (its present list is NULL or names them all).

    Then nothing is carried forward from one event of a key to the next, and a key's SCD1 row
    is its last event's row: Debezium's and most formats' images are whole.
    """
    lists = present.combine_chunks() if present.num_chunks else pa.array([], present.type)
    given = len(lists) - lists.null_count
    if not value_columns or given == 0:
        return True
    named = pc.is_in(pc.list_flatten(lists), value_set=pa.array(list(value_columns), pa.string()))
    owners = pc.list_parent_indices(lists)
    per_event = pa.table({"owner": owners, "named": named.cast(pa.int64())}).group_by("owner")
    counts = per_event.aggregate([("named", "sum")]).column("named_sum")
    return pc.sum(pc.equal(counts, len(value_columns))).as_py() == given


def last_per_key(events: pa.Table, keys: Sequence[str], order: Sequence[str]) -> pa.Table:
    """Each key's last event by `order` (ascending), as `KeyHistories.filled` then `scd1_final`
    pick it: `order` ends with the arrival index, so ties go as Python's stable sort sends them."""
    ordered = events.take(pc.sort_indices(events, sort_keys=[(c, "ascending") for c in [*keys, *order]]))
    n = ordered.num_rows
    if n == 0:
        return ordered
    last = pa.array([False] * (n - 1), pa.bool_())
    for key in keys:
        column = ordered.column(key)
        last = pc.or_(last, pc.not_equal(column.slice(0, n - 1), column.slice(1)).combine_chunks())
    return ordered.filter(pa.concat_arrays([last, pa.array([True])]))
