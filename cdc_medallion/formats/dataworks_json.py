"""Alibaba DataWorks real-time sync to Kafka (`dataworks-json`): `schema` + `payload` messages.

`schema.dataColumn` names and types the row images (BOOLEAN, DOUBLE, DATE = epoch ms, BYTES =
base64, LONG, STRING); `schema.primaryKey` is the key, or when null the row-id column DataWorks
adds (`#alibaba_rds_row_id#` for MySQL, `rowid` for Oracle); `schema.source` names db, schema
and table. Ops: INSERT, DELETE; UPDATE_BEFOR (the spec's spelling; UPDATE_BEFORE too) and
UPDATE_AFTER are two messages with the same `sequenceId`, paired into one update (an
UPDATE_BEFOR still waiting at the end of a batch is held and re-fed to the next run; a
redelivered half is recognised and recorded), or one UPDATE_AFTER carrying both images;
TRANSACTION_BEGIN / _END are transaction markers; DDL-like ops (CREATE, ALTER, ERASE, QUERY,
TRUNCATE, RENAME, CINDEX, DINDEX, GTID, XACOMMIT, XAROLLBACK) are schema changes, and TRUNCATE
also empties the table (a TRUNCATE change). MHEARTBEAT is a
heartbeat: never a change, it measures source lag (landing time - eventTime). `sequenceId`
orders changes; `timestamp.eventTime` is the event time, `-1` meaning unknown (full load).
"""

from __future__ import annotations

import binascii
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cdc_medallion.civil_time import epoch_timestamp_text
from cdc_medallion.formats.base import Format, ParseError, millis_to_ts, register_format
from cdc_medallion.formats.json_common import (
    id_field,
    load_document,
    object_field,
    order_number,
    padded,
    text_field,
    time_number,
    tombstone,
)
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import b64decode, dumps, inferred_type, text_of
from cdc_medallion.model import (
    KIND_CHANGE,
    KIND_HEARTBEAT,
    KIND_MESSAGE,
    KIND_SCHEMA_CHANGE,
    KIND_TRANSACTION,
    OP_DELETE,
    OP_INSERT,
    OP_TRUNCATE,
    OP_UPDATE,
)

# DataWorks column types -> Spark SQL types.
TYPES = {
    "BOOLEAN": "boolean",
    "DOUBLE": "double",
    "DATE": "timestamp",  # 13-digit epoch milliseconds: a point in time, not a calendar date
    "BYTES": "binary",  # base64 text, which is also our canonical binary text
    "LONG": "bigint",
    "STRING": "string",
}
ROW_ID_COLUMNS = ("#alibaba_rds_row_id#", "rowid")  # MySQL without a primary key, Oracle
UPDATE_BEFORE = frozenset({"UPDATE_BEFOR", "UPDATE_BEFORE"})
TRANSACTION_OPS = {"TRANSACTION_BEGIN": "BEGIN", "TRANSACTION_END": "END"}
DDL_OPS = frozenset(
    {"CREATE", "ALTER", "ERASE", "QUERY", "TRUNCATE", "RENAME", "CINDEX", "DINDEX", "GTID", "XACOMMIT", "XAROLLBACK"}
)
KNOWN_OPS = ("INSERT", "UPDATE_BEFOR", "UPDATE_AFTER", "DELETE", *TRANSACTION_OPS, *sorted(DDL_OPS), "MHEARTBEAT")
SEQUENCE_WIDTH = 30
# Before every digit: the changes DataWorks wrote without a sequence sort before the sequenced ones.
UNSEQUENCED = "-"
DUPLICATE_BEFORE = "duplicate_update_before"  # counted by silver.yml's not_redelivered


@dataclass
class _Row:
    """What a row-change message says, before pairing."""

    op: str
    source_db: str | None
    source_schema: str | None
    table: str
    key: list[str] | None
    before: dict[str, str | None] | None
    after: dict[str, str | None] | None
    types: dict[str, str]
    source_types: dict[str, str]
    sequence_id: str | None
    read_at: Any  # timestamp.systemTime: the order of a change without a sequence
    event_ts: dt.datetime | None
    flags: list[str]
    detail: str | None


