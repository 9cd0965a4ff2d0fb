"""The rebuild of `auto_cdc.py`, for a small batch, in the driver with Arrow and NumPy.

On two cores a Spark job costs a tenth of a second to a second however few rows it holds, and
the Spark rebuild is a dozen jobs a flow: a 10k-change batch spent 2-3 s a flow there and about
two thirds of a whole run in gold (bench, 20k changes). Here the batch's events are collected
once, the rows the target and state hold for its keys are read by delta-rs, and each key's
history is rebuilt by comparing each event with its neighbour in (key, sequence, origin,
arrival) order: one sort, then vector operations. Absent columns are filled forward, SCD1's
row is each key's last event, SCD2's versions start where a tracked value changes or the key
comes back after a delete. The result is exactly what the Spark rebuild hands to the MERGE
(SCD1's final rows, SCD2's changed versions), so both paths share the writes.

A Python loop over every event did this before: on the bench's 1M changes it spent 7 s
turning rows into Python lists and 22 s of its 44 s in SCD2's loop.

The rules are the Spark path's, event for event; `tests/test_auto_cdc_driver.py` applies
random batches through both and compares the tables. Values are compared as Spark compares
them (NULL equals NULL, NaN equals NaN); nested values, which Arrow cannot compare, are
compared in Python. Where Arrow would order or group values differently than Spark
(floating-point keys or sequences, nested sequences) or a key is NULL, the batch is left to
Spark.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_medallion.runner.event_columns import ACTION, ARRIVAL, DELETE, END_AT, OLD_END, ORIGIN, PRESENT, SEQ, START_AT

SINCE = "__since"  # a key's earliest new sequence (`open_since`)
_ROW = "__row"  # a row number carried through an Arrow join

# Sequence types Arrow orders exactly as Spark does (strings: UTF-8 byte order).
_ORDERED = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_integer,
    pa.types.is_timestamp,
    pa.types.is_date,
    pa.types.is_decimal,
    pa.types.is_binary,
)


def orderable(data_type: pa.DataType) -> bool:
    return any(test(data_type) for test in _ORDERED)


def groupable(data_type: pa.DataType) -> bool:
    """A key type whose Arrow equality matches Spark's grouping."""
    return not (pa.types.is_floating(data_type) or pa.types.is_nested(data_type))


def key_filter(batch_keys: pa.Table, keys: Sequence[str]) -> pc.Expression:
    """Each key column among the batch's values: exact for one key, a superset for several."""
    expression = pc.scalar(True)
    for name in keys:
        expression = expression & pc.field(name).isin(pc.unique(batch_keys.column(name)))
    return expression


def with_keys_among(table: pa.Table, keys: Sequence[str], wanted: pa.Table) -> pa.Table:
    """`table`'s rows whose key is one of `wanted`'s rows."""
    wanted_keys = wanted.select(list(keys)).cast(_key_schema(table, keys))
    matched = _numbered(table, keys).join(wanted_keys, list(keys), join_type="left semi")
    return _rows_in_order(table, matched.column(_ROW))


def open_since(versions: pa.Table, keys: Sequence[str], since: pa.Table) -> pa.Table:
    """The stored versions of `since`'s keys that had not ended before the key's earliest new
    event (`since`: keys and SINCE). Earlier ones cannot change: every new event falls after
    them, and what a new event takes from its key's past (absent columns, whether it comes back
    after a delete) it takes from the version it falls in or the delete before it, which this
    keeps. Reading only these, a batch costs what its keys' recent history holds, not all of
    it: a key updated in every batch gains a version a batch."""
    since = since.select([*keys, SINCE]).cast(
        pa.schema([*_key_schema(versions, keys), pa.field(SINCE, versions.schema.field(END_AT).type)])
    )
    joined = _numbered(versions, keys, END_AT).join(since, list(keys), join_type="inner")
    ends = joined.column(END_AT)
    still_open = pc.or_kleene(pc.is_null(ends), pc.greater_equal(ends, joined.column(SINCE)))
    return _rows_in_order(versions, joined.column(_ROW).filter(pc.fill_null(still_open, True)))


def _numbered(table: pa.Table, keys: Sequence[str], *carried: str) -> pa.Table:
    """`table`'s keys, a row number and the `carried` columns: all a join needs, since Arrow's
    joins refuse nested columns (lists, structs, maps) beside the keys."""
    columns = {name: table.column(name) for name in [*keys, *carried]}
    return pa.table({**columns, _ROW: pa.array(range(table.num_rows), pa.int64())})


