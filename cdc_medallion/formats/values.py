"""Canonical text for row-image values, and the Spark types they are cast to in gold.

Images are MAP<STRING,STRING> so that every format fits one model and "absent" stays
distinguishable from NULL. Each value is written as text that Spark's `try_cast` (or
`unbase64` for binary) turns back into the typed value without loss.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

from cdc_medallion.sqltypes import wider

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
EPOCH_DATE = dt.date(1970, 1, 1)


_DECODER = json.JSONDecoder(parse_float=decimal.Decimal)


def loads(raw: bytes | str) -> Any:
    """Parse JSON keeping decimal numbers exact (3.140000104904175 stays that text).

    `json.loads` with an option builds a new decoder and scanner on every call, a cost of the
    order of parsing a typical payload itself; this is the same work with one decoder.
    """
    if isinstance(raw, bytes | bytearray):
        # `{` then a non-NUL byte is what `detect_encoding` answers "utf-8" for (UTF-16 and -32
        # put NULs beside it, BOMs start otherwise); it is most messages, so test it first.
        utf8 = raw[:1] == b"{" and raw[1:2] != b"\x00"
        raw = raw.decode("utf-8" if utf8 else json.detect_encoding(raw), "surrogatepass")
    elif raw.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
    return _DECODER.decode(raw)


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def text_of(value: Any) -> str | None:
    """Canonical text of a JSON value: scalars as their literal, objects/arrays as compact JSON."""
    if type(value) is str:  # most values: skip the checks below
        return value
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return dumps(value)


def inferred_type(value: Any) -> str | None:
    """Spark type of a JSON value when the message carries no schema (None: no evidence)."""
    if value is None:
        return None
    exact = _INFERRED.get(type(value))  # the decoder's own types, without a chain of tests
    if exact is not None:
        return exact
    return next((name for kind, name in _INFERRED.items() if isinstance(value, kind)), "string")


# Order matters for subclasses: a bool is also an int.
_INFERRED = {bool: "boolean", int: "bigint", decimal.Decimal: "double", float: "double", str: "string"}


def widen(current: str | None, new: str | None) -> str | None:
    """The type that holds values of both (a column typed int32 in one message and int64 in the
    next is bigint, not text); text only when no type holds both."""
    if current is None or current == new:
        return new if current is None else current
    if new is None:
        return current
    return wider(current, new) or "string"


def timestamp_text(value: dt.datetime) -> str:
    """UTC timestamp text Spark casts exactly (microseconds kept)."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(sep=" ")


def time_text(micros: int) -> str:
    """Time of day from microseconds since midnight (Spark has no TIME type here: kept as text)."""
    seconds, micro = divmod(int(micros), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    text = f"{hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{micro:06d}" if micro else text


def decimal_from_bytes(data: bytes, scale: int) -> decimal.Decimal:
    """Kafka Connect Decimal: big-endian two's-complement unscaled value."""
    unscaled = int.from_bytes(data, "big", signed=True)
    return decimal.Decimal(unscaled).scaleb(-scale)


def b64decode(text: str) -> bytes:
    return base64.b64decode(text, validate=True)
