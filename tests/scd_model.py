"""A reference model of auto CDC (DLT semantics) in plain Python, for property tests.

It replays a whole history at once, in sequence order, with no knowledge of batches or stored
rows, so an engine that applies the same history batch by batch (rereading what it stored) must
end with the same tables. Rules, as the README states them:

- events of a key are ordered by their sequence; a late event takes its place in that order;
- an upsert carries the columns in its image (`present` None: every column); an absent column
  keeps its value from the key's previous event since the key's last delete, else NULL;
- a delete ends the key's life; a truncate is a delete of every key at its sequence;
- SCD1 keeps each live key's last row and that event's sequence (`__sequence`);
- SCD2 starts a version at an upsert after nothing or a delete, or when a tracked column differs
  from the previous event's (NULL equals NULL); other upserts update the open version in place;
  a version ends where the next version of its key starts or where a delete comes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Event = tuple[Any, ...]  # (key, *values..., sequence, op, present)


@dataclass(frozen=True)
class History:
    """Events as (key, values..., seq, op, present), ops U (upsert), D (delete), T (truncate)."""

    columns: tuple[str, ...]  # the data columns, key first, the sequence column among them
    key: str
    sequence: str

    def ordered(self, events: Sequence[Event]) -> list[dict[str, Any]]:
        rows = [self._as_dict(e) for e in events]
        return sorted(rows, key=lambda r: r[self.sequence])

    def _as_dict(self, event: Event) -> dict[str, Any]:
        *values, op, present = event
        return {**dict(zip(self.columns, values, strict=True)), "__op": op, "__present": present}

    def filled(self, events: Sequence[Event]) -> dict[Any, list[dict[str, Any]]]:
        """Per key, its events in sequence order with absent columns filled, truncates as deletes."""
        ordered = self.ordered(events)
        keys = {r[self.key] for r in ordered if r["__op"] != "T"}
        per_key: dict[Any, list[dict[str, Any]]] = {k: [] for k in keys}
        for key in keys:
            alive: dict[str, Any] | None = None
            for row in ordered:
                if row["__op"] == "T" or (row["__op"] == "D" and row[self.key] == key):
                    alive = None
                    per_key[key].append({self.key: key, self.sequence: row[self.sequence], "__delete": True})
                    continue
                if row[self.key] != key:
                    continue
                present = row["__present"]
                current = {}
                for column in self.columns:
                    if column == self.key or present is None or column in present:
                        current[column] = row[column]
                    else:
                        current[column] = alive.get(column) if alive is not None else None
                current["__order"] = row[self.sequence]
                current["__delete"] = False
                per_key[key].append(current)
                alive = current
        return per_key

    def scd1(self, events: Sequence[Event]) -> list[tuple]:
        """The live keys' rows: data columns, then the sequence of the event that made the row."""
        rows = []
        for history in self.filled(events).values():
            last = history[-1] if history else None
            if last is None or last["__delete"]:
                continue
            rows.append((*(last[c] for c in self.columns), last["__order"]))
        return sorted(rows, key=repr)

    def scd2(self, events: Sequence[Event], tracked: Sequence[str]) -> list[tuple]:
        """Every version: data columns, __START_AT, __END_AT (None while open)."""
        versions: list[tuple] = []
        for history in self.filled(events).values():
            current: dict[str, Any] | None = None  # the open version's latest values
            start = None
            previous: dict[str, Any] | None = None
            for event in history:
                if event["__delete"]:
                    if current is not None:
                        versions.append((*(current[c] for c in self.columns), start, event[self.sequence]))
                    current, previous = None, event
                    continue
                starts = (
                    previous is None or previous["__delete"] or any(not _same(event[c], previous[c]) for c in tracked)
                )
                if starts:
                    if current is not None:
                        versions.append((*(current[c] for c in self.columns), start, event["__order"]))
                    start = event["__order"]
                current, previous = event, event
            if current is not None:
                versions.append((*(current[c] for c in self.columns), start, None))
        return sorted(versions, key=repr)


def _same(a: Any, b: Any) -> bool:
    """Spark's null-safe equality: NULL equals NULL (and NaN equals NaN)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return a == b
