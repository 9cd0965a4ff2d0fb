"""Local bronze landing from files, byte-exact and incremental.

Three layouts: `json-lines` (one message per line), `kafka-dump` (one JSON object per line
with topic/partition/offset/timestamp/key/value or value_base64/headers; `kafka_dump.py`) and
`files` (one message per file). How far each file has been landed is recorded as app
transactions in the same commit as the rows (bytes and lines consumed), so a re-run resumes
exactly there.

A batch's lines are read as one block and cut at its newlines, and its columns built as Arrow
arrays: a Python dict per message, turned into Arrow by `from_pylist`, cost about 10 µs a
message, more than reading it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from cdc_medallion.config import DEFAULT_MAX_BYTES_PER_BATCH, SourceConf
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.sources.kafka_dump import KAFKA_COLUMNS, unpack_lines
from cdc_medallion.storage.delta_rs import arrow_schema

Committed = Callable[[str], int | None]
BRONZE_ARROW = arrow_schema(BRONZE_SCHEMA)
_FIRST_READ = 1 << 20  # a block is read in growing pieces, so a small batch reads little


@dataclass
class LandingBatch:
    """New messages plus the progress to commit with them."""

    tables: list[pa.Table] = field(default_factory=list)
    txns: dict[str, int] = field(default_factory=dict)
    more: bool = False
    bytes_read: int = 0
    messages: int = 0

    def add(self, table: pa.Table) -> None:
        self.tables.append(table)
        self.messages += table.num_rows

    def to_arrow(self) -> pa.Table:
        return pa.concat_tables(self.tables) if self.tables else BRONZE_ARROW.empty_table()


def _file_id(path: Path) -> str:
    return hashlib.sha1(str(path).encode("utf-8")).hexdigest()[:20]


class FileLanding:
    """Reads the messages of one source's input that are not landed yet."""

    def __init__(self, source: SourceConf, max_messages: int, max_bytes: int = DEFAULT_MAX_BYTES_PER_BATCH) -> None:
        if source.input is None:
            raise ValueError(f"source {source.name!r} has no local input")
        self.source = source
        self.input = source.input
        self.max_messages = max_messages
        self.max_bytes = max_bytes

    def files(self) -> list[Path]:
        path = self.input.path
        if path.is_file():
            return [path]
        if not path.is_dir():
            return []
        return sorted(p for p in path.rglob(self.input.pattern) if p.is_file() and not p.name.startswith("."))

    def app_ids(self, path: Path) -> tuple[str, str]:
        base = f"land:{self.source.name}:{_file_id(path)}"
        return f"{base}:bytes", f"{base}:lines"

    def next_batch(self, committed: Committed) -> LandingBatch:
        batch = LandingBatch()
        now = dt.datetime.now(dt.UTC)
        for path in self.files():
            if batch.messages >= self.max_messages or batch.bytes_read >= self.max_bytes:
                batch.more = True
                break
            bytes_id, lines_id = self.app_ids(path)
            start = committed(bytes_id) or 0
            line = committed(lines_id) or 0
            size = path.stat().st_size
            if self.input.layout == "files":
                if start > 0:
                    continue
                batch.add(self._table([path.read_bytes()], b"", path, 0, now))
                batch.txns[bytes_id] = max(size, 1)
                batch.txns[lines_id] = 1
                batch.bytes_read += size
                continue
            if start >= size:
                continue
            with path.open("rb") as handle:
                handle.seek(start)
                block = _read_block(handle, self.max_bytes - batch.bytes_read, self.max_messages - batch.messages)
            messages = _messages(block)
            batch.add(self._table(messages, block, path, line, now))
            end = start + len(block)
            batch.txns[bytes_id] = end
            batch.txns[lines_id] = line + len(messages)
            batch.bytes_read += len(block)
            if end < size:
                batch.more = True
        return batch

    def _table(self, messages: list[bytes], block: bytes, path: Path, first_line: int, now: dt.datetime) -> pa.Table:
        count = len(messages)
        if self.input.layout == "kafka-dump":
            kafka = unpack_lines(messages, block, self.source.topic)
        else:
            kafka = _raw_messages(messages, self.source.topic)
        columns = {
            "_source": pa.repeat(pa.scalar(self.source.name, pa.string()), count),
            "_file": pa.repeat(pa.scalar(str(path), pa.string()), count),
            "_line": pa.array(np.arange(first_line, first_line + count, dtype=np.int64)),
            "_ingest_ts": pa.repeat(pa.scalar(now, BRONZE_ARROW.field("_ingest_ts").type), count),
        }
        return pa.Table.from_arrays(
            [columns[name] if name in columns else kafka.column(name) for name in BRONZE_ARROW.names],
            schema=BRONZE_ARROW,
        )


def _read_block(handle: BinaryIO, max_bytes: int, max_messages: int) -> bytes:
    """The next whole lines: up to `max_messages`, and up to the first that reaches `max_bytes`
    (so one line bigger than the budget still lands). A final line without a newline is one."""
    pieces: list[bytes] = []
    size = newlines = 0
    step = _FIRST_READ
    while size < max_bytes and newlines < max_messages:
        piece = handle.read(min(step, max_bytes - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        newlines += piece.count(b"\n")
        step *= 2
    block = b"".join(pieces)
    if newlines >= max_messages:
        end = -1
        for _ in range(max_messages):
            end = block.index(b"\n", end + 1)
        return block[: end + 1]
    if size >= max_bytes and not block.endswith(b"\n"):
        block += handle.readline()  # the line that crosses the budget
    return block


def _messages(block: bytes) -> list[bytes]:
    """A block's lines without their b'\\n' (a b'\\r' before it is part of the message)."""
    messages = block.split(b"\n")
    if not messages[-1]:
        messages.pop()
    return messages


def _raw_messages(messages: list[bytes], topic: str | None) -> pa.Table:
    """Messages landed as they are: the value is the message's bytes, Kafka's other columns empty."""
    count = len(messages)
    columns = {name: pa.nulls(count, KAFKA_COLUMNS.field(name).type) for name in KAFKA_COLUMNS.names}
    columns["value"] = pa.array(messages, pa.binary())
    columns["topic"] = pa.repeat(pa.scalar(topic, pa.string()), count)
    return pa.table(columns, schema=KAFKA_COLUMNS)
