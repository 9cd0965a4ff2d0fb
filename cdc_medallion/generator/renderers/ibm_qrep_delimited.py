"""IBM Db2 Q Replication Event Publishing, delimited messages: each message carries a whole
transaction (one change-data record per row operation, record delimiter new line); every other
transaction of three records or more is segmented over several messages (segments 0001, 0002,
..., and 0000 for the last). A record is the 12-field header (type, identifier, put date
YYYYddd and time HHMMSSmmmmmm, owner, table, ISRT / REPL / DLET, unit-of-work id, commit LSN,
commit time, plan name, segment number), then the before and the after values in column-ID
order: NULL as nothing between two delimiters, character, date, time, timestamp and LOB values
inside the string delimiter (a string delimiter inside a value doubled), numbers bare, BLOBs as
hex. Messages are landed as Kafka-dump lines of one send queue's topic.

The messages name no columns: the source's `tables` option lists each table's columns and Db2
types (RenderedSource.columns). Event Publishing sends no truncate, DDL or full-load records:
the snapshot is published as the first transaction's inserts, a truncate as the deletes of its
rows (a `DELETE FROM`), and since the `tables` option is one column list per table the column
added by DDL is in it from the start (sent as NULL until the ADD COLUMN)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from cdc_medallion.generator.database import Column
from cdc_medallion.generator.history import History, Row, Transaction
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import walk
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

QUOTE = '"'
QUOTED_KINDS = ("string", "date", "timestamp", "binary")
SEGMENT_SIZE = 3  # records per message of a segmented transaction


def _field(column: Column, value: Any) -> str:
    if value is None:
        return ""
    kind = column.spark_type
    if kind == "boolean":
        text = "1" if value else "0"
    elif kind == "binary":
        text = value.hex().upper()
    elif kind == "timestamp":
        text = value.strftime("%Y-%m-%d-%H.%M.%S.%f")
    elif kind == "double":
        text = repr(value)
    else:
        text = str(value)
    if kind in QUOTED_KINDS:
        return QUOTE + text.replace(QUOTE, QUOTE * 2) + QUOTE
    return text


def _groups(number: int, groups: int) -> str:
    digits = f"{number:0{4 * groups}x}"
    return ":".join(digits[i : i + 4] for i in range(0, len(digits), 4))


class _Writer:
    def __init__(self, history: History) -> None:
        self.history = history
        self.dump = KafkaDump()
        self.columns = {t.name: history.columns_at_end(t.name) for t in history.tables}

    def record(self, tx: Transaction, table: str, op: str, before: Row | None, after: Row | None, put: dt.datetime):
        spec = self.history.table(table)
        header = [
            "10",
            "IBM",
            f"{put.year}{put.timetuple().tm_yday:03d}",
            put.strftime("%H%M%S%f"),
            spec.schema.upper(),
            spec.name.upper(),
            op,
            _groups(0x3884642 + tx.number * 0x10, 6),
            _groups(0x271000C + tx.number * 0x1000, 8),
            tx.commit_ts.strftime("%Y-%m-%d-%H.%M.%S"),
            "ASNQCAP",
        ]
        quoted = [header[0], *(QUOTE + h + QUOTE for h in header[1:])]
        columns = self.columns[table]
        values = [_field(c, (before or {}).get(c.name)) for c in columns]
        values += [_field(c, (after or {}).get(c.name)) for c in columns]
        return quoted, values

    def transaction(self, tx: Transaction, records: list[tuple[list[str], list[str]]]) -> None:
        segmented = len(records) >= SEGMENT_SIZE and tx.number % 2 == 1
        chunks = (
            [records[i : i + SEGMENT_SIZE] for i in range(0, len(records), SEGMENT_SIZE)] if segmented else [records]
        )
        for number, chunk in enumerate(chunks, start=1):
            segment = "0000" if number == len(chunks) else f"{number:04d}"
            lines = [",".join([*header, segment, *values]) for header, values in chunk]
            self.dump.add("gen.qrep.sendq", "\n".join(lines), None, tx.commit_ts)


@register_renderer("ibm-qrep-delimited")
def render(history: History, out: Path) -> RenderedSource:
    writer = _Writer(history)
    by_tx: dict[int, list] = {}
    transactions = {tx.number: tx for tx in history.transactions}
    for step in walk(history):
        tx, change = step.tx, step.change
        put = tx.commit_ts + dt.timedelta(milliseconds=40)
        records = by_tx.setdefault(tx.number, [])
        if change.op == "TRUNCATE":
            records += [writer.record(tx, change.table, "DLET", row, None, put) for row in step.live.values()]
        elif change.op != "DDL":
            op = {"SNAPSHOT": "ISRT", "INSERT": "ISRT", "UPDATE": "REPL", "DELETE": "DLET"}[change.op]
            records.append(writer.record(tx, change.table, op, change.before, change.after, put))
    for number, records in by_tx.items():
        if records:
            writer.transaction(transactions[number], records)
    path = out / "ibm_qrep.jsonl"
    count = writer.dump.write(path)
    keys = {t.name: t.keys for t in history.tables if t.keys}
    columns = {t.name: {c.name: c.sql_type for c in history.columns_at_end(t.name)} for t in history.tables}
    # The records carry no column names: the format reads them from its `tables` option, in
    # column-ID order (the conf's `tables[].columns` type gold; they do not name fields).
    options = {"tables": {table: dict(typed) for table, typed in columns.items()}}
    return RenderedSource("ibm-qrep-delimited", path, "kafka-dump", options, keys, columns, count)
