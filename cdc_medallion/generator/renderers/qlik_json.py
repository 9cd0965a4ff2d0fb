"""Qlik Replicate JSON (Kafka endpoint) conventions: `atMSG` envelopes; a metadata message (MD)
per table before its first data message, and a new one (new schemaId, next tableVersion) after
the ADD COLUMN; data messages (DT) name their metadata by `messageSchemaId`. The full load is
`REFRESH` (no changeSequence, masks or transaction, as the vendor writes it), then `INSERT`,
`UPDATE` (with `beforeData`; a key change is one UPDATE whose beforeData holds the old key) and
`DELETE` (the deleted row in `data`). `changeMask` / `columnMask` are hex bitmasks, little-endian
by byte, bit i for ordinal i + 1: an INSERT's names every non-LOB column, an UPDATE's the changed
non-LOB columns, a DELETE's the key; columnMask names every column (full supplemental logging).
`changeSequence` is the commit time (YYYYMMDDHHmmSShh) and a 19-digit change number. Qlik's Kafka
endpoint has no truncate message: a source TRUNCATE reaches the target as the DELETE of each row
it removed (what the apply would have done row by row). Binary (BLOB) values are hex digits.
The metadata types every column, so the conf types none."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from cdc_medallion.generator.database import Column
from cdc_medallion.generator.history import History, Row
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import Step, dumps, finish, json_value, text_value, topic, walk
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

QLIK = {
    "int": "INT4",
    "bigint": "INT8",
    "double": "REAL8",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp": "DATETIME",
}
LOBS = {"CLOB": "CLOB", "BLOB": "BLOB"}  # source type -> Qlik LOB type (not in changeMask)


def _qlik_type(column: Column) -> dict[str, Any]:
    kind = column.spark_type
    spec: dict[str, Any] = {"type": "STRING", "length": 0, "precision": 0, "scale": 0}
    if column.sql_type in LOBS:
        spec["type"] = LOBS[column.sql_type]
    elif kind.startswith("decimal"):
        precision, scale = kind[len("decimal(") : -1].split(",")
        spec.update(type="NUMERIC", precision=int(precision), scale=int(scale))
    elif kind in QLIK:
        spec["type"] = QLIK[kind]
    elif kind == "binary":
        spec["type"] = "BYTES"
    elif "(" in column.sql_type:
        spec["length"] = int(column.sql_type.split("(")[1].rstrip(")"))
    return spec


def _is_lob(column: Column) -> bool:
    return column.sql_type in LOBS


def _value(column: Column, value: Any) -> Any:
    if value is None:
        return None
    if column.spark_type == "binary":
        return value.hex().upper()
    if column.spark_type in ("date", "timestamp"):
        return text_value(column, value)
    return json_value(column, value)


def mask(ordinals: list[int]) -> str:
    """Hex bitmask, little-endian by byte: bit i (of byte i // 8) for ordinal i + 1."""
    size = max((max(ordinals, default=0) + 7) // 8, 1)
    value = bytearray(size)
    for ordinal in ordinals:
        value[(ordinal - 1) // 8] |= 1 << ((ordinal - 1) % 8)
    return value.hex().upper()


class _Writer:
    def __init__(self) -> None:
        self.dump = KafkaDump()
        self.versions: dict[str, int] = {}  # table -> tableVersion of its last metadata message
        self.schema_ids: dict[str, str] = {}
        self.widths: dict[str, int] = {}  # table -> column count of its last metadata message
        self.change_number = 0

    def metadata(self, step: Step) -> str:
        """The table's schema id, writing a metadata message first when its structure is new."""
        spec, columns = step.spec, step.columns
        if self.widths.get(spec.name) == len(columns):
            return self.schema_ids[spec.name]
        version = self.versions.get(spec.name, 0) + 1
        schema_id = hashlib.md5(f"{spec.schema}.{spec.name}.{version}".encode()).hexdigest().upper()
        self.versions[spec.name], self.schema_ids[spec.name], self.widths[spec.name] = version, schema_id, len(columns)
        table_columns = {
            c.name: {
                "ordinal": ordinal,
                **_qlik_type(c),
                "primaryKeyPosition": spec.keys.index(c.name) + 1 if c.name in spec.keys else 0,
                "nullable": c.name not in spec.keys,
            }
            for ordinal, c in enumerate(columns, start=1)
        }
        body = {
            "schemaId": schema_id,
            "lineage": {
                "server": "qlik-01.gen.local",
                "task": "gen-to-kafka",
                "schema": spec.schema,
                "table": spec.name,
                "tableVersion": version,
                "timestamp": step.tx.commit_ts.isoformat(timespec="milliseconds"),
            },
            "tableStructure": {"tableColumns": table_columns},
            "dataSchema": None,
        }
        envelope = {
            "magic": "atMSG",
            "type": "MD",
            "headers": None,
            "messageSchemaId": schema_id,
            "messageSchema": None,
        }
        self.dump.add(topic(spec), dumps({**envelope, "message": body}), None, step.tx.commit_ts)
        return schema_id

    def step(self, step: Step, counter: int, last: bool) -> None:
        change = step.change
        if change.op == "DDL":
            self.metadata(step)  # the new structure: new schemaId, next tableVersion
            return
        schema_id = self.metadata(step)
        if change.op == "TRUNCATE":
            rows = list(step.live.values())
            for index, row in enumerate(rows):
                self.data(step, schema_id, "DELETE", None, row, counter + index, last and index == len(rows) - 1)
        elif change.op == "SNAPSHOT":
            self.data(step, schema_id, "REFRESH", change.after, None, counter, last)
        elif change.op == "UPDATE":
            self.data(step, schema_id, "UPDATE", change.after, change.before, counter, last)
        elif change.op == "DELETE":
            self.data(step, schema_id, "DELETE", None, change.before, counter, last)
        else:
            self.data(step, schema_id, "INSERT", change.after, None, counter, last)

    def data(
        self,
        step: Step,
        schema_id: str,
        operation: str,
        after: Row | None,
        before: Row | None,
        counter: int,
        last: bool,
    ) -> None:
        spec, columns, tx = step.spec, step.columns, step.tx
        ordinals = {c.name: i for i, c in enumerate(columns, start=1)}
        headers: dict[str, Any] = {
            "operation": operation,
            "changeSequence": "",
            "timestamp": "",
            "streamPosition": "",
            "transactionId": "",
            "changeMask": None,
            "columnMask": None,
            "externalSchemaId": None,
        }
        if operation != "REFRESH":
            self.change_number += 1
            stamp = tx.commit_ts.strftime("%Y%m%d%H%M%S") + f"{tx.commit_ts.microsecond // 10_000:02d}"
            if operation == "INSERT":
                changed = [ordinals[c.name] for c in columns if not _is_lob(c)]
            elif operation == "DELETE":
                changed = [ordinals[k] for k in spec.keys] or [ordinals[c.name] for c in columns if not _is_lob(c)]
            else:
                changed = [ordinals[c.name] for c in columns if c.name in step.change.changed and not _is_lob(c)]
            headers.update(
                changeSequence=f"{stamp}{self.change_number:019d}",
                timestamp=tx.commit_ts.isoformat(timespec="milliseconds"),
                streamPosition=f"mysql-bin.000004:{4_000 + self.change_number * 97}",
                transactionId=f"{0xA000 + tx.number:016X}",
                changeMask=mask(changed),
                columnMask=mask(list(ordinals.values())),
                transactionEventCounter=counter,
                transactionLastEvent=last,
            )
        if operation == "DELETE":
            after, before = before, None  # Qlik writes the deleted row in `data`
        message = {
            "data": None if after is None else {c.name: _value(c, after.get(c.name)) for c in columns},
            "beforeData": None if before is None else {c.name: _value(c, before.get(c.name)) for c in columns},
            "headers": headers,
        }
        envelope = {"magic": "atMSG", "type": "DT", "headers": None, "messageSchemaId": schema_id}
        self.dump.add(topic(spec), dumps({**envelope, "messageSchema": None, "message": message}), None, tx.commit_ts)


def _events(step: Step) -> int:
    """How many data messages a change becomes."""
    if step.change.op == "DDL":
        return 0
    return len(step.live) if step.change.op == "TRUNCATE" else 1


@register_renderer("qlik-json")
def render(history: History, out: Path) -> RenderedSource:
    writer = _Writer()
    steps = list(walk(history))
    totals: dict[int, int] = {}
    for step in steps:
        totals[step.tx.number] = totals.get(step.tx.number, 0) + _events(step)
    seen: dict[int, int] = {}
    for step in steps:
        count = _events(step)
        counter = seen.get(step.tx.number, 0) + 1
        seen[step.tx.number] = counter + count - 1
        writer.step(step, counter, counter + count - 1 == totals[step.tx.number])
    return finish("qlik-json", writer.dump, out / "qlik.jsonl", history, columns={})
