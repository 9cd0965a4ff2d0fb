"""Builds DTS Avro test data: `Record`s written with fastavro against the schema the package ships.

Values use fastavro's union tuple notation (`(full name, body)`), so each is written as exactly
the branch named, the way DTS writes them. `kafka_dump` wraps encoded records as the Kafka-dump
JSON lines bronze lands (`value_base64`).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

import fastavro

from cdc_medallion.formats.dts_avro import record_schema

NS = "com.alibaba.dts.formats.avro."


def _branch(name: str, body: Any) -> tuple[str, Any]:
    return (NS + name, body)


def integer(value: int, precision: int = 8) -> tuple[str, Any]:
    return _branch("Integer", {"precision": precision, "value": str(value)})


def character(text: str, charset: str = "utf8mb4") -> tuple[str, Any]:
    codec = {"utf8mb4": "utf-8", "latin1": "latin-1", "gbk": "gbk"}.get(charset, "utf-8")
    return _branch("Character", {"charset": charset, "value": text.encode(codec)})


def raw_character(data: bytes, charset: str) -> tuple[str, Any]:
    return _branch("Character", {"charset": charset, "value": data})


def decimal(value: str, precision: int, scale: int) -> tuple[str, Any]:
    return _branch("Decimal", {"value": value, "precision": precision, "scale": scale})


def floating(value: float, precision: int = 22, scale: int = 31) -> tuple[str, Any]:
    return _branch("Float", {"value": value, "precision": precision, "scale": scale})


def timestamp(seconds: int, micros: int = 0) -> tuple[str, Any]:
    return _branch("Timestamp", {"timestamp": seconds, "millis": micros})


def datetime(**parts: int | None) -> tuple[str, Any]:
    """DateTime parts: year, month, day, hour, minute, second, millis (absent parts are null)."""
    names = ("year", "month", "day", "hour", "minute", "second", "millis")
    return _branch("DateTime", {n: parts.get(n) for n in names})


def timestamp_with_zone(timezone: str, **parts: int | None) -> tuple[str, Any]:
    return _branch("TimestampWithTimeZone", {"value": datetime(**parts)[1], "timezone": timezone})


def binary_object(data: bytes, kind: str = "BLOB") -> tuple[str, Any]:
    return _branch("BinaryObject", {"type": kind, "value": data})


def text_object(text: str, kind: str = "JSON") -> tuple[str, Any]:
    return _branch("TextObject", {"type": kind, "value": text})


def binary_geometry(wkb: bytes, kind: str = "POINT") -> tuple[str, Any]:
    return _branch("BinaryGeometry", {"type": kind, "value": wkb})


def text_geometry(wkt: str, kind: str = "POINT") -> tuple[str, Any]:
    return _branch("TextGeometry", {"type": kind, "value": wkt})


def empty(symbol: str = "NULL") -> str:
    """An EmptyObject symbol (written plain: fastavro's tuple notation is for records)."""
    return symbol


def record(
    operation: str,
    object_name: str | None,
    *,
    record_id: int,
    position: str,
    fields: Sequence[tuple[str, int]] | None = None,
    before: Sequence[Any] | str | None = None,
    after: Sequence[Any] | str | None = None,
    keys: Sequence[str] | None = ("id",),
    timestamp_s: int = 1_700_000_000,
    txid: str = "0",
    source_type: str = "MySQL",
    tags: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One Record. `fields` are (name, dataTypeNumber); images are lists aligned with them."""
    all_tags = {"readerThroughoutTime": str(timestamp_s * 1000), **(tags or {})}
    if keys:
        all_tags["pk_uk_info"] = json.dumps({"PRIMARY": list(keys)})
    return {
        "version": 0,
        "id": record_id,
        "sourceTimestamp": timestamp_s,
        "sourcePosition": position,
        "safeSourcePosition": position,
        "sourceTxid": txid,
        "source": {"sourceType": source_type, "version": "8.0.28"},
        "operation": operation,
        "objectName": object_name,
        "processTimestamps": None,
        "tags": all_tags,
        "fields": None if fields is None else [{"name": n, "dataTypeNumber": t} for n, t in fields],
        "beforeImages": None if before is None else (before if isinstance(before, str) else list(before)),
        "afterImages": None if after is None else (after if isinstance(after, str) else list(after)),
    }


def encode(value: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, record_schema(), value)
    return buffer.getvalue()


def kafka_dump(values: Iterable[bytes], topic: str, partition: int = 0, first_offset: int = 0) -> str:
    """Kafka-dump JSON lines (one per message, value as base64), as bronze lands them."""
    lines = []
    for offset, value in enumerate(values, start=first_offset):
        line = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "timestamp": 1_700_000_000_000 + offset,
            "key": None,
            "value_base64": base64.b64encode(value).decode("ascii"),
        }
        lines.append(json.dumps(line, separators=(",", ":")))
    return "\n".join(lines) + "\n"


# --- a table with one column of every value type ----------------------------------------------
ALL_TYPES_FIELDS = [
    ("id", 8),
    ("small", 2),
    ("name", 253),
    ("latin", 254),
    ("raw", 254),
    ("price", 246),
    ("ratio", 5),
    ("created", 17),
    ("updated", 18),
    ("birthday", 10),
    ("alarm", 19),
    ("vintage", 13),
    ("zoned", 12),
    ("photo", 252),
    ("doc", 245),
    ("place", 255),
    ("shape", 255),
    ("note", 253),
    ("nothing", 253),
]


def all_types_row(row_id: int, name: str = "Zoë", note: Any = None) -> list[Any]:
    """One value of every union branch, aligned with ALL_TYPES_FIELDS."""
    return [
        integer(row_id),
        integer(-7, precision=2),
        character(name),
        character("café", "latin1"),
        raw_character(b"\x00\xffab", "binary"),
        decimal("12345.67", 10, 2),
        floating(0.1),
        timestamp(1_700_000_000, 123456),
        datetime(year=2024, month=2, day=29, hour=13, minute=45, second=30, millis=250000),
        datetime(year=1990, month=7, day=14),
        datetime(hour=-838, minute=59, second=59),
        datetime(year=2023),
        timestamp_with_zone("+08:00", year=2024, month=1, day=1, hour=8, minute=0, second=0, millis=0),
        binary_object(b"\x89PNG\r\n"),
        text_object('{"a": [1, 2]}'),
        binary_geometry(bytes.fromhex("0101000000000000000000F03F0000000000000040")),
        text_geometry("POINT(1 2)"),
        note if note is not None else empty("NULL"),
        None,
    ]
