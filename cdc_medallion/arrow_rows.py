"""Rows of an Arrow table as Spark's `collect()` gives them, whichever engine read the table.

`show`, `status` and the report read tables through delta-rs (`storage/delta_rs.py`) or through
Spark's `toArrow()`; both give Arrow, and what they print must not depend on which. A module of
its own, beside neither engine: the runner names a failing row with it too, in code that runs
on Databricks' serverless compute, where nothing of the local storage may be imported
(tests/test_spark_connect.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import types as t

from cdc_medallion.civil_time import DAY_SECONDS, EPOCH, civil_days, python_date, spark_timestamp_text


def python_rows(table: pa.Table | pa.RecordBatch) -> list[dict[str, Any]]:
    """The rows as Spark's `collect()` and `Row.asDict(recursive=True)` give them, so that what
    a command prints does not depend on which engine read the table: a map is a dict, a
    timestamp (an instant) a naive datetime in this machine's local time (`local_time`).

    Gold holds what Spark's DATE and TIMESTAMP hold, years outside 1-9999 too (a BC date,
    PostgreSQL's `infinity`), where pyarrow's conversion and Spark's own `collect()` fail: a
    column holding one is read from its integers, and such a value is its text as Spark's cast
    spells it (`_moments`)."""
    names = table.schema.names
    columns = [_python_values(field.type, column) for field, column in zip(table.schema, table.columns, strict=True)]
    if not columns:
        return [{} for _ in range(table.num_rows)]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def _python_values(kind: pa.DataType, column: pa.Array | pa.ChunkedArray) -> list[Any]:
    if (t.is_date32(kind) or t.is_timestamp(kind)) and not _within_python(kind, column):
        return _moments(kind, column)
    convert = _to_python(kind)
    return [convert(value) for value in column.to_pylist()]


#: Days and microseconds since the epoch of 0001-01-01 and 9999-12-31 23:59:59.999999 (UTC).
_PYTHON_DAYS = (civil_days(1, 1, 1), civil_days(9999, 12, 31))
_PYTHON_MICROS = (_PYTHON_DAYS[0] * DAY_SECONDS * 10**6, (_PYTHON_DAYS[1] + 1) * DAY_SECONDS * 10**6 - 1)
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _within_python(kind: pa.DataType, column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether every value of a DATE or TIMESTAMP column lies in years 1-9999 (in UTC)."""
    if t.is_date32(kind):
        low, high = _PYTHON_DAYS
        extremes = pc.min_max(column.cast(pa.int32()))
    else:
        low, high = (bound * _PER_SECOND[kind.unit] // 10**6 for bound in _PYTHON_MICROS)
        extremes = pc.min_max(column.cast(pa.int64()))
    least, most = extremes["min"].as_py(), extremes["max"].as_py()
    return least is None or (low <= least and most <= high)


def _moments(kind: pa.DataType, column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A DATE or TIMESTAMP column from its integers: `date`s and datetimes in years 1-9999 (an
    instant in local time, as `local_time`), the others as text (`civil_time`): a date as
    `+10000-01-01`, a TIMESTAMP_NTZ as `+294247-01-10 04:00:25.2`, an instant in UTC with
    `+00:00`."""
    if t.is_date32(kind):
        return [None if days is None else python_date(days) for days in column.cast(pa.int32()).to_pylist()]
    per_second, zoned = _PER_SECOND[kind.unit], kind.tz is not None
    values: list[Any] = []
    for amount in column.cast(pa.int64()).to_pylist():
        if amount is None:
            values.append(None)
            continue
        micros = amount * 10**6 // per_second
        try:
            moment = EPOCH + dt.timedelta(microseconds=micros)
        except OverflowError:
            text = spark_timestamp_text(micros)
            values.append(f"{text}+00:00" if zoned else text)
            continue
        values.append(local_time(moment) if zoned else moment.replace(tzinfo=None))
    return values


def local_time(instant: dt.datetime) -> dt.datetime:
    """An instant as Spark's `collect()` gives a TIMESTAMP: a naive datetime in local time. One
    whose local time lies outside years 1-9999, which Python's datetime does not hold (9999-12-31
    23:59 UTC east of Greenwich, 0001-01-01 00:00 UTC west of it), stays the instant, with its
    UTC offset: Spark's own `collect()` fails there (its `fromtimestamp` even on the first day
    of year 1 in UTC)."""
    try:
        return instant.astimezone().replace(tzinfo=None)
    except (OverflowError, ValueError):
        return instant.astimezone(dt.UTC)


def _to_python(kind: pa.DataType) -> Callable[[Any], Any]:
    if t.is_timestamp(kind) and kind.tz is not None:
        return lambda v: None if v is None else local_time(v)
    if t.is_map(kind):
        key, item = _to_python(kind.key_type), _to_python(kind.item_type)
        return lambda v: None if v is None else {key(k): item(x) for k, x in v}
    if t.is_list(kind) or t.is_large_list(kind) or t.is_list_view(kind) or t.is_fixed_size_list(kind):
        element = _to_python(kind.value_type)
        return lambda v: None if v is None else [element(x) for x in v]
    if t.is_struct(kind):
        fields = {f.name: _to_python(f.type) for f in kind}
        return lambda v: None if v is None else {n: fields[n](x) for n, x in v.items()}
    return lambda v: v
