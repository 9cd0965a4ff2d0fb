"""The embedded sample behind `make run`: a small shop database's history as Debezium messages.

Written as Kafka-dump JSON lines (topic/partition/offset/key/value), PostgreSQL connector
conventions, with the schema envelope: a snapshot, inserts, updates, deletes with tombstones,
a truncate-free history over three tables (one with a composite key), and a few malformed
lines. `expected_state` is the ground truth the tests compare gold with.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import random
from pathlib import Path
from typing import Any

TABLES = {
    "customers": {
        "keys": ["id"],
        "fields": [
            ("id", "int32", None),
            ("name", "string", None),
            ("email", "string", None),
            ("born", "int32", "io.debezium.time.Date"),
        ],
    },
    "orders": {
        "keys": ["order_id"],
        "fields": [
            ("order_id", "int64", None),
            ("customer_id", "int32", None),
            ("total", "bytes", "decimal"),
            ("status", "string", None),
            ("placed_at", "int64", "io.debezium.time.MicroTimestamp"),
        ],
    },
    "order_lines": {
        "keys": ["order_id", "line_no"],
        "fields": [
            ("order_id", "int64", None),
            ("line_no", "int32", None),
            ("sku", "string", None),
            ("qty", "int32", None),
        ],
    },
}
MALFORMED = [
    '{"schema": {"type": "struct"}, "payload": {"op": "c", "after": {"id": 1}',  # truncated
    '{"payload": {"op": "x", "after": {"id": 1}, "source": {"table": "customers", "lsn": 1}}}',  # unknown op
    '["not", "an", "object"]',
]


def _field(name: str, connect: str, logical: str | None) -> dict[str, Any]:
    field: dict[str, Any] = {"field": name, "type": connect, "optional": True}
    if logical == "decimal":
        field.update(
            name="org.apache.kafka.connect.data.Decimal", parameters={"scale": "2", "connect.decimal.precision": "10"}
        )
    elif logical:
        field["name"] = logical
    return field


def _schema(table: str) -> dict[str, Any]:
    row = {"type": "struct", "optional": True, "fields": [_field(*f) for f in TABLES[table]["fields"]]}
    return {
        "type": "struct",
        "name": f"shop.inventory.{table}.Envelope",
        "fields": [
            {**row, "field": "before", "name": f"shop.inventory.{table}.Value"},
            {**row, "field": "after", "name": f"shop.inventory.{table}.Value"},
            {"type": "struct", "field": "source", "name": "io.debezium.connector.postgresql.Source", "fields": []},
            {"type": "string", "field": "op"},
            {"type": "int64", "field": "ts_ms", "optional": True},
        ],
    }


def _encode(table: str, row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    encoded = {}
    for name, _, logical in TABLES[table]["fields"]:
        value = row.get(name)
        if value is not None and logical == "decimal":
            unscaled = int(decimal.Decimal(value).scaleb(2))
            value = base64.b64encode(unscaled.to_bytes(8, "big", signed=True)).decode()
        elif value is not None and logical == "io.debezium.time.Date":
            value = (value - dt.date(1970, 1, 1)).days
        elif value is not None and logical == "io.debezium.time.MicroTimestamp":
            value = int((value - dt.datetime(1970, 1, 1)).total_seconds() * 1_000_000)
        encoded[name] = value
    return encoded


class _History:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.lsn = 10_000
        self.offset = 0
        self.lines: list[str] = []
        self.state: dict[str, dict[tuple, dict[str, Any]]] = {t: {} for t in TABLES}
        self.clock = dt.datetime(2026, 1, 5, 9, 0, 0)

    def emit(self, table: str, op: str, before: dict | None, after: dict | None, snapshot: bool = False) -> None:
        self.lsn += self.random.randint(8, 64)
        self.clock += dt.timedelta(seconds=self.random.randint(1, 90))
        ts = int((self.clock - dt.datetime(1970, 1, 1)).total_seconds() * 1000)
        keys = TABLES[table]["keys"]
        image = after if after is not None else before
        key = {
            "schema": {
                "type": "struct",
                "name": f"shop.inventory.{table}.Key",
                "fields": [_field(*f) for f in TABLES[table]["fields"] if f[0] in keys],
            },
            "payload": {k: image[k] for k in keys},
        }
        value = {
            "schema": _schema(table),
            "payload": {
                "before": _encode(table, before),
                "after": _encode(table, after),
                "source": {
                    "version": "2.7.0.Final",
                    "connector": "postgresql",
                    "name": "shop",
                    "ts_ms": ts,
                    "snapshot": "true" if snapshot else "false",
                    "db": "shop",
                    "schema": "inventory",
                    "table": table,
                    "txId": self.lsn // 100,
                    "lsn": self.lsn,
                    "xmin": None,
                },
                "op": op,
                "ts_ms": ts + 120,
            },
        }
        self._line(table, json.dumps(key, separators=(",", ":")), json.dumps(value, separators=(",", ":")), ts)
        if op == "d":  # Debezium follows a delete with a tombstone for log compaction
            self._line(table, json.dumps(key, separators=(",", ":")), None, ts)
        identity = tuple(image[k] for k in keys)
        if op == "d":
            self.state[table].pop(identity, None)
        else:
            self.state[table][identity] = dict(after or {})

    def _line(self, table: str, key: str, value: str | None, ts: int) -> None:
        self.lines.append(
            json.dumps(
                {
                    "topic": f"shop.inventory.{table}",
                    "partition": 0,
                    "offset": self.offset,
                    "timestamp": ts,
                    "key": key,
                    "value": value,
                },
                separators=(",", ":"),
            )
        )
        self.offset += 1

    def malformed(self, text: str) -> None:
        self._line("customers", None, text, 0)  # type: ignore[arg-type]


def build(seed: int = 7) -> _History:
    history = _History(seed)
    rnd = history.random
    names = ["Anne", "Bilal", "Chen", "Dagny", "Émile", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemal", "Lîla"]
    for i in range(1, 13):  # snapshot of existing customers
        history.emit(
            "customers",
            "r",
            None,
            {
                "id": i,
                "name": names[i - 1],
                "email": f"c{i}@example.com",
                "born": dt.date(1970 + i, (i % 12) + 1, 1 + i),
            },
            snapshot=True,
        )
    order_id = 1000
    for step in range(150):
        choice = rnd.random()
        customers = history.state["customers"]
        if choice < 0.35 or not history.state["orders"]:
            order_id += 1
            customer = rnd.choice(sorted(customers)) if customers else (1,)
            order = {
                "order_id": order_id,
                "customer_id": customer[0],
                "total": f"{rnd.randint(100, 99999) / 100:.2f}",
                "status": "new",
                "placed_at": history.clock,
            }
            history.emit("orders", "c", None, order)
            for line_no in range(1, rnd.randint(2, 4)):
                history.emit(
                    "order_lines",
                    "c",
                    None,
                    {
                        "order_id": order_id,
                        "line_no": line_no,
                        "sku": f"SKU-{rnd.randint(1, 40):03d}",
                        "qty": rnd.randint(1, 5),
                    },
                )
        elif choice < 0.65:
            key = rnd.choice(sorted(history.state["orders"]))
            before = history.state["orders"][key]
            after = {**before, "status": rnd.choice(["paid", "shipped", "delivered"])}
            history.emit("orders", "u", before, after)
        elif choice < 0.75 and history.state["order_lines"]:
            key = rnd.choice(sorted(history.state["order_lines"]))
            history.emit("order_lines", "d", history.state["order_lines"][key], None)
        elif choice < 0.85 and customers:
            key = rnd.choice(sorted(customers))
            before = customers[key]
            history.emit("customers", "u", before, {**before, "email": f"{before['name'].lower()}.{step}@example.org"})
        elif choice < 0.95:
            new_id = 100 + step
            history.emit("customers", "c", None, {"id": new_id, "name": f"Guest {step}", "email": None, "born": None})
        elif customers and rnd.random() < 0.5:
            key = rnd.choice(sorted(customers))
            history.emit("customers", "d", customers[key], None)
        if step in (20, 60, 100):
            history.malformed(MALFORMED[(step // 40) % len(MALFORMED)])
        if step == 120:  # a line that is not even a Kafka record: still landed, then quarantined
            history.lines.append("this line is not a kafka-dump record")
            history.offset += 1
    return history


def write(path: Path, seed: int = 7) -> _History:
    history = build(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(history.lines) + "\n", encoding="utf-8")
    return history


def expected_state(seed: int = 7) -> dict[str, dict[tuple, dict[str, Any]]]:
    """Final rows per table, keyed by primary key, as Python values."""
    return build(seed).state


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "samples/debezium/shop.jsonl")
    written = write(target)
    print(f"wrote {len(written.lines)} messages to {target}")
