"""The bronze message as a parser sees it, and the event it builds."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BronzeMessage:
    """One bronze row: the raw bytes plus where they came from."""

    value: bytes | None
    key: bytes | None
    topic: str | None
    partition: int | None
    offset: int | None
    timestamp: dt.datetime | None
    headers: tuple[tuple[str, bytes | None], ...]
    file: str | None
    line: int | None
    ingest_ts: dt.datetime | None
    landing_error: str | None

    @property
    def ref(self) -> str:
        """Human-readable pointer back to the bronze row: topic/partition/offset or file:line."""
        if self.offset is not None:
            return f"{self.topic or ''}/{self.partition if self.partition is not None else 0}/{self.offset}"
        return f"{self.file}:{self.line}"

    @property
    def position(self) -> str:
        """Sortable landing position, the last-resort tie-breaker of every sequence."""
        if self.offset is not None:
            return f"{self.topic or ''}/{self.partition or 0:06d}/{self.offset:020d}"
        return f"{self.file or ''}/{self.line or 0:012d}"

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def text(self, limit: int | None = None) -> str | None:
        """The value decoded for display (invalid UTF-8 shown as replacement characters)."""
        if self.value is None:
            return None
        raw = self.value if limit is None else self.value[:limit]
        return raw.decode("utf-8", errors="replace")


Event = dict[str, Any]
