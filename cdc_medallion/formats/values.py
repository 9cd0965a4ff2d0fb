"""Canonical text for row-image values, and the Spark types they are cast to in gold.

Images are MAP<STRING,STRING> so that every format fits one model and "absent" stays
distinguishable from NULL. Each value is written as text that Spark's `try_cast` (or
`unbase64` for binary) turns back into the typed value without loss.
"""

from __future__ import annotations

import base64
import calendar
import datetime as dt
import decimal
import json
import math
import re
from typing import Any

from cdc_medallion.civil_time import DAY_SECONDS, INFINITIES, NANOS, civil_days, epoch_timestamp_text, fraction_text
from cdc_medallion.sqltypes import MAX_PRECISION, decimal_type, wider

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


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept; a decimal number (JSON numbers are read as `Decimal`) is
    written as the exact number it is, never through a float (which kept 17 digits of it)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except TypeError:  # a Decimal inside: the rare case, written by hand
        return _exact_json(value)


def _exact_json(value: Any) -> str:
    if isinstance(value, decimal.Decimal):
        return str(value) if value.is_finite() else json.dumps(float(value))  # NaN, Infinity: as json does
    if isinstance(value, dict):
        members = (f"{json.dumps(str(k), ensure_ascii=False)}:{_exact_json(v)}" for k, v in value.items())
        return "{" + ",".join(members) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_exact_json(v) for v in value) + "]"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def text_of(value: Any) -> str | None:
    """Canonical text of a JSON value: scalars as their literal, objects/arrays as compact JSON.

    A number is its exact value (`decimal_text`); a float's NaN and infinities are spelled the
    way Spark casts them, and -0.0 stays -0.0."""
    if type(value) is str:  # most values: skip the checks below
        return value
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return decimal_text(value)
    if isinstance(value, float):
        return float_text(value)
    return dumps(value)


# --- numbers ------------------------------------------------------------------------------------
# A Decimal written in plain notation has `-exponent` fraction digits and `adjusted() + 1`
# integer digits. PostgreSQL's numeric, the widest any source has, holds 131072 digits before the
# point and 16383 after: a literal beyond those (a double written as 1E+400) is no database's
# decimal, and is kept as written rather than spelled out in a megabyte of zeros.
_MOST_INTEGER_DIGITS, _MOST_FRACTION_DIGITS = 131_072, 16_383


def decimal_text(value: decimal.Decimal) -> str:
    """A decimal number's exact text, never in exponent form: `1E-27` is
    `0.000000000000000000000000001`, as the database prints it, and its digits are kept as given
    (`1.50` stays `1.50`: the scale is the source's). PostgreSQL's numeric NaN and infinities are
    spelled as Spark casts them."""
    if not value.is_finite():
        return "NaN" if value.is_nan() else ("Infinity" if value > 0 else "-Infinity")
    text = str(value)
    if "E" not in text:  # str() is already plain for most values, and C-fast
        return text
    exponent = value.as_tuple().exponent
    if -exponent > _MOST_FRACTION_DIGITS or value.adjusted() >= _MOST_INTEGER_DIGITS:
        return text
    return f"{value:f}"


def scaled_decimal(unscaled: int, scale: int) -> decimal.Decimal:
    """`unscaled × 10^-scale` exactly, whatever its number of digits: built from its digits, never
    through arithmetic in a context (the default one rounds to 28 significant digits). The digits
    come from `Decimal(int)`, which is exact at any size (`str(int)` refuses beyond 4300 digits,
    and PostgreSQL's numeric has 147455)."""
    sign, digits, _ = decimal.Decimal(unscaled).as_tuple()
    return decimal.Decimal((sign, digits, -scale))


def decimal_from_bytes(data: bytes, scale: int) -> decimal.Decimal:
    """Kafka Connect Decimal: big-endian two's-complement unscaled value, exact."""
    return scaled_decimal(int.from_bytes(data, "big", signed=True), scale)


def float_text(value: float) -> str:
    """A float's text that Spark casts back to the same float: NaN, Infinity, -Infinity by those
    names, -0.0 with its sign, any other the shortest text of its value (`repr`)."""
    if value != value:  # NaN
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def inferred_type(value: Any) -> str | None:
    """Spark type of a JSON value when the message carries no schema (None: no evidence).

    A whole number is a bigint, else a decimal(38,0), else text (a bigint would turn
    an Oracle NUMBER(38) into a cast failure); a number with a fraction or an exponent is a
    double: schemaless JSON cannot tell a DECIMAL from a DOUBLE, so exact decimals need their
    column typed in conf (docs/values.md)."""
    if value is None:
        return None
    if type(value) is int:
        return integer_type(value)
    exact = _INFERRED.get(type(value))  # the decoder's own types, without a chain of tests
    if exact is not None:
        return exact
    if isinstance(value, int) and not isinstance(value, bool):
        return inferred_type(int(value))
    return next((name for kind, name in _INFERRED.items() if isinstance(value, kind)), "string")


