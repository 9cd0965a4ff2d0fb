"""Kafka-dump lines unpacked into bronze's Kafka columns.

A kafka-dump line is one JSON object with topic/partition/offset/timestamp/key/value, or
value_base64/key_base64/headers. `unpack_line` is the definition: what one line lands as,
including why a line that cannot be unpacked lands with a `_landing_error` instead of a value.

Unpacking line by line in Python would be most of bronze's time on a Debezium dump (json.loads
of a record whose value is a whole escaped message). `unpack_block` hands a block of plain
records (the six fields above, of their JSON types, nothing else) to Arrow's JSON reader, which
unpacks them in C++ on every core, and unpacks in Python only the lines Arrow cannot take
exactly as `unpack_line` would: a block Arrow rejects (any line with another field, another
type, invalid JSON or invalid UTF-8), and lines whose meaning a null hides (a null topic against
a missing one; a null value, unless the line spells the tombstone's `"value":null`, as a missing
value is an error) or whose number is out of its column's range. The block's lines are given as
bounds (`cdc_medallion.lines.Lines`), so a block Arrow takes makes no Python object per line.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from cdc_medallion.lines import Lines

KAFKA_COLUMNS = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("_landing_error", pa.string()),
    ]
)
PLAIN_RECORD = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int64()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.string()),
        ("value", pa.string()),
    ]
)
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
# Milliseconds are added to the epoch exactly: as float seconds, 11297412716932 ms (in 2328)
# landed as .931999 s.
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_LAST_MILLISECOND = 253_402_300_799_999  # 9999-12-31 23:59:59.999 UTC, the last a timestamp holds
# A tombstone: in a plain record these bytes can only be the value field's own (inside a string
# each quote would be escaped, and a key ending in `value` would be a field Arrow rejected).
_NULL_VALUE = b'"value":null'


def unpack_line(raw: bytes, topic: str | None) -> dict[str, Any]:
    """One line's Kafka columns; `topic` stands in for a record without one."""
    row: dict[str, Any] = {name: None for name in KAFKA_COLUMNS.names}
    row["topic"] = topic
    try:
        # Strict UTF-8 (json.loads would let encoded surrogates through), and no lone surrogate
        # escaped in a text field: Arrow and Delta hold UTF-8 only.
        record = json.loads(raw.decode("utf-8"))
        if not isinstance(record, dict):
            raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        if "value" not in record and "value_base64" not in record:
            keys = ", ".join(sorted(record)[:8]) or "none"
            raise ValueError(f"not a Kafka record: no 'value' or 'value_base64' (keys: {keys})")
        timestamp = record.get("timestamp")
        if isinstance(record.get("topic"), str):
            _utf8(record["topic"])
        row.update(
            key=_bytes(record, "key"),
            value=_bytes(record, "value"),
            topic=record.get("topic", topic),
            partition=_int_or_none(record.get("partition"), "partition", _INT32),
            offset=_int_or_none(record.get("offset"), "offset", _INT64),
            timestamp=None if timestamp is None else _EPOCH + dt.timedelta(milliseconds=int(timestamp)),
            headers=_headers(record.get("headers")),
        )
    except (ValueError, TypeError, OverflowError, binascii.Error) as error:
        # `row.update` above had not run (its arguments failed), so only the raw line goes in.
        row.update(value=raw, _landing_error=f"kafka-dump line cannot be unpacked: {error}")
    return row