@dataclass
class _Half:
    """An UPDATE_BEFOR waiting for its UPDATE_AFTER, and byte-for-byte redeliveries of it."""

    message: BronzeMessage
    row: _Row
    redelivered: list[BronzeMessage] = field(default_factory=list)


Pair = tuple[str | None, ...]  # sequenceId, db, schema, table


@dataclass
class _Batch:
    """Pairing state of one batch: halves waiting, and before images of updates already built."""

    waiting: dict[Pair, _Half] = field(default_factory=dict)
    paired: dict[Pair, dict[str, str | None] | None] = field(default_factory=dict)


@register_format
class DataWorksJson(Format):
    name = "dataworks-json"
    stateful: ClassVar[bool] = True
    # Pairing, redelivery and held halves are all per sequenceId (`Pair` adds db, schema, table).
    related_by: ClassVar[str | None] = "get_json_object(CAST(value AS STRING), '$.payload.sequenceId')"

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        return self.parse_messages([message], [])

    def parse_messages(self, messages: list[BronzeMessage], context: list[Event]) -> list[Event]:
        """Events in landing order; UPDATE_BEFOR halves wait here for their UPDATE_AFTER."""
        batch = _Batch()
        events: list[Event] = []
        for message in messages:
            events.extend(self._guarded(message, self._events, batch))
        for half in batch.waiting.values():
            row = half.row
            reason = f"UPDATE_BEFOR of {row.table} sequenceId {row.sequence_id}: its UPDATE_AFTER has not arrived"
            for message in [half.message, *half.redelivered]:
                events.append(self.held_event(message, reason, source_table=row.table))
        return events

    def _guarded(self, message: BronzeMessage, produce: Callable[..., list[Event]], *args: Any) -> list[Event]:
        """Events of one message, completed; its errors become a quarantined event."""
        if message.landing_error:
            return [self.error_event(message, "value", message.landing_error)]
        try:
            produced = produce(message, *args)
        except ParseError as error:
            return [self.error_event(message, error.field, error.reason)]
        except Exception as error:  # a parser bug must not lose the message either
            return [self.error_event(message, "message", f"parser failed: {type(error).__name__}: {error}")]
        return [event if event.get("bronze_ref") else self.complete(event, message) for event in produced]

    def _events(self, message: BronzeMessage, batch: _Batch) -> list[Event]:
        if message.value is None:  # a Kafka tombstone: counted, never a change
            return [tombstone(message)]
        schema, payload = _document(message)
        op = payload.get("op")
        if not isinstance(op, str) or not op:
            raise ParseError("payload.op", f"missing or not text: {op!r}")
        timestamps = object_field(payload.get("timestamp"), "payload.timestamp") or {}
        event_ts = _event_time(timestamps.get("eventTime"))
        if op == "MHEARTBEAT":
            return [_heartbeat(message, timestamps, event_ts)]
        if op in TRANSACTION_OPS:
            return [
                {
                    "kind": KIND_TRANSACTION,
                    "op": TRANSACTION_OPS[op],
                    **_source(schema),
                    "sequence": _sequence(payload, message),
                    "event_ts": event_ts,
                }
            ]
        if op in DDL_OPS:
            return self._ddl(message, op, schema, payload, event_ts)
        if op not in ("INSERT", "DELETE", "UPDATE_AFTER") and op not in UPDATE_BEFORE:
            raise ParseError("payload.op", f"unknown operation {op!r} (expected one of {', '.join(KNOWN_OPS)})")
        row = _row(op, schema, payload, event_ts)
        pair = (row.sequence_id, row.source_db, row.source_schema, row.table)
        if op in UPDATE_BEFORE:
            if row.before is None:
                raise ParseError("payload.before", f"{op} without a `before` image")
            if row.sequence_id is None:
                raise ParseError("payload.sequenceId", f"missing: {op} cannot be paired with its UPDATE_AFTER")
            return self._before_half(message, row, pair, batch)
        if op == "INSERT":
            if row.after is None:
                raise ParseError("payload.after", "INSERT without an `after` image")
            return [_change(message, row, OP_INSERT, None, row.after)]
        if op == "DELETE":
            if row.before is None:
                raise ParseError("payload.before", "DELETE without a `before` image: the row cannot be identified")
            return [_change(message, row, OP_DELETE, row.before, None)]
        # UPDATE_AFTER: paired with its UPDATE_BEFOR, or the one-message mode (before and after).
        if row.after is None:
            raise ParseError("payload.after", "UPDATE_AFTER without an `after` image")
        half = batch.waiting.get(pair)  # removed once the update is built, so an error keeps it waiting
        before, related = row.before, None
        if half is not None:
            before = row.before if row.before is not None else half.row.before
            related = [half.message.ref, *(m.ref for m in half.redelivered)]
            row.flags.extend(f for f in half.row.flags if f not in row.flags)
            if half.redelivered:
                row.flags.append(DUPLICATE_BEFORE)
        elif pair in batch.paired:  # a redelivered UPDATE_AFTER: the same update again (idempotent)
            before = row.before if row.before is not None else batch.paired[pair]
            row.flags.append("redelivered")
        elif before is None:
            row.flags.append("update_before_missing")
        event = _change(message, row, OP_UPDATE, before, row.after)
        event["related_refs"] = related
        batch.waiting.pop(pair, None)
        batch.paired[pair] = before
        return [event]

    def _before_half(self, message: BronzeMessage, row: _Row, pair: Pair, batch: _Batch) -> list[Event]:
        """Keep an UPDATE_BEFOR until its UPDATE_AFTER; recognise redeliveries of it."""
        half = batch.waiting.get(pair)
        if half is not None and half.row.before == row.before:
            half.redelivered.append(message)  # named by the update's related_refs (or held with it)
            return []
        if half is None and pair in batch.paired and batch.paired[pair] == row.before:
            return [  # redelivered after its update was built: recorded, not applied again
                {
                    "kind": KIND_MESSAGE,
                    "op": row.op,
                    "source_db": row.source_db,
                    "source_schema": row.source_schema,
                    "source_table": row.table,
                    "sequence": _sequence(_order_of(row), message),
                    "flags": [DUPLICATE_BEFORE],
                    "detail": f"redelivered {row.op} of sequenceId {row.sequence_id}, already paired; not applied",
                }
            ]
        batch.waiting[pair] = _Half(message, row)
        if half is None:
            return []
        # another before half for the same sequenceId, with other values: the earlier has no UPDATE_AFTER
        reason = f"sequenceId {row.sequence_id} has a later {row.op} with other values; this one has no UPDATE_AFTER"
        return [self.error_event(m, "payload.op", reason) for m in [half.message, *half.redelivered]]

    def _ddl(
        self,
        message: BronzeMessage,
        op: str,
        schema: Mapping[str, Any],
        payload: Mapping[str, Any],
        event_ts: dt.datetime | None,
    ) -> list[Event]:
        ddl = object_field(payload.get("ddl"), "payload.ddl")
        text = text_field((ddl or {}).get("text"), "payload.ddl.text")
        names = _source(schema)
        columns = _columns(schema)
        event: Event = {
            "kind": KIND_SCHEMA_CHANGE,
            "op": op,
            **names,
            "key_columns": _key(schema, columns, None),
            "column_types": {n: TYPES.get(t, "string") for n, t in columns.items()} or None,
            "source_types": dict(columns) or None,
            "sequence": _sequence(payload, message),
            "event_ts": event_ts,
            "detail": text,
        }
        if op != "TRUNCATE":
            return [event]
        if not names.get("source_table"):
            raise ParseError("schema.source.tableName", "TRUNCATE must name the table it empties")
        truncate = {
            "kind": KIND_CHANGE,
            "op": OP_TRUNCATE,
            **names,
            "sequence": _sequence(payload, message),
            "event_ts": event_ts,
            "detail": event["detail"],
        }
        return [event, truncate]


