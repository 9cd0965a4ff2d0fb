"""One group's micro-batch of a stateful format, and what the group keeps for the next one.

The group's held messages and its new ones are parsed together, in landing order, with the
earlier events the format reads as context (`Format.context_kinds`). What it keeps afterwards
is only what later messages still need:

- the messages still held (a transaction's segments until it completes or times out, an
  UPDATE_BEFOR until its UPDATE_AFTER, a data message until its metadata); a message already
  held is reported `held` once, and leaves when an event consumes it (`bronze_ref`,
  `related_refs`) or quarantines it;
- one context event per `Format.context_key` (a later one replaces it: a table version's
  metadata, not every metadata message ever sent), each for `Format.context_window` seconds
  of landing time at most (a completed transaction's segment digests, for redeliveries).

So the state is bounded by what is open, not by the source's history. The step is the same
whichever state store operator runs it (`stateful_processor.py`); the operator only loads and
saves a `Kept`, and sets a timer at `Outcome.wake_at`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cdc_medallion.model import BRONZE_SCHEMA, KIND_HELD

if TYPE_CHECKING:
    from cdc_medallion.formats.base import Format

GROUP = "__group"
COPY = "__copy"  # fed to this group to learn from: its events are not emitted here
#: The fields of a context event the parsers read (Qlik metadata, IBM transaction markers).
CONTEXT_FIELDS = ("kind", "source_schema", "source_table", "sequence", "detail", "flags", "bronze_ref")
_LANDING_ORDER = [
    ("_file", "ascending"),
    ("_line", "ascending"),
    ("topic", "ascending"),
    ("partition", "ascending"),
    ("offset", "ascending"),
]


@dataclass(frozen=True)
class Remembered:
    """A context event kept for later batches, and when its message landed (None: unknown)."""

    event: dict[str, Any]
    landed: dt.datetime | None


@dataclass
class Kept:
    """What a group keeps between micro-batches: the bronze rows it holds, its context by key."""

    held: pa.Table
    context: dict[str, Remembered] = field(default_factory=dict)

    @classmethod
    def nothing(cls) -> Kept:
        return cls(bronze_arrow().empty_table())


@dataclass
class Outcome:
    """A step's events to emit, what the group keeps, and when it must look again at what it
    holds even if nothing new arrives (None: only when something does)."""

    emitted: pd.DataFrame
    kept: Kept
    wake_at: dt.datetime | None


def step(parser: Format, kept: Kept, new: pa.Table) -> Outcome:
    """Parse the held and the new rows (`new` with its `COPY` marks) of one group together."""
    from cdc_medallion.formats.base import _event_arrow_schema, messages_of

    was_held = set(refs(kept.held))
    rows = new
    if kept.held.num_rows:
        held = kept.held.append_column(COPY, pa.array([False] * kept.held.num_rows, pa.bool_()))
        rows = pa.concat_tables([held, new])
    rows = rows.sort_by(_LANDING_ORDER)
    copies = rows.column(COPY).to_pylist()
    rows = rows.drop_columns([COPY])
    messages = [m for batch in rows.to_batches() for m in messages_of(batch)]
    landed_refs = [m.ref for m in messages]
    copied = {ref for ref, copy in zip(landed_refs, copies, strict=True) if copy}
    context = [remembered.event for remembered in kept.context.values()]
    events = pa.Table.from_batches([parser.parse_all(messages, context)], schema=_event_arrow_schema())
    is_held = pc.fill_null(pc.equal(events.column("kind"), KIND_HELD), False)
    settled = events.filter(pc.invert(is_held))
    consumed = set(settled.column("bronze_ref").to_pylist())
    for related in settled.column("related_refs").to_pylist():
        consumed.update(related or ())
    waiting = {ref for ref in events.filter(is_held).column("bronze_ref").to_pylist() if ref not in consumed}
    waiting -= copied  # held, if at all, by its own group
    still = rows.filter(pa.array([ref in waiting for ref in landed_refs], pa.bool_()))
    # A message already held is reported once: its repeated `held` event is not emitted again;
    # a copy's events are its own group's to emit.
    event_refs = events.column("bronze_ref").to_pylist()
    repeated = [now and ref in was_held for now, ref in zip(is_held.to_pylist(), event_refs, strict=True)]
    learned = events.filter(pc.invert(pa.array(repeated, pa.bool_())))
    own = [ref not in copied for ref in learned.column("bronze_ref").to_pylist()]
    emitted = learned.filter(pa.array(own, pa.bool_()))
    latest = pc.max(new.column("_ingest_ts")).as_py() if new.num_rows else None
    context_now = remember(parser, kept.context, learned, latest)
    return Outcome(emitted.to_pandas(maps_as_pydicts="strict"), Kept(still, context_now), wake_at(parser, still))


def remember(
    parser: Format, known: dict[str, Remembered], learned: pa.Table, latest: dt.datetime | None
) -> dict[str, Remembered]:
    """`known` with the context events of `learned` (each replacing what its key held), less
    what has been kept longer than the format's window before `latest` (the newest landing)."""
    kept = dict(known)
    if parser.context_kinds and learned.num_rows:
        wanted = learned.filter(pc.is_in(learned.column("kind"), pa.array(list(parser.context_kinds), pa.string())))
        for event in wanted.select([*CONTEXT_FIELDS, "ingest_ts"]).to_pylist():
            landed = event.pop("ingest_ts")
            key = parser.context_key(event)
            if key is not None:
                kept.pop(key, None)  # a replacement goes last, as it was learned last
                kept[key] = Remembered(event, landed)
    window = parser.context_window
    if window is not None and latest is not None:
        horizon = latest - dt.timedelta(seconds=window)
        kept = {key: r for key, r in kept.items() if r.landed is None or r.landed >= horizon}
    return kept


