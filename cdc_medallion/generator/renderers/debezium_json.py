"""Debezium (PostgreSQL connector) conventions: Kafka Connect schema envelope, key messages,
snapshot reads (`r`), a delete followed by a tombstone, a key change as delete + create,
truncate (`t`), lsn order; a DDL shows as a new field in later envelopes."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cdc_medallion.generator.database import Column, TableSpec
from cdc_medallion.generator.history import Change, History, Row, Transaction
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

EPOCH = dt.datetime(1970, 1, 1)


def _field(column: Column) -> dict[str, Any]:
    kind = column.spark_type
    field: dict[str, Any] = {"field": column.name, "optional": True}
    if kind.startswith("decimal"):
        precision, scale = kind[len("decimal(") : -1].split(",")
        field.update(
            type="bytes",
            name="org.apache.kafka.connect.data.Decimal",
            parameters={"scale": scale, "connect.decimal.precision": precision},
        )
    elif kind == "date":
        field.update(type="int32", name="io.debezium.time.Date")
    elif kind == "timestamp":
        field.update(type="int64", name="io.debezium.time.MicroTimestamp")
    else:
        field["type"] = {
            "int": "int32",
            "bigint": "int64",
            "double": "double",
            "boolean": "boolean",
            "binary": "bytes",
        }.get(kind, "string")
    return field


def _encode(column: Column, value: Any) -> Any:
    if value is None:
        return None
    kind = column.spark_type
    if kind.startswith("decimal"):
        return decimal_bytes(decimal.Decimal(value), int(kind.split(",")[1].rstrip(")")))
    if kind == "date":
        return (value - dt.date(1970, 1, 1)).days
    if kind == "timestamp":
        delta = value - EPOCH
        return delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
    if kind == "binary":
        return base64.b64encode(value).decode("ascii")
    return value


def decimal_bytes(value: decimal.Decimal, scale: int) -> str:
    """Kafka Connect's Decimal as the JSON converter writes it: base64 of the unscaled value's
    big-endian two's complement in as few bytes as hold it (Java's `BigInteger.toByteArray`).
    The unscaled value comes from the digits, exactly: `scaleb` would round beyond 28 digits."""
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * 10 ** (int(exponent) + scale)
    if sign:
        unscaled = -unscaled
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1  # room for the sign bit too
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")


class _Writer:
    """Turns the history's changes into Debezium messages, tracking lsn and each table's columns."""

    def __init__(self, history: History, dump: KafkaDump) -> None:
        self.history = history
        self.dump = dump
        self.columns = {t.name: list(t.columns) for t in history.tables}
        self.lsn = 1_000

    def change(self, tx: Transaction, change: Change) -> None:
        spec = self.history.table(change.table)
        if change.op == "DDL":
            self.columns[spec.name].append(change.added)  # type: ignore[arg-type]
        elif change.op == "SNAPSHOT":
            self.emit(tx, spec, "r", None, change.after)
        elif change.op == "INSERT":
            self.emit(tx, spec, "c", None, change.after)
        elif change.op == "DELETE":
            self.emit(tx, spec, "d", change.before, None)
        elif change.op == "TRUNCATE":
            self.emit(tx, spec, "t", None, None)
        elif spec.keys and any(change.before[k] != change.after[k] for k in spec.keys):  # type: ignore[index]
            self.emit(tx, spec, "d", change.before, None)  # PostgreSQL: a key change is delete + create
            self.emit(tx, spec, "c", None, change.after)
        else:
            self.emit(tx, spec, "u", change.before, change.after)

    def emit(self, tx: Transaction, spec: TableSpec, op: str, before: Row | None, after: Row | None) -> None:
        self.lsn += 16
        columns = self.columns[spec.name]
        topic = f"gen.{spec.schema}.{spec.name}"
        row = after if after is not None else before
        key = None
        if spec.keys and row is not None:
            key_schema = {
                "type": "struct",
                "name": f"{topic}.Key",
                "fields": [_field(spec.column(k)) for k in spec.keys],
            }
            key = json.dumps({"schema": key_schema, "payload": {k: _encode(spec.column(k), row[k]) for k in spec.keys}})
        row_schema = {"type": "struct", "optional": True, "fields": [_field(c) for c in columns]}
        millis = int((tx.commit_ts - EPOCH).total_seconds() * 1000)
        envelope = {
            "schema": {
                "type": "struct",
                "name": f"{topic}.Envelope",
                "fields": [{**row_schema, "field": "before"}, {**row_schema, "field": "after"}],
            },
            "payload": {
                "before": _image(columns, before),
                "after": _image(columns, after),
                "op": op,
                "source": {
                    "connector": "postgresql",
                    "name": "gen",
                    "db": "gen",
                    "schema": spec.schema,
                    "table": spec.name,
                    "lsn": self.lsn,
                    "txId": tx.number,
                    "ts_ms": millis,
                    "snapshot": "true" if tx.snapshot else "false",
                },
                "ts_ms": millis,
            },
        }
        self.dump.add(topic, json.dumps(envelope, ensure_ascii=False), key, tx.commit_ts)
        if op == "d":
            self.dump.add(topic, None, key, tx.commit_ts)  # the tombstone that follows a delete


def _image(columns: list[Column], row: Row | None) -> dict | None:
    return None if row is None else {c.name: _encode(c, row.get(c.name)) for c in columns}


@register_renderer("debezium-json")
def render(history: History, out: Path, transactions: Iterable[Transaction] | None = None) -> RenderedSource:
    """`transactions`, if given, are rendered as they come (a `stream_history`), written as they go."""
    path = out / "debezium.jsonl"
    writer = _Writer(history, KafkaDump.into(path))
    for tx in history.transactions if transactions is None else transactions:
        for change in tx.changes:
            writer.change(tx, change)
    count = writer.dump.write(path)
    keys = {t.name: t.keys for t in history.tables if t.keys}
    return RenderedSource("debezium-json", path, "kafka-dump", keys=keys, messages=count)