def _rows_in_order(table: pa.Table, numbers: pa.ChunkedArray) -> pa.Table:
    """The numbered rows of `table`, in `table`'s order (a join's output is in no order)."""
    return table.take(numbers.take(pc.sort_indices(numbers)))


def _key_schema(table: pa.Table, keys: Sequence[str]) -> pa.Schema:
    return pa.schema([table.schema.field(k) for k in keys])


def in_history_order(events: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Each key's events by sequence, then origin, then arrival (the Spark rebuild's window order,
    its ties broken as the events were added)."""
    order = [*keys, SEQ, ORIGIN, ARRIVAL]
    return events.take(pc.sort_indices(events, sort_keys=[(c, "ascending") for c in order]))


def fill_absent(ordered: pa.Table, keys: Sequence[str], columns: Sequence[str]) -> pa.Table:
    """Columns absent from an event's image (not in its PRESENT list) take the value of the key's
    latest earlier event that carried them, within the key's life since its last delete: the
    Spark rebuild's `_fill`, as a forward fill over `in_history_order`."""
    present = ordered.column(PRESENT).combine_chunks()
    n = ordered.num_rows
    if present.null_count == n:
        return ordered
    deleted = _numpy(ordered.column(DELETE))
    starts_life = _differs_from_previous(ordered, keys) | np.append(True, deleted[:-1])
    life_start = np.maximum.accumulate(np.where(starts_life, np.arange(n), 0))
    whole = _numpy(present.is_null())
    names = pc.list_flatten(present)
    owners = _numpy(pc.list_parent_indices(present))
    for name in columns:
        if name in keys:
            continue
        carries = whole.copy()
        carries[owners[_numpy(pc.equal(names, name))]] = True
        if carries.all():
            continue
        source = np.maximum.accumulate(np.where(carries, np.arange(n), -1))
        found = source >= life_start
        value = ordered.column(name).take(pa.array(np.where(found, source, 0), mask=~found))
        ordered = ordered.set_column(ordered.schema.get_field_index(name), name, value)
    return ordered