def unpack_block(block: bytes, lines: Lines, topic: str | None) -> pa.Table:
    """The Kafka columns of the `lines` of `block`."""
    plain = _plain_records(block, lines)
    if plain is None:
        return _unpacked(block, lines, range(len(lines)), topic)
    stamps = plain.column("timestamp")
    unclear = pc.fill_null(
        pc.or_kleene(
            pc.or_kleene(pc.is_null(plain.column("topic")), _outside(plain.column("partition"), _INT32)),
            _outside(stamps, (0, _LAST_MILLISECOND)),
        ),
        False,
    )
    table = pa.Table.from_arrays(
        [
            plain.column("key").cast(pa.binary()),
            plain.column("value").cast(pa.binary()),
            plain.column("topic"),
            pc.if_else(unclear, None, plain.column("partition")).cast(pa.int32()),
            plain.column("offset"),
            pc.if_else(unclear, None, pc.multiply(stamps, 1000)).cast(KAFKA_COLUMNS.field("timestamp").type),
            pa.nulls(len(lines), KAFKA_COLUMNS.field("headers").type),
            pa.nulls(len(lines), pa.string()),
        ],
        schema=KAFKA_COLUMNS,
    )
    tombstones = _where(pc.is_null(plain.column("value")))
    spelled = {i for i in tombstones if _NULL_VALUE in lines.line(block, i)}
    positions = sorted(set(_where(unclear)) | (set(tombstones) - spelled))
    if not positions:
        return table
    redone = _unpacked(block, lines, positions, topic)
    order = np.arange(len(lines))
    order[positions] = len(lines) + np.arange(len(positions))
    return pa.concat_tables([table, redone]).take(order)


def _unpacked(block: bytes, lines: Lines, positions: range | list[int], topic: str | None) -> pa.Table:
    """The lines at `positions` unpacked one by one, as `unpack_line` defines."""
    return pa.Table.from_pylist([unpack_line(lines.line(block, i), topic) for i in positions], schema=KAFKA_COLUMNS)


def _plain_records(block: bytes, lines: Lines) -> pa.Table | None:
    """Every line of `block` read by Arrow as a plain record, or None if any line is not one.

    Arrow skips blank lines and reads two objects on a line as two rows, so its rows are the
    lines only when each line starts an object and the counts agree.
    """
    if not len(lines) or not (lines.ends > lines.starts).all():
        return None
    if not (np.frombuffer(block, np.uint8)[lines.starts] == ord("{")).all():
        return None
    options = pa_json.ParseOptions(explicit_schema=PLAIN_RECORD, unexpected_field_behavior="error")
    buffer = pa.py_buffer(block)
    if not _is_utf8(buffer):  # Arrow's JSON reader lets encoded surrogates through; the line reader does not
        return None
    try:
        plain = pa_json.read_json(pa.BufferReader(buffer), parse_options=options)
    except pa.ArrowException:
        return None
    return plain if plain.num_rows == len(lines) else None


def _is_utf8(buffer: pa.Buffer) -> bool:
    """Whether `buffer` is strict UTF-8, as Python's decoder takes it (no encoded surrogate, no
    overlong form), checked by Arrow's cast to text: no decoded copy of a block."""
    offsets = pa.py_buffer(np.array([0, buffer.size], np.int64))
    try:
        pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, buffer]).cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


def _where(mask: pa.ChunkedArray) -> list[int]:
    return np.flatnonzero(mask.to_numpy(zero_copy_only=False)).tolist()


def _outside(values: pa.ChunkedArray, bounds: tuple[int, int]) -> pa.ChunkedArray:
    return pc.or_kleene(pc.less(values, bounds[0]), pc.greater(values, bounds[1]))


def _bytes(record: dict[str, Any], name: str) -> bytes | None:
    """A key or value: base64 if given so, a string's UTF-8, or an inline JSON value's text."""
    encoded = record.get(f"{name}_base64")
    if encoded is not None:
        return base64.b64decode(encoded, validate=True)
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _int_or_none(value: Any, name: str, bounds: tuple[int, int]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name} {value} is out of range")
    return value


def _headers(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        if not all(isinstance(header, dict) for header in value):
            raise ValueError("headers given as an array must hold objects with a key and a value")
        items = [(header.get("key"), header.get("value")) for header in value]
    else:
        raise ValueError(f"headers must be an object or an array, got {type(value).__name__}")
    return [
        {
            "key": _utf8(str(k)),
            "value": None if v is None else (v if isinstance(v, str) else json.dumps(v)).encode("utf-8"),
        }
        for k, v in items
    ]


def _utf8(text: str) -> str:
    """`text`, refused (UnicodeEncodeError, a ValueError) if it holds a lone surrogate."""
    text.encode("utf-8")
    return text
