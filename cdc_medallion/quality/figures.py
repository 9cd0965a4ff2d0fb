"""The report's figures about the tables, as values: what `table_figures.py` computes with
Spark, the event log stores (as JSON, `TableFigures.as_dict`) and the report and `status` read
back (`stored.py`). Apart from both so that a reader needs no Spark to hold them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_medallion.names import FAILED

FIGURES = "figures"  # the suite of the `quality_check` event that stores a run's table figures
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


@dataclass
class TableFigures:
    """The figures a run stored about its tables, and when."""

    as_of: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    quarantine: list[QuarantineReason] = field(default_factory=list)
    quarantine_rows: dict[str, int] = field(default_factory=dict)  # quarantine table -> rows
    heartbeats: list[HeartbeatLag] | None = None  # None: not figured

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO text (with their offset; years 1-9999, as Python holds them)."""
        beats = None
        if self.heartbeats is not None:
            beats = [{**h.__dict__, "latest_event": _moment_text(h.latest_event)} for h in self.heartbeats]
        return {
            "as_of": self.as_of.isoformat(),
            "quarantine": [r.__dict__ for r in self.quarantine],
            "quarantine_rows": dict(self.quarantine_rows),
            "heartbeats": beats,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TableFigures:
        beats = raw.get("heartbeats")
        return cls(
            as_of=dt.datetime.fromisoformat(raw["as_of"]) if raw.get("as_of") else dt.datetime.now(dt.UTC),
            quarantine=[QuarantineReason(**r) for r in raw.get("quarantine") or ()],
            quarantine_rows={str(k): int(v) for k, v in (raw.get("quarantine_rows") or {}).items()},
            heartbeats=None
            if beats is None
            else [
                HeartbeatLag(
                    **{
                        **h,
                        "latest_event": _moment(h.get("latest_event")),
                    }
                )
                for h in beats
            ],
        )


def _moment_text(moment: dt.datetime | str | None) -> str | None:
    """A time as stored: ISO text; one Python cannot hold (outside years 1-9999) is text already."""
    return moment.isoformat() if isinstance(moment, dt.datetime) else moment


def _moment(text: str | None) -> dt.datetime | str | None:
    try:
        return None if text is None else dt.datetime.fromisoformat(text)
    except ValueError:  # signed-year text (`arrow_rows.python_rows`): kept as it is
        return text