def last_per_key(ordered: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Each key's last event (`ordered` is `in_history_order`): its SCD1 row."""
    if ordered.num_rows == 0:
        return ordered
    last = np.append(_differs_from_previous(ordered, keys)[1:], True)
    return ordered.filter(pa.array(last))


def ended_by_delete(stored: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The keys and ends of stored versions whose end is not another version's start of the
    same key: a delete ended them, and it becomes an event again (`_existing_events`)."""
    ends = stored.filter(pc.is_valid(stored.column(END_AT)))
    marks = pa.concat_tables(
        [
            _keyed(stored, keys, START_AT, is_start=True),
            _keyed(ends, keys, END_AT, is_start=False),
        ]
    )
    marks = marks.take(pc.sort_indices(marks, sort_keys=[(c, "ascending") for c in [*keys, SEQ]]))
    is_start = _numpy(marks.column("is_start"))
    run = np.cumsum(_differs_from_previous(marks, [*keys, SEQ])) - 1
    some_start = np.bincount(run, weights=is_start, minlength=run[-1] + 1 if len(run) else 0) > 0
    return marks.filter(pa.array(~is_start & ~some_start[run])).select([*keys, SEQ])


def scd2_versions(ordered: pa.Table, keys: Sequence[str], columns: Sequence[str], tracked: Sequence[str]) -> pa.Table:
    """The versions to upsert and to delete (columns, start, end, action), as `_write_scd2`.

    `ordered` is `in_history_order`: the new events, the stored versions (origin 0, with their
    end in OLD_END), the deletes that ended them, and the table's truncates for each key.
    """
    n = ordered.num_rows
    seq, old_end = ordered.column(SEQ).combine_chunks(), ordered.column(OLD_END).combine_chunks()
    if n == 0:
        return _versions(ordered, columns, np.array([], np.int64), seq, "upsert", old_end)
    first_of_key = _differs_from_previous(ordered, keys)
    key_id = np.cumsum(first_of_key)
    deleted = _numpy(ordered.column(DELETE))
    after_delete = np.append(True, deleted[:-1])
    changed = _differs_from_previous(ordered, tracked) if tracked else np.zeros(n, bool)
    starts = ~deleted & (first_of_key | after_delete | changed)
    # Each event's next boundary (a start or a delete) within its key: the end of its version.
    boundary = np.where(deleted | starts, np.arange(n), n)
    following = np.append(np.minimum.accumulate(boundary[::-1])[::-1][1:], n)
    within_key = following < n
    within_key[within_key] = key_id[following[within_key]] == key_id[within_key]
    end_of = seq.take(pa.array(np.where(within_key, following, 0), mask=~within_key))
    # A version is a start and the non-delete events up to the next start; its row is its last.
    # A key's first non-delete event always starts one, so every non-delete event is in one.
    members = np.flatnonzero(~deleted)
    version = np.cumsum(starts)[members]
    first = np.flatnonzero(starts)
    closes = np.ones(len(members), bool)  # the last member of its version
    closes[:-1] = version[1:] != version[:-1]
    last = members[closes]
    ends = _at(end_of, last)
    # A stored version that stays as it was (same row, same end) is not rewritten.
    stored = _numpy(ordered.column(ORIGIN)) == 0
    from_store = np.flatnonzero(stored[first])
    unchanged = np.zeros(len(first), bool)
    if len(from_store):
        was, now = first[from_store], last[from_store]
        same_row = _same_rows(ordered.take(pa.array(now)), ordered.take(pa.array(was)), columns)
        unchanged[from_store] = same_row & _same(_at(ends, from_store), _at(old_end, was))
    keep = np.flatnonzero(~unchanged)
    upserts = _versions(ordered, columns, last[keep], _at(seq, first[keep]), "upsert", _at(ends, keep))
    # A stored version no version starts at any more (same key, same sequence) is deleted.
    run = np.cumsum(first_of_key | _differs_from_previous(ordered, [SEQ])) - 1
    some_start = np.bincount(run, weights=starts, minlength=run[-1] + 1) > 0
    vanished = np.flatnonzero(stored & ~deleted & ~some_start[run])
    deletes = _versions(ordered, columns, vanished, _at(seq, vanished), "delete", _at(old_end, vanished))
    return pa.concat_tables([upserts, deletes])


def _versions(
    ordered: pa.Table, columns: Sequence[str], rows: np.ndarray, start: pa.Array, action: str, end: pa.Array
) -> pa.Table:
    return (
        ordered.take(pa.array(rows, pa.int64()))
        .select(list(columns))
        .append_column(START_AT, start)
        .append_column(END_AT, end)
        .append_column(ACTION, pa.repeat(pa.scalar(action), len(rows)))
    )


def _at(array: pa.Array, indices: np.ndarray) -> pa.Array:
    return array.take(pa.array(indices, pa.int64()))


def _keyed(table: pa.Table, keys: Sequence[str], sequence: str, *, is_start: bool) -> pa.Table:
    return pa.table(
        {
            **{k: table.column(k) for k in keys},
            SEQ: table.column(sequence),
            "is_start": pa.repeat(is_start, table.num_rows),
        }
    )


def _differs_from_previous(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Per row: whether any of `columns` differs from the row before (the first row differs)."""
    n = table.num_rows
    differs = np.zeros(n, bool)
    if n:
        differs[0] = True
    for name in columns:
        column = table.column(name)
        differs[1:] |= ~_same(column.slice(1), column.slice(0, n - 1))
    return differs


def _same_rows(left: pa.Table, right: pa.Table, columns: Sequence[str]) -> np.ndarray:
    same = np.ones(left.num_rows, bool)
    for name in columns:
        same &= _same(left.column(name), right.column(name))
    return same


def _same(left: pa.Array | pa.ChunkedArray, right: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Equal as Spark's `<=>` sees it: NULL equals NULL, NaN equals NaN."""
    data_type = left.type
    if pa.types.is_null(data_type):
        return np.ones(len(left), bool)
    if pa.types.is_nested(data_type):  # Arrow cannot compare these: Python does (NaN within unequal)
        return np.array([a == b for a, b in zip(left.to_pylist(), right.to_pylist(), strict=True)], bool)
    equal = pc.fill_null(pc.equal(left, right), False)
    if pa.types.is_floating(data_type):
        equal = pc.or_(equal, pc.fill_null(pc.and_(pc.is_nan(left), pc.is_nan(right)), False))
    both_null = pc.and_(pc.is_null(left), pc.is_null(right))
    return _numpy(pc.or_(equal, both_null))


def _numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return array.to_numpy(zero_copy_only=False)
