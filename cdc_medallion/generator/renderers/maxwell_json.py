"""Maxwell conventions (MySQL binlog): one message per row, `xid`/`xoffset` with `commit` on the
transaction's last row, `old` with only the changed columns' previous values (a key change is an
update whose `old` has the key), the full load as a bootstrap (bootstrap-start, bootstrap-insert
rows, bootstrap-complete per table), the ADD COLUMN as a `table-alter` message (output_ddl), the
key in the Kafka key (`pk.<col>`) and `primary_key_columns` (output_primary_key_columns).

Values are typed JSON (MySQL BOOLEAN = tinyint(1) as 1/0, blobs base64, datetimes as text), so
the conf types the columns. Maxwell emits nothing for a TRUNCATE (it is neither a row event nor
a schema change it captures): the renderer writes the equivalent `DELETE FROM`, one delete per
row, so that the ground truth still holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cdc_medallion.generator.database import Column
from cdc_medallion.generator.history import History, Row
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import Step, dumps, finish, image, json_value, millis, topic, walk
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump


def _value(column: Column, value: Any) -> Any:
    if value is not None and column.spark_type == "boolean":
        return 1 if value else 0
    return json_value(column, value)


class _Writer:
    def __init__(self, history: History) -> None:
        self.history = history
        self.dump = KafkaDump()

    def add(self, step: Step, document: dict, row: Row | None = None) -> None:
        spec = step.spec
        head = {"database": spec.schema, "table": spec.name, "type": document.pop("type")}
        head["ts"] = millis(step.tx.commit_ts) // 1000
        key: dict[str, Any] = {"database": spec.schema, "table": spec.name}
        for name in spec.keys:
            key[f"pk.{name}"] = _value(spec.column(name), (row or {}).get(name))
        self.dump.add(topic(spec), dumps({**head, **document}), json.dumps(key), step.tx.commit_ts)

    def row(self, step: Step, kind: str, data: Row, old: dict | None, offset: int, last: bool) -> None:
        document: dict[str, Any] = {"type": kind, "xid": 1_000 + step.tx.number, "xoffset": offset}
        if last:
            document["commit"] = True
        document["data"] = image(step.columns, data, _value)
        if old is not None:
            document["old"] = old
        if step.spec.keys:
            document["primary_key_columns"] = list(step.spec.keys)
        self.add(step, document, data)


@register_renderer("maxwell-json")
def render(history: History, out: Path) -> RenderedSource:
    writer = _Writer(history)
    steps = list(walk(history))
    snapshot = [s for s in steps if s.tx.snapshot]
    for spec in history.tables:
        mine = [s for s in snapshot if s.spec is spec]
        if not mine:
            continue
        writer.add(mine[0], {"type": "bootstrap-start", "data": {}})
        for step in mine:
            document = {"type": "bootstrap-insert", "data": image(step.columns, step.change.after, _value)}
            writer.add(step, document, step.change.after)
        writer.add(mine[-1], {"type": "bootstrap-complete", "data": {}})
    by_tx: dict[int, list[Step]] = {}
    for step in steps:
        if not step.tx.snapshot:
            by_tx.setdefault(step.tx.number, []).append(step)
    for tx_steps in by_tx.values():
        rows: list[tuple[Step, str, Row, dict | None]] = []
        for step in tx_steps:
            change = step.change
            if change.op == "DDL":
                writer.add(step, {"type": "table-alter", "sql": change.ddl, "xid": 1_000 + step.tx.number})
            elif change.op == "TRUNCATE":
                rows += [(step, "delete", row, None) for row in step.live.values()]
            elif change.op == "INSERT":
                rows.append((step, "insert", change.after, None))  # type: ignore[arg-type]
            elif change.op == "DELETE":
                rows.append((step, "delete", change.before, None))  # type: ignore[arg-type]
            else:
                old = image(step.columns, change.before, _value, only=change.changed)
                rows.append((step, "update", change.after, old))  # type: ignore[arg-type]
        for offset, (step, kind, data, old) in enumerate(rows):
            writer.row(step, kind, data, old, offset, offset == len(rows) - 1)
    return finish("maxwell-json", writer.dump, out / "maxwell.jsonl", history)
