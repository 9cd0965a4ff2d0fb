"""What the JSON change formats share: reading the document, row images, names, order, events.

Canal, Maxwell, Oracle GoldenGate, SharePlex and AWS DMS all carry one JSON object per message
with row images as JSON objects; they differ in where the operation, table, images and order
live. The per-format modules say where; this module turns what they find into events, so that
every format reports tombstones, images, types and sequences the same way. (`change` and
`schema_change` build events for any format: DTS Avro uses them too.)
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cdc_medallion.formats.base import ParseError, millis_to_ts
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import inferred_type, loads, text_of
from cdc_medallion.model import KIND_CHANGE, KIND_SCHEMA_CHANGE, KIND_TOMBSTONE, OP_UPDATE

Image = dict[str, str | None]


def load_document(message: BronzeMessage) -> dict[str, Any] | None:
    """The message's JSON object; None for a null value (a Kafka tombstone). An empty message
    (an empty line or file) is not a tombstone: it carries nothing and is quarantined."""
    if message.value is None:
        return None
    if message.value.strip() == b"":
        raise ParseError("value", "empty message: expected a JSON object")
    try:
        document = loads(message.value)
    except (ValueError, UnicodeDecodeError) as error:
        raise ParseError("value", f"not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ParseError("value", f"expected a JSON object, got {type(document).__name__}")
    return document


def json_type(value: Any) -> str:
    """A value's JSON type as a reason names it: "an object", "a string", ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {dict: "an object", list: "an array", str: "a string"}.get(type(value), type(value).__name__)


def tombstone(message: BronzeMessage) -> Event:
    """A null value (a Kafka tombstone): counted, never a change (the origin projects emit no row)."""
    return {"kind": KIND_TOMBSTONE, "sequence": message.position}


def image_of(raw: Any, where: str) -> Image | None:
    """A row image (JSON object or null) as canonical text; anything else cannot be applied."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ParseError(where, f"expected a JSON object or null, got {json_type(raw)}")
    return {str(name): text_of(value) for name, value in raw.items()}


def inferred_types(*images: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, str]]:
    """Spark types of schemaless JSON values (later images win), and 'json' as the source type."""
    types: dict[str, str] = {}
    for image in images:
        for name, value in (image or {}).items():
            inferred = inferred_type(value)
            if inferred is not None:
                types[name] = inferred
    return types, dict.fromkeys(types, "json")


def text_field(value: Any, where: str) -> str | None:
    """A name or other text member: absent, null and empty are all None.

    Any other JSON type is an error naming the member: `str()` of an object or a boolean would
    name another table (or transaction, or statement) without a word."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ParseError(where, f"expected a string, got {json_type(value)}")
    return value


def id_field(value: Any, where: str) -> str | None:
    """An identifier (transaction, row, schema id) as text: a string, or a whole number as some
    writers give it; absent, null and empty are None, any other JSON type is an error."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    raise ParseError(where, f"expected a string or a whole number, got {json_type(value)} ({value!r})")


def count_field(value: Any, where: str) -> int | None:
    """A count or index (not an order key): a whole number, or digits; absent, null and empty
    are None; anything else is an error naming the member."""
    return _present_whole_number(value, where, f"expected a whole number, got {json_type(value)} ({value!r})")


def flag_field(value: Any, where: str) -> bool | None:
    """A boolean member: absent and null are None; any other JSON type is an error."""
    if value is None or isinstance(value, bool):
        return value
    raise ParseError(where, f"expected a boolean, got {json_type(value)}")


def object_field(value: Any, where: str) -> dict[str, Any] | None:
    """A JSON object member (not a row image): absent and null are None; any other type is an error."""
    if value is None or isinstance(value, dict):
        return value
    raise ParseError(where, f"expected a JSON object or null, got {json_type(value)}")


def key_names(raw: Any, where: str) -> list[str] | None:
    """A list of primary-key column names (null or empty: none given)."""
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list) or not all(isinstance(k, str) and k for k in raw):
        raise ParseError(where, f"expected a list of column names, got {raw!r}")
    return list(raw)


def split_name(qualified: Any, where: str) -> tuple[str | None, str | None, str]:
    """`table`, `schema.table` or `db.schema.table` -> (db, schema, table)."""
    if not isinstance(qualified, str) or not qualified.strip():
        raise ParseError(where, f"missing or empty table name: {qualified!r}")
    parts = qualified.strip().split(".")
    if len(parts) > 3 or not all(parts):
        raise ParseError(where, f"cannot read {qualified!r} as [db.][schema.]table")
    padded = [None] * (3 - len(parts)) + parts
    return padded[0], padded[1], parts[-1]


def whole_number(value: Any) -> int | None:
    """An integer given as a JSON number or as digits (SCNs, positions); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):  # ASCII: `isdigit` takes "²" too
        return int(value.strip())
    return None


