"""Writing Kafka-dump JSON lines: one topic per table, one partition each (order kept per table)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import IO

# Characters some readers (Python's str.splitlines among them) take for line ends: escaped, so a
# message stays on one line whatever its text holds.
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


class KafkaDump:
    """Collects records per topic and writes them as one Kafka-dump file.

    Opened on a file (`KafkaDump.into`), it writes each record as it is added instead: a
    ten-million-change benchmark input does not fit in memory as records.
    """

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.records: list[dict] = []
        self.handle: IO[str] | None = None
        self.written = 0

    @classmethod
    def into(cls, path: Path) -> KafkaDump:
        dump = cls()
        dump.handle = path.open("w", encoding="utf-8")
        return dump

    def add(self, topic: str, value: str | bytes | None, key: str | None = None, ts: dt.datetime | None = None) -> None:
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        record: dict = {"topic": topic, "partition": 0, "offset": offset, "key": key}
        if ts is not None:
            record["timestamp"] = int(ts.replace(tzinfo=dt.UTC).timestamp() * 1000)
        if isinstance(value, bytes):
            record["value_base64"] = base64.b64encode(value).decode("ascii")
        else:
            record["value"] = value
        if self.handle is not None:
            _write_record(self.handle, record)
            self.written += 1
        else:
            self.records.append(record)

    def write(self, path: Path) -> int:
        """All records in `path` (for a dump opened with `into`, that file, now closed)."""
        if self.handle is not None:
            self.handle.close()
            return self.written
        with path.open("w", encoding="utf-8") as handle:
            for record in self.records:
                _write_record(handle, record)
        return len(self.records)


def _write_record(handle: IO[str], record: dict) -> None:
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    handle.write(text.translate(_LINE_BREAKS) + "\n")