# --- helpers ----------------------------------------------------------------------------------
def _document(message: BronzeMessage) -> tuple[dict[str, Any], dict[str, Any]]:
    document = load_document(message)
    if document is None:
        raise ParseError("value", "empty message: a DataWorks message is a JSON object")
    payload = document.get("payload")
    if not isinstance(payload, dict):
        raise ParseError("payload", f"expected a JSON object, got {type(payload).__name__}")
    schema = document.get("schema")
    if schema is None:
        schema = {}
    if not isinstance(schema, dict):
        raise ParseError("schema", f"expected a JSON object or null, got {type(schema).__name__}")
    return schema, payload


def _heartbeat(message: BronzeMessage, timestamps: Mapping[str, Any], event_ts: dt.datetime | None) -> Event:
    lag = None
    if event_ts is not None and message.ingest_ts is not None:
        landed = message.ingest_ts if message.ingest_ts.tzinfo else message.ingest_ts.replace(tzinfo=dt.UTC)
        lag = round((landed - event_ts).total_seconds(), 3)
    return {
        "kind": KIND_HEARTBEAT,
        "op": "MHEARTBEAT",
        "sequence": message.position,
        "event_ts": event_ts,
        "detail": dumps({"timestamp": dict(timestamps), "lag_seconds": lag}),
    }


