"""Debezium JSON (`debezium-json`): with or without the Kafka Connect schema envelope.

Ops c/u/d/r/t map to INSERT/UPDATE/DELETE/SNAPSHOT/TRUNCATE; `m` (logical decoding message)
is an informational event; a null value is a tombstone (counted, not a change), an empty one quarantined. Types
come from the envelope schema, including Debezium's logical types; without a schema they are
inferred from the JSON values. A value Debezium could not read (PostgreSQL's unchanged TOASTed
columns, written as `unavailable.value.placeholder`) is left out of its image, so gold keeps the
column's value, as for any partial image. Order: PostgreSQL lsn, MySQL file+pos+row, SQL Server
commit/change lsn, Oracle scn, else ts_ms — always with the landing position as tie-breaker.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as default
from functools import partial
from typing import Any

from pydantic import Field
from pyspark.sql import DataFrame

from cdc_medallion.civil_time import NANOS, date_text, epoch_timestamp_text
from cdc_medallion.formats import debezium_native
from cdc_medallion.formats.base import Format, FormatOptions, ParseError, millis_to_ts, register_format
from cdc_medallion.formats.debezium_types import CONNECT_TYPES, DECIMAL, LOGICAL_TYPES
from cdc_medallion.formats.json_common import (
    count_field,
    id_field,
    json_type,
    load_document,
    object_field,
    order_number,
    padded,
    text_field,
    time_number,
    whole_number,
)
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import (
    b64decode,
    decimal_from_bytes,
    decimal_text,
    dumps,
    inferred_type,
    loads,
    text_of,
    time_text,
    zoned_timestamp_text,
)
from cdc_medallion.model import (
    KIND_CHANGE,
    KIND_KEY,
    KIND_MESSAGE,
    KIND_TOMBSTONE,
    OP_DELETE,
    OP_INSERT,
    OP_SNAPSHOT,
    OP_TRUNCATE,
    OP_UPDATE,
)
from cdc_medallion.sqltypes import UNCONSTRAINED_DECIMAL, decimal_type

OPS = {"c": OP_INSERT, "u": OP_UPDATE, "d": OP_DELETE, "r": OP_SNAPSHOT, "t": OP_TRUNCATE}

# What Debezium writes for a value it does not have: PostgreSQL logs an unchanged TOASTed column of
# an update (or a delete) only with REPLICA IDENTITY FULL.
UNAVAILABLE = "__debezium_unavailable_value"

# `{"schema": S, "payload": P}` as Kafka Connect's JsonConverter writes it (JSON whitespace only).
_ENVELOPE_HEAD = re.compile(rb'[ \t\r\n]*\{[ \t\r\n]*"schema"[ \t\r\n]*:')
_PAYLOAD_KEY = re.compile(rb',[ \t\r\n]*"payload"[ \t\r\n]*:')
Decoder = Callable[[Any], str | None]  # one column's JSON value -> canonical text
_SCHEMAS_KEPT = 128  # distinct envelope schemas remembered per parser (a key's and a value's per table)


@dataclass(frozen=True)
class ValueSchema:
    """What a message's envelope schema says about its rows, worked out once per schema text."""

    schema: dict[str, Any] | None
    fields: dict[str, Mapping[str, Any]] = default(default_factory=dict)
    types: dict[str, str] = default(default_factory=dict)
    source_types: dict[str, str] = default(default_factory=dict)
    #: column -> (logical type, decoder) for the columns whose values need decoding; the rest
    #: are plain JSON values, which `text_of` writes.
    decoders: dict[str, tuple[str, Decoder]] = default(default_factory=dict)

    @classmethod
    def of(cls, schema: Any) -> ValueSchema:
        """The envelope's schema; null (or absent) is a schemaless message, another type an error."""
        if object_field(schema, "schema") is None:
            return cls(None)
        fields = _value_fields(schema)
        types, source_types = _column_types(fields, None, None)
        decoders = {name: (str(f.get("name")), d) for name, f in fields.items() if (d := _decoder(f)) is not None}
        return cls(schema, fields, types, source_types, decoders)


