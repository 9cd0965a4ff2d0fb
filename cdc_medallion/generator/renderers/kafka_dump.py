"""Writing Kafka-dump JSON lines: one topic per table, one partition each (order kept per table)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

# Characters some readers (Python's str.splitlines among them) take for line ends: escaped, so a
# message stays on one line whatever its text holds.
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


class KafkaDump:
    """Collects records per topic and writes them as one Kafka-dump file."""

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.records: list[dict] = []

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
        self.records.append(record)

    def write(self, path: Path) -> int:
        with path.open("w", encoding="utf-8") as handle:
            for record in self.records:
                text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
                handle.write(text.translate(_LINE_BREAKS) + "\n")
        return len(self.records)