def _source(schema: Mapping[str, Any]) -> dict[str, str | None]:
    source = object_field(schema.get("source"), "schema.source")
    if source is None:
        return {}
    return {
        "source_db": text_field(source.get("dbName"), "schema.source.dbName"),
        "source_schema": text_field(source.get("schemaName"), "schema.source.schemaName"),
        "source_table": text_field(source.get("tableName"), "schema.source.tableName"),
    }


def _columns(schema: Mapping[str, Any]) -> dict[str, str]:
    """`schema.dataColumn`: column name -> DataWorks type name, in order."""
    raw = schema.get("dataColumn")
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ParseError("schema.dataColumn", f"expected a list of {{name, type}}, got {type(raw).__name__}")
    columns: dict[str, str] = {}
    for index, column in enumerate(raw):
        if not isinstance(column, dict) or not isinstance(column.get("name"), str) or not column["name"]:
            raise ParseError(f"schema.dataColumn[{index}]", f"expected {{name, type}}, got {column!r}")
        kind = text_field(column.get("type"), f"schema.dataColumn[{index}].type")
        if kind is None:
            raise ParseError(f"schema.dataColumn[{index}].type", "missing: each column names its type")
        columns[column["name"]] = kind.upper()
    return columns


def _key(schema: Mapping[str, Any], columns: Mapping[str, str], image: Mapping[str, Any] | None) -> list[str] | None:
    """`schema.primaryKey`, or when null the row-id column DataWorks adds."""
    raw = schema.get("primaryKey")
    if raw not in (None, []):
        if not isinstance(raw, list) or not all(isinstance(k, str) and k for k in raw):
            raise ParseError("schema.primaryKey", f"expected a list of column names or null, got {raw!r}")
        return list(raw)
    for row_id in ROW_ID_COLUMNS:
        if row_id in columns or (image is not None and row_id in image):
            return [row_id]
    return None


def _row(op: str, schema: Mapping[str, Any], payload: Mapping[str, Any], event_ts: dt.datetime | None) -> _Row:
    names = _source(schema)
    if not names.get("source_table"):
        raise ParseError("schema.source.tableName", f"missing: a {op} must name its table")
    columns = _columns(schema)
    flags: list[str] = []
    images = {}
    for side in ("before", "after"):
        holder = payload.get(side)
        if holder is None:
            images[side] = None
            continue
        if not isinstance(holder, dict) or not isinstance(holder.get("dataColumn"), dict):
            raise ParseError(f"payload.{side}", 'expected {"dataColumn": {column: value, ...}} or null')
        images[side] = holder["dataColumn"]
    types: dict[str, str] = {}
    source_types: dict[str, str] = {}
    for name, kind in columns.items():
        source_types[name] = kind
        types[name] = TYPES.get(kind, "string")
        if kind not in TYPES and "unknown_column_type" not in flags:
            flags.append("unknown_column_type")
    converted: dict[str, dict[str, str | None] | None] = {}
    for side, raw in images.items():
        if raw is None:
            converted[side] = None
            continue
        ordered = [n for n in columns if n in raw] + [n for n in raw if n not in columns]
        image: dict[str, str | None] = {}
        for name in ordered:
            if name not in columns:
                if "column_not_in_schema" not in flags:
                    flags.append("column_not_in_schema")
                inferred = "double" if isinstance(raw[name], float) else inferred_type(raw[name])
                if inferred is not None and name not in types:
                    types[name] = inferred
                    source_types[name] = "json"
            image[name] = _value(raw[name], columns.get(name), f"payload.{side}.dataColumn.{name}", flags)
        converted[side] = image
    image = converted["after"] if converted["after"] is not None else converted["before"]
    key = _key(schema, columns, image)
    if key and image is not None and any(k not in image for k in key):
        flags.append("key_column_missing")
    scn = payload.get("scn")
    return _Row(
        op=op,
        source_db=names.get("source_db"),
        source_schema=names.get("source_schema"),
        table=str(names["source_table"]),
        key=key,
        before=converted["before"],
        after=converted["after"],
        types=types,
        source_types=source_types,
        sequence_id=_sequence_id(payload.get("sequenceId")),
        read_at=_system_time(payload),
        event_ts=event_ts,
        flags=flags,
        detail=dumps({"scn": str(scn)}) if scn not in (None, "") else None,
    )


