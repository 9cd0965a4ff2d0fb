"""The report's figures about quarantines and heartbeats, as both of its readers give them:
Spark (`report.py`) and delta-rs without a JVM (`arrow_facts.py`), which tests hold equal.
Apart from both so that neither imports the other for them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_medallion.names import FAILED

RAW_LIMIT = 600
TOP_REASONS = 10
SAMPLES_PER_REASON = 3


@dataclass
class QuarantineReason:
    dataset: str
    rule: str
    count: int
    samples: list[dict[str, str | None]] = field(default_factory=list)


@dataclass
class HeartbeatLag:
    source: str
    count: int
    latest_event: dt.datetime | None
    latest_lag_seconds: float | None
    max_lag_seconds: float | None


def quarantine_sample(values: Mapping[str, Any], ref: str | None) -> dict[str, str | None]:
    """A quarantined row as the report shows it: its bronze reference, why, and its raw message
    (a typed row, from gold's change feed, has none: its values as JSON)."""
    raw = values.get("raw_message")
    if raw is None and "raw_message" not in values:
        raw = json.dumps({k: v for k, v in values.items() if not k.startswith("__") and k != FAILED}, default=str)
    reason = values.get("error") or values.get("detail") or "; ".join(values.get("__cast_errors") or [])
    if values.get("flags"):
        reason = f"{reason or ''} flags: {', '.join(values['flags'])}".strip()
    return {
        "bronze_ref": values.get(ref) if ref else None,
        "error": reason,
        "raw": None if raw is None else str(raw)[:RAW_LIMIT],
    }