def wake_at(parser: Format, held: pa.Table) -> dt.datetime | None:
    """When the earliest held message times out: its landing plus the format's `held_timeout`."""
    if not parser.timed or parser.held_timeout is None or held.num_rows == 0:
        return None
    oldest = pc.min(held.column("_ingest_ts")).as_py()
    return None if oldest is None else oldest + dt.timedelta(seconds=parser.held_timeout)


def bronze_arrow() -> pa.Schema:
    from cdc_medallion.sources.files import BRONZE_ARROW

    return BRONZE_ARROW


def bronze_rows(frames: Iterator[pd.DataFrame], names: list[str] | None = None) -> pa.Table:
    """A group's new rows as bronze Arrow rows, with their `COPY` mark (pandas gives naive
    UTC times, and Python objects for binaries and header lists). `names`: the names of the
    frames' columns, for an operator that numbers them instead (`transformWithStateInPandas`
    renames a column whose name starts with an underscore to its position)."""
    schema = bronze_arrow().append(pa.field(COPY, pa.bool_()))
    tables = []
    for frame in frames:
        if names is not None:
            frame.columns = names
        frame = frame.drop(columns=[GROUP])
        columns = []
        for f in schema:
            values = frame[f.name]
            if pa.types.is_timestamp(f.type):
                columns.append(pa.array(pd.to_datetime(values).dt.tz_localize("UTC"), f.type))
            elif pa.types.is_list(f.type):
                columns.append(pa.array([_plain(v) for v in values], f.type))
            else:  # flat values: Arrow reads the pandas column itself (NaN as null)
                columns.append(pa.array(values, f.type, from_pandas=True))
        tables.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def no_new_rows() -> pa.Table:
    """The new rows of a step that only looks again at what a group holds (its timer fired)."""
    return bronze_arrow().append(pa.field(COPY, pa.bool_())).empty_table()


def _plain(value: Any) -> Any:
    """A pandas cell as the Python value Arrow takes (arrays of structs come as numpy arrays)."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "tolist") and not isinstance(value, bytes | bytearray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def refs(rows: pa.Table) -> list[str]:
    """Each bronze row's reference, as `BronzeMessage.ref` spells it."""
    from cdc_medallion.formats.base import messages_of

    return [m.ref for batch in rows.to_batches() for m in messages_of(batch)]


assert set(BRONZE_SCHEMA.fieldNames()) >= {"_file", "_line", "topic", "partition", "offset", "_ingest_ts"}
