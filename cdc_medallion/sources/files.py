"""Local bronze landing from files, byte-exact and incremental.

Three layouts: `json-lines` (one message per line), `kafka-dump` (one JSON object per line
with topic/partition/offset/timestamp/key/value or value_base64/headers) and `files` (one
message per file). How far each file has been landed is recorded as app transactions in the
same commit as the rows (bytes and lines consumed), so a re-run resumes exactly there.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from cdc_medallion.config import DEFAULT_MAX_BYTES_PER_BATCH, SourceConf
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.storage.delta_rs import arrow_schema

Committed = Callable[[str], int | None]


@dataclass
class LandingBatch:
    """New messages plus the progress to commit with them."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    txns: dict[str, int] = field(default_factory=dict)
    more: bool = False
    bytes_read: int = 0

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=arrow_schema(BRONZE_SCHEMA))


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
            if len(batch.rows) >= self.max_messages or batch.bytes_read >= self.max_bytes:
                batch.more = True
                break
            bytes_id, lines_id = self.app_ids(path)
            start = committed(bytes_id) or 0
            line = committed(lines_id) or 0
            size = path.stat().st_size
            if self.input.layout == "files":
                if start > 0:
                    continue
                batch.rows.append(self._row(path.read_bytes(), path, 0, now))
                batch.txns[bytes_id] = max(size, 1)
                batch.txns[lines_id] = 1
                batch.bytes_read += size
                continue
            if start >= size:
                continue
            end, line = self._read_lines(path, start, line, now, batch)
            batch.txns[bytes_id] = end
            batch.txns[lines_id] = line
            batch.bytes_read += end - start
            if end < size:
                batch.more = True
        return batch

    def _read_lines(self, path: Path, start: int, line: int, now: dt.datetime, batch: LandingBatch) -> tuple[int, int]:
        position = start
        with path.open("rb") as handle:
            handle.seek(start)
            for raw in _lines(handle):
                position += len(raw)
                message = raw[:-1] if raw.endswith(b"\n") else raw
                batch.rows.append(self._row(message, path, line, now))
                line += 1
                if len(batch.rows) >= self.max_messages or batch.bytes_read + position - start >= self.max_bytes:
                    break
        return position, line

    def _row(self, raw: bytes, path: Path, line: int, now: dt.datetime) -> dict[str, Any]:
        row: dict[str, Any] = {
            "key": None,
            "value": raw,
            "topic": self.source.topic,
            "partition": None,
            "offset": None,
            "timestamp": None,
            "headers": None,
            "_source": self.source.name,
            "_file": str(path),
            "_line": line,
            "_ingest_ts": now,
            "_landing_error": None,
        }
        if self.input.layout == "kafka-dump":
            _fill_from_dump(row, raw)
        return row


def _lines(handle: Any) -> Iterator[bytes]:
    """Lines including their b'\\n'; a final line without one is still a message."""
    yield from iter(handle.readline, b"")


def _fill_from_dump(row: dict[str, Any], raw: bytes) -> None:
    """Unpack a Kafka-dump line; if it cannot be unpacked, keep the raw line and say why."""
    try:
        record = json.loads(raw)
        if not isinstance(record, dict):
            raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        if "value" not in record and "value_base64" not in record:
            keys = ", ".join(sorted(record)[:8]) or "none"
            raise ValueError(f"not a Kafka record: no 'value' or 'value_base64' (keys: {keys})")
        if "value_base64" in record and record["value_base64"] is not None:
            value = base64.b64decode(record["value_base64"], validate=True)
        elif record.get("value") is None:
            value = None
        elif isinstance(record["value"], str):
            value = record["value"].encode("utf-8")
        else:  # a JSON value written inline: keep its JSON text
            value = json.dumps(record["value"], separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        key = record.get("key")
        if record.get("key_base64") is not None:
            key_bytes = base64.b64decode(record["key_base64"], validate=True)
        elif key is None:
            key_bytes = None
        elif isinstance(key, str):
            key_bytes = key.encode("utf-8")
        else:
            key_bytes = json.dumps(key, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        timestamp = record.get("timestamp")
        row.update(
            key=key_bytes,
            value=value,
            topic=record.get("topic", row["topic"]),
            partition=_int_or_none(record.get("partition"), "partition"),
            offset=_int_or_none(record.get("offset"), "offset"),
            timestamp=None if timestamp is None else dt.datetime.fromtimestamp(int(timestamp) / 1000, tz=dt.UTC),
            headers=_headers(record.get("headers")),
        )
    except (ValueError, TypeError, OverflowError, binascii.Error, UnicodeDecodeError) as error:
        row["_landing_error"] = f"kafka-dump line cannot be unpacked: {error}"


def _int_or_none(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value


def _headers(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = [(h.get("key"), h.get("value")) for h in value]
    else:
        raise ValueError(f"headers must be an object or an array, got {type(value).__name__}")
    return [
        {"key": str(k), "value": None if v is None else (v if isinstance(v, str) else json.dumps(v)).encode("utf-8")}
        for k, v in items
    ]