class DebeziumJsonOptions(FormatOptions):
    table: str | None = Field(
        None, description="table name for messages whose source block names none (schemaless test data)"
    )
    schema_name: str | None = Field(None, alias="schema", description="schema name for such messages")
    unavailable_value_placeholder: str | None = Field(
        UNAVAILABLE,
        description="the connector's `unavailable.value.placeholder`: a column holding it is left out of the image",
    )
    native_parse: bool = Field(
        False,
        description="parse schema-envelope messages in the JVM (Spark SQL), the rest in Python; experimental: "
        "the same events, slower today (see bench/HISTORY.md)",
    )


@register_format
class DebeziumJson(Format):
    name = "debezium-json"
    options = DebeziumJsonOptions
    settings: DebeziumJsonOptions

    def __init__(self, source_name: str, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(source_name, options)
        self._schemas: dict[bytes, ValueSchema] = {}
        # The placeholder as text, and as the JSON converter writes it in a bytes column (base64).
        text = self.settings.unavailable_value_placeholder
        self._placeholders = (str(text), base64.b64encode(str(text).encode()).decode()) if text else None

    @property
    def native(self) -> bool:
        return self.settings.native_parse

    def native_events(self, bronze: DataFrame) -> DataFrame:
        return debezium_native.native_events(self, bronze)

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        enveloped = self._read_envelope(message.value)
        if enveloped is not None:
            value_schema, payload = enveloped
        else:
            document = load_document(message)
            if document is None:
                return [self._tombstone(message)]
            value_schema, payload = ValueSchema(None), document
            if "payload" in document and ("schema" in document or set(document) <= {"schema", "payload"}):
                value_schema, payload = ValueSchema.of(document.get("schema")), document["payload"]
        if payload is None:
            return [self._tombstone(message)]
        if not isinstance(payload, dict):
            raise ParseError("payload", f"expected a JSON object, got {type(payload).__name__}")
        schema = value_schema.schema
        if "op" not in payload:
            if schema is not None and str(schema.get("name", "")).endswith(".Key"):
                return [self._key_event(message, schema, payload)]
            raise ParseError("payload.op", "missing: not a Debezium change event")
        return [self._change(message, value_schema, payload)]

    def _read_envelope(self, value: bytes | None) -> tuple[ValueSchema, Any] | None:
        """(schema, payload) of a `{"schema": S, "payload": P}` message, S parsed once per text.

        Kafka Connect's JSON converter repeats the whole schema in every message, most of its
        bytes, and the same few schemas come back all the time: parsing only the
        payload and looking the schema up by its text spares most of the JSON reading. The
        split is safe because a cut at a `"payload"` key nested inside S leaves a text that is
        not JSON. Anything else (other keys, another order, a BOM, invalid JSON) returns None:
        the full parse then reads it, or reports it.
        """
        if not value:
            return None
        head = _ENVELOPE_HEAD.match(value)
        if head is None:
            return None
        separator = _PAYLOAD_KEY.search(value, head.end())
        body = value.rstrip(b" \t\r\n")
        if separator is None or not body.endswith(b"}"):
            return None
        schema_text = value[head.end() : separator.start()]
        try:
            value_schema = self._schemas.get(schema_text)
            if value_schema is None:
                value_schema = ValueSchema.of(loads(schema_text))
                if len(self._schemas) >= _SCHEMAS_KEPT:
                    self._schemas.clear()
                self._schemas[schema_text] = value_schema
            return value_schema, loads(body[separator.end() : -1])
        except (ValueError, UnicodeDecodeError):
            return None

    # --- events ---------------------------------------------------------------------------
    def _tombstone(self, message: BronzeMessage) -> Event:
        key = self._key_payload(message)
        return {
            "kind": KIND_TOMBSTONE,
            "source_table": self._table_from_topic(message),
            "key_columns": list(key) if key else None,
            "before": {k: text_of(v) for k, v in key.items()} if key else None,
            "sequence": message.position,
        }

    def _key_event(self, message: BronzeMessage, schema: Mapping[str, Any], payload: Mapping[str, Any]) -> Event:
        # Name: connector.database.table.Key (Debezium convention).
        parts = str(schema.get("name", "")).split(".")
        table = parts[-2] if len(parts) >= 3 else self._table_from_topic(message)
        return {
            "kind": KIND_KEY,
            "source_schema": parts[-3] if len(parts) >= 4 else None,
            "source_table": table,
            "key_columns": list(payload),
            "before": {k: text_of(v) for k, v in payload.items()},
            "sequence": message.position,
        }

    def _change(self, message: BronzeMessage, value_schema: ValueSchema, payload: Mapping[str, Any]) -> Event:
        code = text_field(payload.get("op"), "payload.op")
        source = object_field(payload.get("source"), "payload.source") or {}
        if code == "m":
            return {
                "kind": KIND_MESSAGE,
                "op": "MESSAGE",
                "detail": dumps(payload.get("message")),
                "sequence": self._sequence(source, payload, message),
                "event_ts": _event_ts(source, payload),
            }
        if code not in OPS:
            raise ParseError("payload.op", f"unknown operation type {code!r} (expected c, u, d, r, t or m)")
        op = OPS[code]
        table = (
            text_field(source.get("table"), "payload.source.table")
            or self.settings.table
            or self._table_from_topic(message)
        )
        if not table:
            raise ParseError("payload.source.table", "missing, and no `table` option or topic to take it from")
        key = self._key_payload(message)
        before_raw = payload.get("before")
        after_raw = payload.get("after")
        for name, image in (("before", before_raw), ("after", after_raw)):
            if image is not None and not isinstance(image, dict):
                raise ParseError(f"payload.{name}", f"expected a JSON object or null, got {type(image).__name__}")
        flags: list[str] = []
        if op in (OP_INSERT, OP_SNAPSHOT, OP_UPDATE) and after_raw is None:
            raise ParseError("payload.after", f"{op} without an 'after' image")
        if op == OP_DELETE and before_raw is None:
            if not key:
                raise ParseError(
                    "payload.before",
                    "DELETE without a 'before' image, so the deleted row cannot be identified; if you are "
                    "using the Debezium Postgres connector, set REPLICA IDENTITY FULL (or DEFAULT with a "
                    "primary key) on the table, or land the Kafka message key with the value",
                )
            before_raw = key
            flags.append("before_from_message_key")
        if op == OP_UPDATE and before_raw is None:
            flags.append("before_image_missing")
        if self._placeholders is not None:
            available = [_available(i, self._placeholders, value_schema.fields) for i in (before_raw, after_raw)]
            if available[0] is not before_raw or available[1] is not after_raw:
                flags.append("unavailable_value_omitted")
            before_raw, after_raw = available
        before = _image(before_raw, value_schema.decoders, "payload.before")
        after = _image(after_raw, value_schema.decoders, "payload.after")
        if value_schema.fields:
            # The schema's own maps, shared by its events, not copied per event: nothing changes
            # an event's maps once it is made, they are only read into Arrow.
            types, source_types = value_schema.types, value_schema.source_types
            # A column the schema does not describe: typed by its values, and said so.
            described = value_schema.fields
            unknown = {c: v for i in (before_raw, after_raw) if i for c, v in i.items() if c not in described}
            if unknown:
                flags.append("column_not_in_schema")
                inferred, inferred_sources = _column_types({}, None, unknown)
                types, source_types = {**inferred, **types}, {**inferred_sources, **source_types}
        else:
            types, source_types = _column_types({}, before_raw, after_raw)
        changed = None
        if op == OP_UPDATE and before is not None and after is not None:
            if set(before) >= set(after):
                changed = [c for c in after if before.get(c) != after.get(c)]
            else:
                flags.append("before_image_partial")
        transaction = payload.get("transaction") if isinstance(payload.get("transaction"), dict) else {}
        tx_id = id_field(source.get("txId"), "payload.source.txId")
        if "txId" not in source:
            tx_id = id_field(transaction.get("id"), "payload.transaction.id")
        return {
            "kind": KIND_CHANGE,
            "source_db": text_field(source.get("db"), "payload.source.db"),
            "source_schema": text_field(source.get("schema"), "payload.source.schema") or self.settings.schema_name,
            "source_table": str(table),
            "op": op,
            "key_columns": list(key) if key else None,
            "before": before,
            "after": after,
            "changed_columns": changed,
            "present_columns": list(after) if after is not None else None,
            "column_types": types or None,
            "source_types": source_types or None,
            "sequence": self._sequence(source, payload, message),
            "tx_id": tx_id,
            "tx_seq": _int(transaction.get("data_collection_order")),
            "event_ts": _event_ts(source, payload),
            "flags": flags or None,
        }

    def _sequence(self, source: Mapping[str, Any], payload: Mapping[str, Any], message: BronzeMessage) -> str:
        return f"{_source_order(source, payload)}|{message.position}"

    def _key_payload(self, message: BronzeMessage) -> dict[str, Any]:
        """The Kafka message key's fields (Debezium key: the primary key), if it is JSON.

        A key in the schema envelope is split like a value, its schema looked up by its text.
        """
        if not message.key:
            return {}
        enveloped = self._read_envelope(message.key)
        if enveloped is not None:
            key = enveloped[1]
        else:
            try:
                key = loads(message.key)
            except (ValueError, UnicodeDecodeError):
                return {}
            if isinstance(key, dict) and "payload" in key and isinstance(key["payload"], dict):
                key = key["payload"]
        return key if isinstance(key, dict) else {}

    def _table_from_topic(self, message: BronzeMessage) -> str | None:
        """Debezium topics are `prefix.schema.table`; the last segment names the table."""
        if self.settings.table:
            return self.settings.table
        if message.topic:
            return message.topic.rsplit(".", 1)[-1]
        return None


# --- helpers ----------------------------------------------------------------------------------
def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _available(
    image: dict[str, Any] | None, placeholders: tuple[str, str], fields: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The image without the columns Debezium wrote its placeholder for: as text, as base64 in a
    bytes column (any column of a schemaless message: its type is unknown), or as the one element
    of an array. The same object when it has none (the usual case)."""
    if not image:
        return image
    text, encoded = placeholders

    def unavailable(column: str, value: Any) -> bool:
        if type(value) is str:
            if value == text:
                return True
            return value == encoded and str((fields.get(column) or {"type": "bytes"}).get("type")) == "bytes"
        return type(value) is list and len(value) == 1 and value[0] == text

    if not any(unavailable(c, v) for c, v in image.items()):
        return image
    return {c: v for c, v in image.items() if not unavailable(c, v)}


def _value_fields(schema: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """Field schemas of the row image (the envelope's `after`, else `before`, struct).

    Each column's schema needs its name (`field`) and Connect `type` as strings, its logical
    type (`name`) a string when given, and `parameters` an object: a field of another JSON type
    is an error naming it, never a column typed by `str()` of it."""
    if not schema:
        return {}
    envelope = schema.get("fields")
    if envelope is not None and not isinstance(envelope, list):
        raise ParseError("schema.fields", f"expected an array of fields, got {json_type(envelope)}")
    for index, field in enumerate(envelope or ()):
        if not isinstance(field, dict):
            reason = f"expected a field's schema (a JSON object), got {json_type(field)}"
            raise ParseError(f"schema.fields[{index}]", reason)
    for wanted in ("after", "before"):
        for index, field in enumerate(envelope or ()):
            if field.get("field") == wanted and isinstance(field.get("fields"), list):
                columns = {}
                for number, column in enumerate(field["fields"]):
                    columns.update(_column_schema(column, f"schema.fields[{index}].fields[{number}]"))
                return columns
    return {}


def _column_schema(column: Any, where: str) -> dict[str, Mapping[str, Any]]:
    if not isinstance(column, dict):
        raise ParseError(where, f"expected a column's schema (a JSON object), got {json_type(column)}")
    name = text_field(column.get("field"), f"{where}.field")
    if name is None:
        raise ParseError(f"{where}.field", "missing: a column's schema names the column")
    if text_field(column.get("type"), f"{where}.type") is None:
        raise ParseError(f"{where}.type", "missing: a column's schema gives its Connect type")
    text_field(column.get("name"), f"{where}.name")
    parameters = object_field(column.get("parameters"), f"{where}.parameters") or {}
    _scale(parameters.get("scale"), f"{where}.parameters.scale")
    count_field(parameters.get("connect.decimal.precision"), f"{where}.parameters.connect.decimal.precision")
    return {name: column}


def _column_types(
    fields: Mapping[str, Mapping[str, Any]], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> tuple[dict[str, str], dict[str, str]]:
    types: dict[str, str] = {}
    source_types: dict[str, str] = {}
    if fields:
        for name, field in fields.items():
            logical = field.get("name")
            connect = str(field.get("type", "")).lower()
            source_types[name] = str(logical or connect)
            types[name] = _spark_type(field)
        return types, source_types
    for image in (before, after):
        for name, value in (image or {}).items():
            inferred = inferred_type(value)
            if inferred is not None:
                types[name] = inferred
                source_types[name] = "json"
    return types, source_types


def _spark_type(field: Mapping[str, Any]) -> str:
    logical = field.get("name")
    if logical == DECIMAL:
        parameters = field.get("parameters") or {}
        precision = whole_number(parameters.get("connect.decimal.precision"))
        if not precision:  # Kafka Connect's own Decimal names only its scale: any number of digits
            return UNCONSTRAINED_DECIMAL
        return decimal_type(precision, _scale(parameters.get("scale"), "scale"))
    if logical == "io.debezium.data.Bits" and str((field.get("parameters") or {}).get("length")) == "1":
        return "boolean"
    if logical in LOGICAL_TYPES:
        return LOGICAL_TYPES[logical]
    return CONNECT_TYPES.get(str(field.get("type", "")).lower(), "string")


def _image(
    image: Mapping[str, Any] | None, decoders: Mapping[str, tuple[str, Decoder]], where: str
) -> dict[str, str | None] | None:
    """Canonical text of a row image's values, decoding Debezium's logical-type encodings.

    Runs for every value of every message, so a plain value costs one lookup: the decoders
    were chosen once per schema (`ValueSchema.decoders`), not per value.
    """
    if image is None:
        return None
    if not decoders:
        return {name: value if type(value) is str else text_of(value) for name, value in image.items()}
    return {
        name: (
            _decoded(value, decoder, where, name)
            if (decoder := decoders.get(name)) is not None and value is not None
            else (value if type(value) is str else text_of(value))
        )
        for name, value in image.items()
    }


def _decoded(value: Any, decoder: tuple[str, Decoder], image: str, column: str) -> str | None:
    logical, decode = decoder
    try:
        return decode(value)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, binascii.Error, decimal.InvalidOperation) as e:
        raise ParseError(f"{image}.{column}", f"cannot decode {value!r} as {logical}: {e}") from None


def _decoder(field: Mapping[str, Any]) -> Decoder | None:
    """How one column's non-null values become text, by its logical type; None: plain values.
    Every one is exact: integer arithmetic for times, digits for decimals (values.py)."""
    logical = field.get("name")
    parameters = field.get("parameters") or {}
    if logical in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return lambda value: date_text(int(value))
    if logical in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return lambda value: time_text(int(value), 1000)
    if logical == "io.debezium.time.MicroTime":
        return lambda value: time_text(int(value))
    if logical == "io.debezium.time.NanoTime":
        return lambda value: time_text(int(value), NANOS)
    if logical in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return lambda value: epoch_timestamp_text(int(value), 1000)
    if logical == "io.debezium.time.MicroTimestamp":
        return lambda value: epoch_timestamp_text(int(value), 1_000_000)
    if logical == "io.debezium.time.NanoTimestamp":
        return lambda value: epoch_timestamp_text(int(value), NANOS)
    if logical == "io.debezium.time.ZonedTimestamp":
        return lambda value: zoned_timestamp_text(str(value))
    if logical == DECIMAL:
        return partial(_fixed_scale_decimal, scale=_scale(parameters.get("scale"), "scale"))
    if logical == "io.debezium.data.VariableScaleDecimal":
        return _variable_scale_decimal
    if logical == "io.debezium.data.Bits" and str(parameters.get("length")) == "1":
        return _bit
    return None


def _scale(value: Any, where: str) -> int:
    """A decimal's `scale` parameter: a whole number, negative too (Oracle's NUMBER(5,-2)); 0 when
    absent, as Kafka Connect defaults it."""
    if value is None or value == "":
        return 0
    if type(value) is int:
        return value
    if not isinstance(value, str) or re.fullmatch(r"-?[0-9]+", value.strip()) is None:
        raise ParseError(where, f"expected a whole number, got {json_type(value)} ({value!r})")
    return int(value)


def _fixed_scale_decimal(value: Any, scale: int) -> str | None:
    if not isinstance(value, str):  # decimal.handling.mode=double or string: the value as written
        return text_of(value)
    return decimal_text(decimal_from_bytes(b64decode(value), scale))


def _variable_scale_decimal(value: Any) -> str | None:
    """`{"scale": s, "value": base64}`: PostgreSQL's unconstrained numeric, with the value's own
    scale (printed as PostgreSQL prints it: `1.500` keeps its zeros)."""
    if not isinstance(value, dict):
        return text_of(value)
    return decimal_text(decimal_from_bytes(b64decode(value["value"]), _scale(value["scale"], "scale")))


def _bit(value: Any) -> str | None:
    return text_of(bool(b64decode(value)[0] & 1)) if isinstance(value, str) else text_of(value)


def _event_ts(source: Mapping[str, Any], payload: Mapping[str, Any]) -> dt.datetime | None:
    """Source commit time (source.ts_ms); snapshots carry 0 there, so fall back to payload.ts_ms.
    Negative, it is unknown; present but not a whole number of milliseconds, an error naming it."""
    for value, where in ((source.get("ts_ms"), "source.ts_ms"), (payload.get("ts_ms"), "payload.ts_ms")):
        millis = time_number(value, where)  # a time, not an order key
        if millis:
            return millis_to_ts(millis)
    return None


def _source_order(source: Mapping[str, Any], payload: Mapping[str, Any]) -> str:
    """The connector's own total order as sortable text (fixed-width numbers). A position field
    that is present but not a number is an error (`order_number`), never a fallback."""
    lsn = order_number(source.get("lsn"), "source.lsn")
    if lsn is not None:
        return f"lsn:{padded(lsn, 20)}"
    pos = order_number(source.get("pos"), "source.pos")
    binlog = text_field(source.get("file"), "source.file")
    if binlog is not None and pos is not None:
        row = order_number(source.get("row"), "source.row")
        return f"binlog:{binlog}:{padded(pos, 20)}:{padded(row, 10)}"
    if source.get("commit_lsn") or source.get("change_lsn"):
        serial = order_number(source.get("event_serial_no"), "source.event_serial_no")
        return f"mssql:{source.get('commit_lsn') or ''}:{source.get('change_lsn') or ''}:{padded(serial, 10)}"
    scn = order_number(source.get("scn"), "source.scn")
    if scn is not None:
        return f"scn:{padded(scn, 30)}"
    ts = order_number(source.get("ts_ms"), "source.ts_ms") or order_number(payload.get("ts_ms"), "payload.ts_ms")
    return "ts:" if ts is None else f"ts:{padded(ts, 20)}"
