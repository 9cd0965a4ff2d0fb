"""Alibaba DataWorks real-time sync to Kafka conventions: `{"schema", "payload", "version"}`
messages, `schema.dataColumn` typing the images with DataWorks' six types (LONG, DOUBLE, BOOLEAN,
DATE = 13-digit epoch milliseconds, BYTES = base64, STRING), `schema.primaryKey`, and for a table
without one the `#alibaba_rds_row_id#` column DataWorks adds (MySQL). The full load is INSERTs;
an update is two messages, UPDATE_BEFOR then UPDATE_AFTER, with the same `sequenceId` (every
third update as the one-message mode: an UPDATE_AFTER with both images; a key change is always a
pair); DELETE carries the before image; each transaction's changes of a table sit between
TRANSACTION_BEGIN and TRANSACTION_END on that table's topic; the ADD COLUMN is an ALTER message
(the new `dataColumn` and `ddl.text`), the truncate a TRUNCATE message; MHEARTBEAT messages mark
the sync's progress. `sequenceId` increases with every change.

DataWorks' types are coarser than the source's, so the conf types the columns: decimals are
DOUBLE with their exact digits, dates DATE at midnight UTC, and timestamps STRING text (a DATE
holds milliseconds only, and the source's have microseconds)."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path
from typing import Any

from cdc_medallion.generator.database import Column, TableSpec
from cdc_medallion.generator.history import History, Row, Transaction
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import (
    Step,
    dumps,
    finish,
    json_value,
    millis,
    text_value,
    topic,
    walk,
)
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

DATAWORKS = {
    "int": "LONG",
    "bigint": "LONG",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "binary": "BYTES",
}
ROW_ID = "#alibaba_rds_row_id#"  # added by DataWorks to a MySQL table without a primary key
SEQUENCE_BASE = 1_772_352_000_000_000_000


def _type(column: Column) -> str:
    kind = column.spark_type
    if kind.startswith("decimal"):
        return "DOUBLE"
    return DATAWORKS.get(kind, "STRING")


def _value(column: Column, value: Any) -> Any:
    if value is None:
        return None
    kind = column.spark_type
    if kind == "date":
        return millis(dt.datetime.combine(value, dt.time()))
    if kind == "binary":
        return base64.b64encode(value).decode("ascii")
    if kind == "timestamp":
        return text_value(column, value)
    return json_value(column, value)  # numbers native (decimals with their exact digits)


class _Writer:
    def __init__(self) -> None:
        self.dump = KafkaDump()
        self.sequence = SEQUENCE_BASE
        self.updates = 0
        self.row_ids: dict[str, list[tuple[Row, int]]] = {}  # keyless table -> (row, row id)
        self.next_row_id = 0

    def emit(
        self, spec: TableSpec | None, columns: list[Column] | None, tx: Transaction, payload: dict[str, Any]
    ) -> None:
        if spec is None or columns is None:
            schema: dict[str, Any] = {"dataColumn": None, "primaryKey": None, "source": None}
        else:
            data_columns = [{"name": c.name, "type": _type(c)} for c in columns]
            if not spec.keys:
                data_columns.append({"name": ROW_ID, "type": "LONG"})
            schema = {
                "dataColumn": data_columns,
                "primaryKey": list(spec.keys) or None,
                "source": {"dbType": "MySQL", "dbName": "gen", "schemaName": spec.schema, "tableName": spec.name},
            }
        at = millis(tx.commit_ts)
        body = {
            "before": None,
            "after": None,
            "sequenceId": None,
            "timestamp": {"eventTime": at, "systemTime": at + 731, "checkpointTime": at},
            "op": None,
            "ddl": None,
            **payload,
        }
        name = topic(spec) if spec is not None else "gen.app.accounts"
        self.dump.add(name, dumps({"schema": schema, "payload": body, "version": "0.0.1"}), None, tx.commit_ts)

    def next_sequence(self) -> str:
        self.sequence += 1
        return str(self.sequence)

    def image(self, step: Step, row: Row | None, new: bool = False) -> dict | None:
        if row is None:
            return None
        data = {c.name: _value(c, row.get(c.name)) for c in step.columns}
        if not step.spec.keys:
            data[ROW_ID] = self.row_id(step.spec.name, row, new)
        return {"dataColumn": data}

    def row_id(self, table: str, row: Row, new: bool) -> int:
        known = self.row_ids.setdefault(table, [])
        if not new:
            for index, (other, number) in enumerate(known):
                if other == row:
                    del known[index]
                    return number
        self.next_row_id += 1
        known.append((row, self.next_row_id))
        return self.next_row_id

    def marker(self, step: Step, op: str) -> None:
        self.emit(step.spec, step.columns, step.tx, {"op": op, "sequenceId": self.next_sequence()})

    def step(self, step: Step) -> None:
        change, spec, columns, tx = step.change, step.spec, step.columns, step.tx
        if change.op == "DDL":
            self.emit(
                spec, columns, tx, {"op": "ALTER", "sequenceId": self.next_sequence(), "ddl": {"text": change.ddl}}
            )
        elif change.op == "TRUNCATE":
            ddl = {"text": f"TRUNCATE TABLE {spec.schema}.{spec.name}"}
            self.emit(spec, columns, tx, {"op": "TRUNCATE", "sequenceId": self.next_sequence(), "ddl": ddl})
            self.row_ids.pop(spec.name, None)
        elif change.op in ("SNAPSHOT", "INSERT"):
            after = self.image(step, change.after, new=True)
            self.emit(spec, columns, tx, {"op": "INSERT", "sequenceId": self.next_sequence(), "after": after})
        elif change.op == "DELETE":
            before = self.image(step, change.before)
            self.emit(spec, columns, tx, {"op": "DELETE", "sequenceId": self.next_sequence(), "before": before})
        else:
            self.updates += 1
            sequence = self.next_sequence()
            before, after = self.image(step, change.before), self.image(step, change.after, new=True)
            if self.updates % 3 == 0 and not step.key_moved():  # "one Kafka record per update" mode
                self.emit(
                    spec, columns, tx, {"op": "UPDATE_AFTER", "sequenceId": sequence, "before": before, "after": after}
                )
            else:
                self.emit(spec, columns, tx, {"op": "UPDATE_BEFOR", "sequenceId": sequence, "before": before})
                self.emit(spec, columns, tx, {"op": "UPDATE_AFTER", "sequenceId": sequence, "after": after})

    def heartbeat(self, tx: Transaction) -> None:
        self.emit(None, None, tx, {"op": "MHEARTBEAT"})


@register_renderer("dataworks-json")
def render(history: History, out: Path) -> RenderedSource:
    writer = _Writer()
    steps = list(walk(history))
    last: dict[tuple[int, str], int] = {}  # (transaction, table) -> index of its last step
    for index, step in enumerate(steps):
        last[(step.tx.number, step.spec.name)] = index
    middle = history.transactions[len(history.transactions) // 2].number
    opened: set[tuple[int, str]] = set()
    for index, step in enumerate(steps):
        group = (step.tx.number, step.spec.name)
        if step.tx.number == middle and not opened & {(middle, t.name) for t in history.tables}:
            writer.heartbeat(step.tx)
        if not step.tx.snapshot and group not in opened:
            writer.marker(step, "TRANSACTION_BEGIN")
        opened.add(group)
        writer.step(step)
        if not step.tx.snapshot and last[group] == index:
            writer.marker(step, "TRANSACTION_END")
    writer.heartbeat(history.transactions[-1])
    return finish("dataworks-json", writer.dump, out / "dataworks.jsonl", history)