# Order matters for subclasses: a bool is also an int (whose type depends on its size: above).
_INFERRED = {bool: "boolean", decimal.Decimal: "double", float: "double", str: "string"}


def integer_type(value: int) -> str:
    """A whole number's Spark type: bigint, else decimal(38,0) (one type for every integer beyond
    a bigint that a Spark decimal holds, so that a column's type does not change from value to
    value), else text."""
    if -(2**63) <= value < 2**63:
        return "bigint"
    return decimal_type(MAX_PRECISION, 0) if abs(value) < 10**MAX_PRECISION else "string"


def widen(current: str | None, new: str | None) -> str | None:
    """The type that holds values of both (a column typed int32 in one message and int64 in the
    next is bigint, not text); text only when no type holds both."""
    if current is None or current == new:
        return new if current is None else current
    if new is None:
        return current
    return wider(current, new) or "string"


# --- times --------------------------------------------------------------------------------------
def timestamp_text(value: dt.datetime, nanos: int | None = None) -> str:
    """UTC timestamp text Spark casts exactly (microseconds kept; with `nanos`, the nanoseconds
    of the second, which replace the datetime's microseconds)."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    if nanos is None:
        return value.isoformat(sep=" ")
    return value.replace(microsecond=0).isoformat(sep=" ") + fraction_text(nanos)


def time_text(amount: int, per_second: int = 1_000_000) -> str:
    """A time of day, or a signed duration (MySQL's TIME runs from -838:59:59 to 838:59:59), from
    `amount` units (`per_second` of them a second) as the database prints it: a sign for a
    negative value, hours of two or more digits, and the fraction without trailing zeros
    (`-838:59:59`, `24:00:00`, `12:30:00.5`). Spark has no TIME type: gold keeps this text."""
    seconds, part = divmod(abs(amount), per_second)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    text = f"{'-' if amount < 0 else ''}{hour:02d}:{minute:02d}:{second:02d}"
    if part:
        text += "." + f"{part * NANOS // per_second:09d}".rstrip("0")
    return text


_ZONED = re.compile(
    r"([+-]?\d{4,})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s*"
    r"(Z|[+-]\d{2}(?::?\d{2}(?::?\d{2})?)?)?"
)


def zoned_timestamp_text(text: str) -> str:
    """An ISO-8601 timestamp with an offset (`2020-05-13T15:40:06.123456789+08:00`, `...Z`; none:
    UTC) as UTC timestamp text, its fraction of 1-9 digits kept to the nanosecond (Python's
    `fromisoformat` would cut it to microseconds), by integer arithmetic, so that a year outside
    1-9999 (`-4712-01-01T00:00:00Z`, `+294246-12-31T23:59:59.999999Z`) converts too; `infinity`
    and `-infinity` as they are (`civil_time.INFINITIES`: gold's cast gives them Spark's last and first
    instants). A ValueError for anything else."""
    if text.strip().lower() in INFINITIES:
        return text.strip().lower()
    match = _ZONED.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not an ISO-8601 timestamp: {text[:60]!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(2000 + year % 400, month)[1]):
        raise ValueError(f"not a date: {text[:60]!r}")
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"not a time of day: {text[:60]!r}")
    nanos = int((match.group(7) or "0").ljust(9, "0"))
    offset = _offset(match.group(8)).utcoffset(None)
    assert offset is not None
    seconds = civil_days(year, month, day) * DAY_SECONDS + hour * 3600 + minute * 60 + second
    return epoch_timestamp_text((seconds - int(offset.total_seconds())) * NANOS + nanos, NANOS)


def _offset(zone: str | None) -> dt.tzinfo:
    if zone in (None, "Z"):
        return dt.UTC
    digits = zone[1:].replace(":", "")
    delta = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0), seconds=int(digits[4:6] or 0))
    return dt.timezone(-delta if zone[0] == "-" else delta)


def b64decode(text: str) -> bytes:
    return base64.b64decode(text, validate=True)