def order_number(value: Any, where: str) -> int | None:
    """A number the format orders changes by (an scn, es, lsn, sequenceId, pos, xid, ...), read as
    its writer writes it: a JSON number or digits, leading zeros and any size included. None when
    absent (null or empty text) or when it is a writer's "none" marker, a negative number
    (DataWorks writes `-1` where it has no sequence): the format's next order field then decides,
    as for an absent one (docs/values.md).

    Anything else (a fraction, letters) is no value a writer produces, and sorted as missing it
    would place the change before every real one: an error naming the field, and the message
    goes to quarantine."""
    if value is None or value == "":
        return None
    number = _signed_whole(value)
    if number is None:
        raise ParseError(where, f"present but not a whole number ({value!r}): the change cannot be ordered")
    return number if number >= 0 else None


def time_number(value: Any, where: str) -> int | None:
    """An epoch time a message gives (milliseconds, seconds): a whole number; None when absent or
    negative, a writer's "unknown" (DataWorks' eventTime -1); anything else an error naming it."""
    number = _signed_whole(value)
    if number is not None and number < 0:
        return None
    return count_field(value, where)


def _signed_whole(value: Any) -> int | None:
    """A whole number given as a JSON number or as ASCII digits with an optional minus; else None."""
    if type(value) is int:
        return value
    if isinstance(value, str) and _SIGNED_DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    return None


_DIGITS, _SIGNED_DIGITS = re.compile(r"[0-9]+"), re.compile(r"-?[0-9]+")


def _present_whole_number(value: Any, where: str, reason: str) -> int | None:
    """A non-negative whole number (a JSON number or digits); None when absent (null or empty
    text); anything else an error naming `where` with `reason`."""
    if value is None or value == "":
        return None
    number = whole_number(value)
    if number is None or number < 0:
        raise ParseError(where, reason)
    return number


def padded(number: int | None, width: int) -> str:
    """A non-negative number as text that sorts as the number: zero-padded to `width` digits; a
    missing one sorts first, as zeros. One wider than `width` sorts after every one that fits:
    `~`, then its count of digits, then its digits (no writer's field is refused for its size)."""
    if number is None:
        return "0" * width
    digits = str(number)
    return digits.zfill(width) if len(digits) <= width else f"~{len(digits):06d}{digits}"


def sequence(message: BronzeMessage, *parts: str) -> str:
    """The format's own order, then the landing position as the last-resort tie-breaker."""
    return ":".join(parts) + "|" + message.position


def epoch_millis(value: Any) -> dt.datetime | None:
    """Epoch milliseconds -> aware UTC time; None when missing, negative or out of range."""
    try:
        return millis_to_ts(value)
    except (OverflowError, OSError, ValueError):
        return None


_TIMESTAMP = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(\.\d{1,9})?\s*(Z|[+-]\d{2}:?\d{2})?$")


def utc_timestamp(text: Any, where: str) -> dt.datetime | None:
    """`2020-05-13 15:40:06.000000`, `2017-06-16T14:24:34`, `...Z` or `...+08:00` -> aware UTC.

    Times without an offset are UTC, as every format here documents its times.
    """
    if text is None or text == "":
        return None
    match = _TIMESTAMP.match(str(text).strip())
    if not match:
        raise ParseError(where, f"cannot read {text!r} as a timestamp")
    day, clock, fraction, zone = match.groups()
    micros = (fraction or ".0")[1:7].ljust(6, "0")
    offset = "+00:00" if zone in (None, "Z") else (zone if ":" in zone else f"{zone[:3]}:{zone[3:]}")
    try:
        value = dt.datetime.fromisoformat(f"{day}T{clock}.{micros}{offset}")
    except ValueError as error:
        raise ParseError(where, f"cannot read {text!r} as a timestamp: {error}") from None
    return value.astimezone(dt.UTC)


def unknown_operation(where: str, code: Any, known: Iterable[str]) -> ParseError:
    return ParseError(where, f"unknown operation type {code!r} (expected one of {', '.join(known)})")


def change(
    op: str,
    names: tuple[str | None, str | None, str],
    before: Image | None,
    after: Image | None,
    sequence: str,
    *,
    keys: list[str] | None = None,
    types: Mapping[str, str] | None = None,
    source_types: Mapping[str, str] | None = None,
    changed: list[str] | None = None,
    flags: list[str] | None = None,
    **fields: Any,
) -> Event:
    """A row change. For an UPDATE with two full images the changed columns are their difference."""
    if changed is None and op == OP_UPDATE and before is not None and after is not None and set(before) >= set(after):
        changed = [c for c in after if before.get(c) != after.get(c)]
    db, schema, table = names
    return {
        "kind": KIND_CHANGE,
        "source_db": db,
        "source_schema": schema,
        "source_table": table,
        "op": op,
        "key_columns": keys,
        "before": before,
        "after": after,
        "changed_columns": changed,
        "present_columns": list(after) if after is not None else None,
        "column_types": dict(types) if types else None,
        "source_types": dict(source_types) if source_types else None,
        "sequence": sequence,
        "flags": flags or None,
        **fields,
    }


def schema_change(
    names: tuple[str | None, str | None, str | None], detail: str | None, sequence: str, op: str = "DDL", **fields: Any
) -> Event:
    """A DDL statement (or another change of a table's shape): the schema-change table."""
    db, schema, table = names
    return {
        "kind": KIND_SCHEMA_CHANGE,
        "op": op,
        "source_db": db,
        "source_schema": schema,
        "source_table": table or None,
        "detail": detail,
        "sequence": sequence,
        **fields,
    }
