"""Canal JSON conventions (MySQL binlog as Canal's flat message): consecutive rows of one table and
operation in a transaction share a multi-row message (`data[]`), an UPDATE's `old[]` holds only
the changed columns' previous values (a key change is an UPDATE whose `old` has the key), the
full load is `INIT`, the ADD COLUMN is an `isDdl` ALTER message and the truncate an `isDdl`
TRUNCATE message. Values are strings typed by `mysqlType`/`sqlType`; binary is ISO-8859-1 text.
MySQL's BOOLEAN is `tinyint(1)` (values 1/0), so the conf types those columns boolean."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdc_medallion.generator.database import Column
from cdc_medallion.generator.history import History
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import (
    Step,
    boolean_columns,
    dumps,
    finish,
    millis,
    text_value,
    topic,
    walk,
)
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

# Spark type -> (mysqlType, java.sql.Types)
MYSQL = {
    "int": ("int(11)", 4),
    "bigint": ("bigint(20)", -5),
    "double": ("double", 8),
    "boolean": ("tinyint(1)", -6),
    "date": ("date", 91),
    "timestamp": ("datetime(6)", 93),
    "binary": ("blob", 2004),
}
OPS = {"SNAPSHOT": "INIT", "INSERT": "INSERT", "UPDATE": "UPDATE", "DELETE": "DELETE"}


def _mysql(column: Column) -> tuple[str, int]:
    kind = column.spark_type
    if kind.startswith("decimal"):
        return kind, 3
    if kind == "string":
        return ("longtext", 2005) if column.sql_type == "CLOB" else (column.sql_type.lower(), 12)
    return MYSQL[kind]


def _text(column: Column, value: Any) -> str | None:
    if value is None:
        return None
    if column.spark_type == "binary":
        return value.decode("latin-1")
    if column.spark_type == "boolean":
        return "1" if value else "0"
    return text_value(column, value)


class _Writer:
    def __init__(self) -> None:
        self.dump = KafkaDump()
        self.id = 0
        self.pending: tuple[Step, str] | None = None
        self.rows: list[dict] = []
        self.olds: list[dict] = []

    def step(self, step: Step) -> None:
        change = step.change
        if change.op in ("DDL", "TRUNCATE"):
            self.flush()
            kind = "ALTER" if change.op == "DDL" else "TRUNCATE"
            sql = change.ddl or f"TRUNCATE TABLE {step.spec.name}"
            self.emit(step, {"data": None, "isDdl": True, "old": None, "pkNames": None, "sql": sql, "type": kind})
            return
        code = OPS[change.op]
        current = self.pending
        if current is None or current[1] != code or current[0].spec is not step.spec or current[0].tx is not step.tx:
            self.flush()
            self.pending = (step, code)
        columns = step.columns
        row = change.before if change.op == "DELETE" else change.after
        self.rows.append({c.name: _text(c, row.get(c.name)) for c in columns})  # type: ignore[union-attr]
        if change.op == "UPDATE":
            self.olds.append({c.name: _text(c, change.before.get(c.name)) for c in columns if c.name in change.changed})

    def flush(self) -> None:
        if self.pending is None:
            return
        step, code = self.pending
        columns = step.columns
        self.emit(
            step,
            {
                "data": self.rows,
                "isDdl": False,
                "mysqlType": {c.name: _mysql(c)[0] for c in columns},
                "old": self.olds if code == "UPDATE" else None,
                "pkNames": list(step.spec.keys) or None,
                "sql": "",
                "sqlType": {c.name: _mysql(c)[1] for c in columns},
                "type": code,
            },
        )
        self.pending, self.rows, self.olds = None, [], []

    def emit(self, step: Step, body: dict) -> None:
        self.id += 1
        es = millis(step.tx.commit_ts)
        document = {"data": body.pop("data"), "database": step.spec.schema, "es": es, "id": self.id, **body}
        document.update(table=step.spec.name, ts=es + 5)
        self.dump.add(topic(step.spec), dumps(document), None, step.tx.commit_ts)


@register_renderer("canal-json")
def render(history: History, out: Path) -> RenderedSource:
    writer = _Writer()
    for step in walk(history):
        writer.step(step)
    writer.flush()
    return finish("canal-json", writer.dump, out / "canal.jsonl", history, columns=boolean_columns(history))
