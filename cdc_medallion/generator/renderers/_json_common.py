"""What the JSON renderers share: walking the history with each table's current columns and rows,
encoding values as vendor text or typed JSON, and writing one Kafka-dump topic per table."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_medallion.generator.database import Column, TableSpec
from cdc_medallion.generator.history import Change, History, Key, Row, Transaction
from cdc_medallion.generator.renderers import RenderedSource
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

EPOCH = dt.datetime(1970, 1, 1)
_MARK = "\u0000DEC:"
_LINE_BREAKS = ("\x85", "\u2028", "\u2029")
_RAW_NUMBER = re.compile(r'"\\u0000DEC:(-?[0-9.]+)"')


def millis(ts: dt.datetime) -> int:
    """Epoch milliseconds of a naive UTC time."""
    return int((ts - EPOCH).total_seconds() * 1000)


def text_value(column: Column, value: Any) -> str | None:
    """A value as text, the way text-valued formats write it (binary as base64)."""
    if value is None:
        return None
    kind = column.spark_type
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "binary":
        return base64.b64encode(value).decode("ascii")
    if kind == "timestamp":
        return value.isoformat(sep=" ", timespec="microseconds")
    if kind == "double":
        return repr(value)
    return str(value)


def json_value(column: Column, value: Any) -> Any:
    """A value as typed JSON: numbers and booleans native, decimals exact, the rest as text."""
    if value is None:
        return None
    kind = column.spark_type
    if kind in ("int", "bigint", "boolean", "double", "string"):
        return value
    if kind.startswith("decimal"):
        return _MARK + str(value)  # written as a raw JSON number by `dumps`
    return text_value(column, value)


def dumps(document: Any) -> str:
    """Compact JSON, non-ASCII kept, decimals written as exact numbers. The characters Python's
    `splitlines` breaks lines at (NEL, LINE / PARAGRAPH SEPARATOR) are escaped, so that a message
    stays on its line for line-based readers."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    for char in _LINE_BREAKS:
        text = text.replace(char, f"\\u{ord(char):04x}")
    return _RAW_NUMBER.sub(r"\1", text)


def image(columns: list[Column], row: Row | None, encode=json_value, only: tuple[str, ...] | None = None) -> Any:
    if row is None:
        return None
    return {c.name: encode(c, row.get(c.name)) for c in columns if only is None or c.name in only}


@dataclass
class Step:
    """One change with its context: the table, its columns at that point, its position."""

    tx: Transaction
    index: int  # change index within the transaction
    change: Change
    spec: TableSpec
    columns: list[Column]
    live: dict[Key, Row]  # a truncate's rows before it (to expand it); empty for other changes

    def key_moved(self) -> bool:
        change = self.change
        return change.op == "UPDATE" and any(change.before[k] != change.after[k] for k in self.spec.keys)  # type: ignore[index]


def walk(history: History) -> Iterator[Step]:
    """Every change in commit order; DDL steps come after the table's columns grew."""
    columns = {t.name: list(t.columns) for t in history.tables}
    live: dict[str, dict[Key, Row]] = {t.name: {} for t in history.tables}
    for tx in history.transactions:
        for index, change in enumerate(tx.changes):
            spec = history.table(change.table)
            if change.op == "DDL" and change.added is not None:
                columns[spec.name].append(change.added)
            rows = live[spec.name]
            # Only a truncate needs the rows it removes: copying the table for every change would
            # make rendering quadratic in time and memory.
            before = dict(rows) if change.op == "TRUNCATE" else {}
            yield Step(tx, index, change, spec, list(columns[spec.name]), before)
            _apply(spec, rows, change)


def _apply(spec: TableSpec, rows: dict[Key, Row], change: Change) -> None:
    def key(row: Row) -> Key:
        return tuple(row[k] for k in spec.keys) if spec.keys else tuple(sorted(row.items(), key=repr))

    if change.op == "TRUNCATE":
        rows.clear()
    if change.before is not None:
        rows.pop(key(change.before), None)
    if change.after is not None:
        rows[key(change.after)] = change.after


def topic(spec: TableSpec) -> str:
    return f"gen.{spec.schema}.{spec.name}"


def keyed(history: History) -> dict[str, tuple[str, ...]]:
    return {t.name: t.keys for t in history.tables if t.keys}


def declared_columns(history: History) -> dict[str, dict[str, str]]:
    """Each keyed table's declared column types, for formats whose messages do not type them."""
    return {name: {c.name: c.spark_type for c in history.columns_at_end(name)} for name in keyed(history)}


def boolean_columns(history: History) -> dict[str, dict[str, str]]:
    """Only the boolean columns (MySQL BOOLEAN is tinyint(1): its messages type it as a number)."""
    typed = {
        name: {c: t for c, t in cols.items() if t == "boolean"} for name, cols in declared_columns(history).items()
    }
    return {name: cols for name, cols in typed.items() if cols}


def finish(
    fmt: str,
    dump: KafkaDump,
    path: Path,
    history: History,
    options: dict[str, Any] | None = None,
    columns: dict[str, dict[str, str]] | None = None,
) -> RenderedSource:
    """Write the dump and describe it: keyed tables, and column types (default: all declared ones)."""
    count = dump.write(path)
    typed = declared_columns(history) if columns is None else columns
    return RenderedSource(fmt, path, "kafka-dump", dict(options or {}), keyed(history), typed, count)
