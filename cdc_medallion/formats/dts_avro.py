"""DTS Avro (`dts-avro`): Alibaba Cloud DTS `Record`s, one binary Avro record per message.

Each message value is decoded with fastavro (`schemaless_reader`) against the official,
self-contained `Record` schema shipped beside this module as `dts_record.avsc`: the SCHEMA$ of
`com.aliyun.dts.subscribe.clients.formats.avro.Record` in aliyun/aliyun-dts-subscribe-sdk-java
(commit bcc5cf5542e3, Apache License 2.0). Records written by producers whose schema appends
`bornTimestamp` (the Python demo's .avsc) decode too: that trailing long is read and ignored.

`operation` INSERT / UPDATE / DELETE are row changes; DDL (its SQL text is `afterImages`) a
schema change; BEGIN / COMMIT / ROLLBACK transaction boundaries; HEARTBEAT a heartbeat; every
other operation (CHECKPOINT, INIT, FILL, NOOP, ...) an informational event, counted in silver.
`objectName` is `db.table` (or `db.schema.table`; just `db` for database DDL); `fields` name
the image values, in order. Image values become canonical text typed by their union branch:

| value | Spark type | text |
|---|---|---|
| Integer | bigint (decimal(38,0) beyond its range, text beyond 38 digits) | the digits |
| Character | string (binary for charset `binary`) | bytes decoded with the charset |
| Decimal | decimal(precision, scale); text without a precision or beyond 38 digits | the exact digits, no exponent |
| Float | double | the double |
| Timestamp | timestamp | seconds + fraction since the epoch, UTC |
| DateTime | timestamp, date (no time), string (time only: `[-]HH:MM:SS[.f]`), int (year only) | the parts |
| TimestampWithTimeZone | timestamp | the parts in their zone, as UTC |
| BinaryObject, BinaryGeometry (WKB) | binary | base64 |
| TextObject, TextGeometry (WKT) | string | the text |
| EmptyObject NULL / null | (none) | NULL |
| EmptyObject NONE | (none) | column absent: no value was captured |

The `millis` fields of Timestamp and DateTime hold microseconds as the official SDK reads them
(`fraction_unit` says otherwise for producers that write milliseconds). For MySQL sources a
NULL value still types its column from `dataTypeNumber` where the MySQL type is unambiguous.

Key: the `pk_uk_info` tag (`{"PRIMARY": [...]}`, else the first unique key), or conf.
Order: `sourcePosition` (`offset@file` for MySQL binlogs: file, then offset), then the record
`id` (unique and increasing in the stream), then the landing position. `sourceTxid` is the
transaction (MySQL sources write `0` there: no transaction id). `sourceTimestamp` (seconds) is
the event time.
"""

from __future__ import annotations

import base64
import codecs
import datetime as dt
import decimal
import functools
import io
import json
import re
import zoneinfo
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from cdc_medallion.formats.base import Format, FormatOptions, ParseError, register_format
from cdc_medallion.formats.json_common import change, padded, schema_change, sequence, tombstone, whole_number
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import EPOCH, decimal_text, float_text, integer_type, time_text, timestamp_text
from cdc_medallion.model import (
    KIND_HEARTBEAT,
    KIND_MESSAGE,
    KIND_TRANSACTION,
    OP_DELETE,
    OP_INSERT,
    OP_TRUNCATE,
    OP_UPDATE,
)
from cdc_medallion.sqltypes import UNCONSTRAINED_DECIMAL, decimal_type

SCHEMA_FILE = Path(__file__).with_name("dts_record.avsc")
CHANGE_OPS = {"INSERT": OP_INSERT, "UPDATE": OP_UPDATE, "DELETE": OP_DELETE}
TRANSACTION_OPS = ("BEGIN", "COMMIT", "ROLLBACK")
FRACTION_UNITS = {"micros": 1, "millis": 1000}
ABSENT = object()  # EmptyObject NONE: the column has no captured value