def _change(
    message: BronzeMessage,
    row: _Row,
    op: str,
    before: dict[str, str | None] | None,
    after: dict[str, str | None] | None,
) -> Event:
    flags = list(row.flags)
    sequence = _sequence(_order_of(row), message)
    changed = None
    if op == OP_UPDATE and before is not None and after is not None and set(before) >= set(after):
        changed = [c for c in after if before.get(c) != after.get(c)]
    return {
        "kind": KIND_CHANGE,
        "source_db": row.source_db,
        "source_schema": row.source_schema,
        "source_table": row.table,
        "op": op,
        "key_columns": row.key,
        "before": before,
        "after": after,
        "changed_columns": changed,
        "present_columns": list(after if after is not None else before or {}),
        "column_types": row.types or None,
        "source_types": row.source_types or None,
        "sequence": sequence,
        "event_ts": row.event_ts,
        "flags": flags or None,
        "detail": row.detail,
    }


def _value(value: Any, kind: str | None, where: str, flags: list[str]) -> str | None:
    """Canonical text of one value for its DataWorks type."""
    if value is None:
        return None
    if kind == "DATE" and isinstance(value, int) and not isinstance(value, bool):
        return epoch_timestamp_text(value, 1000)  # beyond years 1-9999 too: gold's cast refuses those
    if kind == "BYTES" and isinstance(value, str):
        try:
            b64decode(value)
        except (ValueError, binascii.Error):
            if "bytes_not_base64" not in flags:
                flags.append("bytes_not_base64")
    return text_of(value)


def _sequence(payload: Mapping[str, Any], message: BronzeMessage) -> str:
    """sequenceId (digits, zero-padded so it sorts as text), then the landing position.

    Where DataWorks has no sequence it writes `-1` (or null), as for the rows of a full load: such
    a change sorts before every sequenced one, among its like by `timestamp.systemTime` (when the
    node read it), then by the landing position (docs/values.md)."""
    number = order_number(payload.get("sequenceId"), "payload.sequenceId")
    if number is not None:
        return f"{padded(number, SEQUENCE_WIDTH)}|{message.position}"
    read_at = order_number(_system_time(payload), "payload.timestamp.systemTime")
    return f"{UNSEQUENCED}{padded(read_at, 20)}|{message.position}"


def _sequence_id(value: Any) -> str | None:
    """sequenceId as text (it pairs an update's halves): a string, or a number as some writers give
    it, its none marker -1 included."""
    if type(value) is int:
        return str(value)
    return id_field(value, "payload.sequenceId")


def _system_time(payload: Mapping[str, Any]) -> Any:
    timestamps = payload.get("timestamp")
    return timestamps.get("systemTime") if isinstance(timestamps, dict) else None


def _order_of(row: _Row) -> dict[str, Any]:
    """The order fields of a parsed row, as `_sequence` reads them from a payload."""
    return {"sequenceId": row.sequence_id, "timestamp": {"systemTime": row.read_at}}


def _event_time(value: Any) -> dt.datetime | None:
    """`timestamp.eventTime`: epoch milliseconds; negative (-1: a full load, as a number or as
    text) and absent are unknown."""
    millis = time_number(value, "payload.timestamp.eventTime")
    return None if millis is None else millis_to_ts(millis)
