"""Alibaba Cloud DTS Avro conventions (MySQL source): one binary Avro `Record` per message (written
with fastavro against the official schema, landed as Kafka-dump lines with `value_base64`),
INSERT for the full load's rows and for inserts, UPDATE with full before and after images (a key
change is an UPDATE whose images differ in the key), DELETE with the before image, DDL records
(the SQL text as `afterImages`) for the ADD COLUMN and for the TRUNCATE (the Record's operations
have no truncate), `sourcePosition` as `offset@file`, `id` increasing, `sourceTxid` 0 as MySQL
sources write it, the key in the `pk_uk_info` tag, `fields` with MySQL `dataTypeNumber`s. Values
take their union branch from the column type: Integer, Character (utf8mb4), Decimal, Float,
DateTime, BinaryObject, EmptyObject NULL. MySQL's BOOLEAN is tinyint(1), an Integer 1/0: the
conf types those columns boolean."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro

from cdc_medallion.formats.dts_avro import record_schema
from cdc_medallion.generator.database import Column
from cdc_medallion.generator.history import History, Row
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import Step, boolean_columns, finish, millis, topic, walk
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

NS = "com.alibaba.dts.formats.avro."
TYPE_NUMBERS = {"int": 3, "bigint": 8, "double": 5, "boolean": 1, "date": 10, "timestamp": 18, "binary": 252}


def _type_number(column: Column) -> int:
    if column.spark_type.startswith("decimal"):
        return 246
    if column.spark_type == "string":
        return 252 if column.sql_type == "CLOB" else 253
    return TYPE_NUMBERS[column.spark_type]


def _value(column: Column, value: Any) -> Any:
    kind = column.spark_type
    if value is None:
        return "NULL"  # EmptyObject
    if kind in ("int", "bigint", "boolean"):
        return (NS + "Integer", {"precision": 1 if kind == "boolean" else 11, "value": str(int(value))})
    if kind.startswith("decimal"):
        precision, scale = (int(p) for p in kind[len("decimal(") : -1].split(","))
        return (NS + "Decimal", {"value": str(value), "precision": precision, "scale": scale})
    if kind == "double":
        return (NS + "Float", {"value": value, "precision": 22, "scale": 31})
    if kind == "date":
        parts = {"year": value.year, "month": value.month, "day": value.day}
        return (NS + "DateTime", {**dict.fromkeys(("hour", "minute", "second", "millis")), **parts})
    if kind == "timestamp":
        names = ("year", "month", "day", "hour", "minute", "second")
        parts = {n: getattr(value, n) for n in names}
        return (NS + "DateTime", {**parts, "millis": value.microsecond})  # microseconds, as the SDK reads them
    if kind == "binary":
        return (NS + "BinaryObject", {"type": "BLOB", "value": value})
    return (NS + "Character", {"charset": "utf8mb4", "value": value.encode("utf-8")})


def _images(columns: list[Column], row: Row | None) -> list[Any] | None:
    return None if row is None else [_value(c, row.get(c.name)) for c in columns]


class _Writer:
    def __init__(self) -> None:
        self.dump = KafkaDump()
        self.id = 0

    def record(self, step: Step, operation: str, **parts: Any) -> None:
        self.id += 1
        seconds = millis(step.tx.commit_ts) // 1000
        position = f"{4_000 + self.id * 217}@7"
        tags = {"readerThroughoutTime": str(millis(step.tx.commit_ts) + 3)}
        if step.spec.keys:
            tags["pk_uk_info"] = json.dumps({"PRIMARY": list(step.spec.keys)})
        record = {
            "version": 0,
            "id": self.id,
            "sourceTimestamp": seconds,
            "sourcePosition": position,
            "safeSourcePosition": position,
            "sourceTxid": "0",
            "source": {"sourceType": "MySQL", "version": "8.0.28"},
            "operation": operation,
            "objectName": f"{step.spec.schema}.{step.spec.name}",
            "processTimestamps": None,
            "tags": tags,
            "fields": None,
            "beforeImages": None,
            "afterImages": None,
            **parts,
        }
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, record_schema(), record)
        self.dump.add(topic(step.spec), buffer.getvalue(), None, step.tx.commit_ts)

    def step(self, step: Step) -> None:
        change = step.change
        if change.op == "DDL":
            self.record(step, "DDL", afterImages=change.ddl)
        elif change.op == "TRUNCATE":
            self.record(step, "DDL", afterImages=f"TRUNCATE TABLE `{step.spec.schema}`.`{step.spec.name}`")
        else:
            fields = [{"name": c.name, "dataTypeNumber": _type_number(c)} for c in step.columns]
            operation = {"SNAPSHOT": "INSERT"}.get(change.op, change.op)
            before, after = _images(step.columns, change.before), _images(step.columns, change.after)
            self.record(step, operation, fields=fields, beforeImages=before, afterImages=after)


@register_renderer("dts-avro")
def render(history: History, out: Path) -> RenderedSource:
    writer = _Writer()
    for step in walk(history):
        writer.step(step)
    return finish("dts-avro", writer.dump, out / "dts_avro.jsonl", history, columns=boolean_columns(history))