# MySQL column type codes (dataTypeNumber): names for source_types, and the Spark type of a
# NULL value where the type is unambiguous (the same type the non-NULL values get).
MYSQL_TYPES = {
    0: ("DECIMAL", None),
    1: ("TINY", "bigint"),
    2: ("SHORT", "bigint"),
    3: ("LONG", "bigint"),
    4: ("FLOAT", "double"),
    5: ("DOUBLE", "double"),
    6: ("NULL", None),
    7: ("TIMESTAMP", "timestamp"),
    8: ("LONGLONG", "bigint"),
    9: ("INT24", "bigint"),
    10: ("DATE", "date"),
    11: ("TIME", "string"),
    12: ("DATETIME", "timestamp"),
    13: ("YEAR", None),
    14: ("NEWDATE", "date"),
    15: ("VARCHAR", None),
    16: ("BIT", None),
    17: ("TIMESTAMP2", "timestamp"),
    18: ("DATETIME2", "timestamp"),
    19: ("TIME2", "string"),
    245: ("JSON", "string"),
    246: ("NEWDECIMAL", None),
    247: ("ENUM", "string"),
    248: ("SET", "string"),
    249: ("TINY_BLOB", None),
    250: ("MEDIUM_BLOB", None),
    251: ("LONG_BLOB", None),
    252: ("BLOB", None),
    253: ("VAR_STRING", None),
    254: ("STRING", None),
    255: ("GEOMETRY", "binary"),
}
CHARSETS = {
    "": "utf-8",
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    "al32utf8": "utf-8",
    "latin1": "latin-1",
    "we8iso8859p1": "latin-1",
    "ascii": "ascii",
    "us7ascii": "ascii",
    "zhs16gbk": "gbk",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "al16utf16": "utf-16-be",
    "utf32": "utf-32-be",
}
_OFFSET = re.compile(r"^(?:GMT|UTC)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$")


@functools.cache
def record_schema() -> Any:
    """The parsed official Record schema (parsed once per process)."""
    import fastavro

    return fastavro.parse_schema(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def decode_record(value: bytes) -> tuple[dict[str, Any], int]:
    """One Avro `Record` and the number of unexplained trailing bytes; ParseError if not one."""
    import fastavro

    stream = io.BytesIO(value)
    try:
        record = fastavro.schemaless_reader(stream, record_schema(), None, return_record_name=True)
    except Exception as error:  # fastavro raises EOFError, ValueError, IndexError, ... on bad bytes
        reason = str(error) or "the bytes end before the record does"
        raise ParseError("value", f"not a DTS Avro Record: {type(error).__name__}: {reason}") from None
    rest = value[stream.tell() :]
    if rest and _is_one_long(rest):  # a producer schema with a trailing bornTimestamp field
        rest = b""
    return record, len(rest)


def _is_one_long(data: bytes) -> bool:
    """True when `data` is exactly one Avro (zig-zag varint) long."""
    return len(data) <= 10 and all(b & 0x80 for b in data[:-1]) and not data[-1] & 0x80


class DtsAvroOptions(FormatOptions):
    fraction_unit: Literal["micros", "millis"] = Field(
        "micros",
        description="unit of the `millis` fields of Timestamp and DateTime values: micros (as the official SDK "
        "reads them) or millis",
    )


@register_format
class DtsAvro(Format):
    name = "dts-avro"
    options = DtsAvroOptions
    settings: DtsAvroOptions

    def __init__(self, source_name: str, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(source_name, options)
        self.fraction = FRACTION_UNITS[self.settings.fraction_unit]

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        if message.value is None:
            return [tombstone(message)]
        if not message.value:
            raise ParseError("value", "empty message: no DTS Avro Record")
        record, trailing = decode_record(message.value)
        operation = str(record["operation"])
        db, schema, table = _object_names(record.get("objectName"))
        record_id = record["id"] if record["id"] >= 0 else None  # a negative id: none given, as absent
        order = sequence(message, _source_position(record.get("sourcePosition")), padded(record_id, 20))
        common: dict[str, Any] = {
            "source_db": db,
            "tx_id": None if record.get("sourceTxid") in ("", "0", None) else record["sourceTxid"],
            "event_ts": _seconds_to_ts(record.get("sourceTimestamp")),
            "flags": [f"trailing_bytes:{trailing}"] if trailing else None,
        }
        if operation in CHANGE_OPS:
            if table is None:
                raise ParseError("objectName", f"{operation} needs db.table, got {record.get('objectName')!r}")
            return [self._change(record, CHANGE_OPS[operation], (db, schema, table), order, common)]
        if operation == "DDL":
            sql = next((i for i in (record.get("afterImages"), record.get("beforeImages")) if isinstance(i, str)), None)
            truncated = _truncated_table(sql, table)
            if truncated is not None:  # the Record schema has no TRUNCATE operation: DTS sends it as DDL
                return [change(OP_TRUNCATE, (db, schema, truncated), None, None, order, detail=sql, **common)]
            return [schema_change((db, schema, table), sql, order, **common)]
        kind = {"HEARTBEAT": KIND_HEARTBEAT}.get(operation, KIND_TRANSACTION if operation in TRANSACTION_OPS else None)
        event = {"kind": kind or KIND_MESSAGE, "op": operation, "source_table": table, "sequence": order, **common}
        if operation in TRANSACTION_OPS:
            event["tx_last"] = operation != "BEGIN"
        return [event]

    # --- row changes ----------------------------------------------------------------------
    def _change(
        self, record: Mapping[str, Any], op: str, names: tuple[str | None, str | None, str], order: str, common: dict
    ) -> Event:
        fields = record.get("fields")
        if not isinstance(fields, list):
            raise ParseError("fields", f"{op} without a list of fields, got {type(fields).__name__}")
        source_type = str((record.get("source") or {}).get("sourceType", ""))
        types: dict[str, str] = {}
        before = self._image(record.get("beforeImages"), fields, "beforeImages", types, source_type)
        after = self._image(record.get("afterImages"), fields, "afterImages", types, source_type)
        if op in (OP_INSERT, OP_UPDATE) and after is None:
            raise ParseError("afterImages", f"{op} without an after image")
        if op == OP_DELETE and before is None:
            raise ParseError("beforeImages", "DELETE without a before image")
        flags = list(common["flags"] or [])
        keys = _keys(record.get("tags") or {}, flags)
        if op == OP_DELETE:
            after = None
        elif op == OP_INSERT:
            before = None
        source_types = {f["name"]: _source_type_name(source_type, f["dataTypeNumber"]) for f in fields}
        return change(
            op,
            names,
            before,
            after,
            order,
            keys=keys,
            types=types,
            source_types=source_types,
            **{**common, "flags": flags},
        )

    def _image(
        self, images: Any, fields: list[Mapping[str, Any]], where: str, types: dict[str, str], source_type: str
    ) -> dict[str, str | None] | None:
        if images is None:
            return None
        if not isinstance(images, list):
            raise ParseError(where, f"expected a list of values, got {type(images).__name__}")
        if len(images) != len(fields):
            raise ParseError(where, f"{len(images)} values for {len(fields)} fields")
        image: dict[str, str | None] = {}
        for field, item in zip(fields, images, strict=True):
            column = field["name"]
            converted = self._value(item, f"{where}.{column}")
            if converted is ABSENT:
                continue
            text, spark = converted
            image[column] = text
            if spark is None and source_type == "MySQL":
                spark = MYSQL_TYPES.get(field["dataTypeNumber"], (None, None))[1]
            if spark is not None:
                types[column] = spark
        return image

    def _value(self, item: Any, where: str) -> Any:
        """(canonical text, Spark type or None) of one union value, or ABSENT."""
        if item is None:
            return None, None
        if isinstance(item, str):  # fastavro returns an enum symbol without its name at times
            item = ("EmptyObject", item)
        if not isinstance(item, tuple) or len(item) != 2:
            raise ParseError(where, f"unexpected image value {item!r}")
        branch, body = item
        kind = branch.rsplit(".", 1)[-1]
        try:
            return _CONVERTERS[kind](self, body)
        except ParseError as error:
            raise ParseError(where, error.reason) from None
        except (ValueError, TypeError, OverflowError, KeyError, LookupError, zoneinfo.ZoneInfoNotFoundError) as error:
            raise ParseError(where, f"cannot read {kind} {body!r}: {error}") from None

    # --- value converters -------------------------------------------------------------------
    def _integer(self, body: Mapping[str, Any]) -> tuple[str, str]:
        text = str(body["value"]).strip()
        number = int(text)
        return str(number), integer_type(number)

    def _character(self, body: Mapping[str, Any]) -> tuple[str, str]:
        charset = str(body.get("charset") or "").strip().lower()
        if charset == "binary":
            return base64.b64encode(body["value"]).decode("ascii"), "binary"
        codec = CHARSETS.get(charset) or codecs.lookup(charset).name
        try:
            return body["value"].decode(codec), "string"
        except UnicodeDecodeError as error:
            raise ParseError("", f"bytes are not {charset} text: {error}") from None

    def _decimal(self, body: Mapping[str, Any]) -> tuple[str, str]:
        """The value's exact digits; typed by its precision and scale, or text when the precision
        is not given (0): then any number of digits may come."""
        precision, scale = int(body["precision"]), int(body["scale"])
        text = str(body["value"]).strip()
        try:
            number = decimal.Decimal(text)
        except decimal.InvalidOperation:
            raise ParseError("", f"Decimal value {text[:40]!r} is not a number") from None
        return decimal_text(number), decimal_type(precision, scale) if precision > 0 else UNCONSTRAINED_DECIMAL

    def _float(self, body: Mapping[str, Any]) -> tuple[str | None, str]:
        return float_text(float(body["value"])), "double"

    def _timestamp(self, body: Mapping[str, Any]) -> tuple[str, str]:
        micros = int(body.get("millis") or 0) * self.fraction
        moment = EPOCH + dt.timedelta(seconds=int(body["timestamp"]), microseconds=micros)
        return timestamp_text(moment), "timestamp"

    def _datetime(self, body: Mapping[str, Any]) -> tuple[str, str]:
        year, month, day, hour = body.get("year"), body.get("month"), body.get("day"), body.get("hour")
        micros = abs(int(body.get("millis") or 0)) * self.fraction
        if hour is not None:
            minute, second = body.get("minute") or 0, body.get("second") or 0
            if year is None:  # TIME: may exceed 24 hours or be negative (MySQL: -838:59:59 to 838:59:59)
                sign = -1 if min(hour, minute, second, int(body.get("millis") or 0)) < 0 else 1
                seconds = abs(hour) * 3600 + abs(minute) * 60 + abs(second)
                return time_text(sign * (seconds * 1_000_000 + micros)), "string"
            clock = f"{abs(hour):02d}:{abs(minute):02d}:{abs(second):02d}" + (f".{micros:06d}" if micros else "")
            return f"{year:04d}-{month or 0:02d}-{day or 0:02d} {clock}", "timestamp"
        if year is not None and month is not None:
            return f"{year:04d}-{month:02d}-{day or 0:02d}", "date"
        if year is not None:
            return str(year), "int"  # YEAR
        raise ParseError("", f"DateTime without a date or a time: {dict(body)!r}")

    def _timestamp_with_zone(self, body: Mapping[str, Any]) -> tuple[str, str]:
        local = body["value"]
        micros = int(local.get("millis") or 0) * self.fraction
        moment = dt.datetime(
            local["year"],
            local["month"],
            local["day"],
            local.get("hour") or 0,
            local.get("minute") or 0,
            local.get("second") or 0,
            micros,
            tzinfo=_zone(str(body["timezone"])),
        )
        return timestamp_text(moment), "timestamp"

    def _binary(self, body: Mapping[str, Any]) -> tuple[str, str]:
        return base64.b64encode(body["value"]).decode("ascii"), "binary"

    def _text(self, body: Mapping[str, Any]) -> tuple[str, str]:
        return str(body["value"]), "string"

    def _empty(self, body: str) -> Any:
        return ABSENT if body == "NONE" else (None, None)


_CONVERTERS = {
    "Integer": DtsAvro._integer,
    "Character": DtsAvro._character,
    "Decimal": DtsAvro._decimal,
    "Float": DtsAvro._float,
    "Timestamp": DtsAvro._timestamp,
    "DateTime": DtsAvro._datetime,
    "TimestampWithTimeZone": DtsAvro._timestamp_with_zone,
    "BinaryGeometry": DtsAvro._binary,
    "BinaryObject": DtsAvro._binary,
    "TextGeometry": DtsAvro._text,
    "TextObject": DtsAvro._text,
    "EmptyObject": DtsAvro._empty,
}


# --- helpers ----------------------------------------------------------------------------------
def _object_names(name: Any) -> tuple[str | None, str | None, str | None]:
    """`db`, `db.table` or `db.schema.table`."""
    if not name:
        return None, None, None
    parts = str(name).split(".")
    if len(parts) > 3 or not all(parts):
        raise ParseError("objectName", f"cannot read {name!r} as db[.schema].table")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return parts[0], None, parts[1] if len(parts) == 2 else None


def _source_position(position: Any) -> str:
    """`offset@file` (MySQL binlog) -> file then offset, fixed width; digits (SCN, LSN) padded."""
    text = str(position or "").strip()
    offset, at, file = text.partition("@")
    if at and whole_number(offset) is not None and whole_number(file) is not None:
        return f"{padded(int(file), 10)}:{padded(int(offset), 20)}"
    if whole_number(text) is not None:
        return padded(int(text), 31)
    return ""


def _seconds_to_ts(value: Any) -> dt.datetime | None:
    if not isinstance(value, int) or value <= 0:
        return None
    try:
        return EPOCH + (dt.timedelta(milliseconds=value) if value > 10**11 else dt.timedelta(seconds=value))
    except OverflowError:
        return None


def _keys(tags: Mapping[str, str], flags: list[str]) -> list[str] | None:
    """`pk_uk_info` = `{"PRIMARY": ["id"], "uk_name": [...]}`: the primary key, else the first unique key."""
    info = tags.get("pk_uk_info")
    if not info:
        return None
    try:
        indexes = json.loads(info)
    except ValueError:
        indexes = None
    if not isinstance(indexes, dict):
        flags.append("pk_uk_info_unreadable")
        return None
    chosen = indexes.get("PRIMARY") or next((v for v in indexes.values() if v), None)
    if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
        flags.append("pk_uk_info_unreadable")
        return None
    return chosen or None


def _source_type_name(source_type: str, number: int) -> str:
    if source_type == "MySQL" and number in MYSQL_TYPES:
        return f"{MYSQL_TYPES[number][0]}({number})"
    return f"{source_type or 'dataTypeNumber'}({number})"


def _zone(name: str) -> dt.tzinfo:
    """`+08:00`, `GMT+8`, `UTC`, `Asia/Shanghai` -> tzinfo."""
    text = name.strip()
    if text.upper() in ("Z", "UTC", "GMT", ""):
        return dt.UTC
    offset = _OFFSET.match(text.upper())
    if offset:
        sign, hours, minutes = offset.groups()
        delta = dt.timedelta(hours=int(hours), minutes=int(minutes or 0))
        return dt.timezone(-delta if sign == "-" else delta)
    return zoneinfo.ZoneInfo(text)


_TRUNCATE = re.compile(r"^\s*TRUNCATE\s+(?:TABLE\s+)?([`\"\w$#.]+)", re.IGNORECASE)


def _truncated_table(sql: str | None, table: str | None) -> str | None:
    """The table a `TRUNCATE [TABLE] name` statement empties (None: not a truncate)."""
    match = _TRUNCATE.match(sql or "")
    if match is None:
        return None
    return table or match.group(1).replace("`", "").replace('"', "").split(".")[-1]
