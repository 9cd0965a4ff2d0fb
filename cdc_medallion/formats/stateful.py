"""Stateful formats parse through Spark's stateful streaming operator, `applyInPandasWithState`.

Qlik's data messages need their table's metadata message, DataWorks' UPDATE_BEFOR needs its
UPDATE_AFTER, an IBM Q Replication transaction needs all its segments; any of these may come in
a later micro-batch. So the messages a batch cannot complete are kept in the query's state store
(RocksDB, versioned with the checkpoint) and re-fed with the next batch of their group, together
with the earlier events the format reads as context. A message is reported as `held` once, when
it is first held; it leaves the state when an event consumes it (`bronze_ref` or
`related_refs`) or when it is quarantined (an IBM transaction past its timeout), so it is never
fed again after that. The operator is Spark's own, so the same code runs on Databricks.

Groups: one per source, or, for a format whose messages only need those sharing one value
(`Format.related_by`), one per hash bucket of that value, so the work spreads over cores. A
message that any message may need (`Format.needed_by_all`: Qlik's metadata) is fed to every
group: its own group (the bucket of a message without the value) emits its events, the others
learn from it (their context keeps its events), so each group knows what the whole batch knows.

A group's state holds only that group's messages and context, so a query keeps the split its
checkpoint began with: the runner names the checkpoint's layout in the session's conf
(`LAYOUT_CONF`) while the query is planned, and a format split since a later layout
(`Format.split_since_layout`) stays in one group for an older checkpoint. Without the setting
(a new checkpoint, Databricks, a batch parse) the current layout holds.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from cdc_medallion.model import BRONZE_SCHEMA, EVENT_SCHEMA, KIND_HELD

if TYPE_CHECKING:
    from cdc_medallion.formats.base import Format

# PySpark's own serializer for this operator pads its output with empty frames through
# `pd.concat`, which pandas 2 warns about once per Python worker; the warning is about pyspark's
# code, not ours or the data, and would print into every run's output. This module is imported
# in each worker that runs the operator, so the filter is set there.
warnings.filterwarnings("ignore", message="The behavior of DataFrame concatenation with empty", category=FutureWarning)

#: Hash buckets of `related_by` values: fixed, as the state is kept per bucket.
BUCKETS = 16
#: The group of the messages without a `related_by` value (a format not split has group 0).
NO_VALUE_GROUP = -1
#: The layout of this version: 1, one group per format but DataWorks' buckets; 2, Qlik split too
#: (`QlikJson.related_by`), its metadata fed to every group.
STATE_LAYOUT = 2
LAYOUT_CONF = "cdc_medallion.state.layout"
GROUP = "__group"
COPY = "__copy"  # fed to this group to learn from: its events are not emitted here
ENVELOPE = "__envelope"  # `Format.split_envelope`, while the groups are worked out
STATE_SCHEMA = StructType([StructField("held", BinaryType()), StructField("context", StringType())])
#: The fields of a context event the parsers read (Qlik metadata, IBM transaction markers).
CONTEXT_FIELDS = ("kind", "source_schema", "source_table", "sequence", "detail", "flags", "bronze_ref")
_LANDING_ORDER = [
    ("_file", "ascending"),
    ("_line", "ascending"),
    ("topic", "ascending"),
    ("partition", "ascending"),
    ("offset", "ascending"),
]


def parse_with_state(parser: Format, bronze: DataFrame) -> DataFrame:
    """Bronze rows -> silver events through the state store (see the module's docstring)."""
    grouped = _grouped(parser, bronze, _layout(bronze)).groupBy(GROUP)
    step = _Step(parser)
    if not bronze.isStreaming:  # one batch on its own (tools, tests): nothing held before it
        return grouped.applyInPandas(
            lambda key, frame: pd.concat(list(step(key, iter([frame]), _NoState()))), schema=EVENT_SCHEMA
        )
    return grouped.applyInPandasWithState(
        step,
        outputStructType=EVENT_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="append",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )


@contextmanager
def planned_in_layout(spark: SparkSession, layout: int) -> Iterator[None]:
    """The stateful operators planned inside split their messages as `layout` did (the layout
    of the checkpoint they will run from)."""
    if layout == STATE_LAYOUT:
        yield
        return
    spark.conf.set(LAYOUT_CONF, str(layout))
    try:
        yield
    finally:
        spark.conf.unset(LAYOUT_CONF)


def _layout(bronze: DataFrame) -> int:
    named = bronze.sparkSession.conf.get(LAYOUT_CONF, None)
    return int(named) if named else STATE_LAYOUT


def _grouped(parser: Format, bronze: DataFrame, layout: int) -> DataFrame:
    """Each bronze row with its group (`GROUP`), and, for a message fed to every group, a copy
    for each other group (`COPY` true)."""
    if parser.related_by is None or layout < parser.split_since_layout:
        return bronze.withColumn(GROUP, F.lit(0).cast("long")).withColumn(COPY, F.lit(False))
    rows = bronze if parser.split_envelope is None else bronze.withColumn(ENVELOPE, F.expr(parser.split_envelope))
    value = F.expr(parser.related_by)
    own = F.coalesce(F.pmod(F.xxhash64(value), F.lit(BUCKETS)), F.lit(NO_VALUE_GROUP)).cast("long")
    if parser.needed_by_all is None:
        return rows.withColumn(GROUP, own).withColumn(COPY, F.lit(False)).drop(ENVELOPE)
    every = F.array(*[F.lit(g).cast("long") for g in [NO_VALUE_GROUP, *range(BUCKETS)]])
    groups = F.when(F.expr(parser.needed_by_all), every).otherwise(F.array(own))
    fed = rows.select("*", F.posexplode(groups).alias("__nth", GROUP))
    return fed.withColumn(COPY, F.col("__nth") > 0).drop("__nth", ENVELOPE)


class _Step:
    """One group's batch: held and new messages parsed together; the state updated."""

    def __init__(self, parser: Format) -> None:
        self.parser = parser

    def __call__(
        self, key: Any, frames: Iterator[pd.DataFrame], state: GroupState | _NoState
    ) -> Iterator[pd.DataFrame]:
        from cdc_medallion.formats.base import _event_arrow_schema, messages_of

        held, context = _load(state)
        new = _bronze(frames)
        was_held = set(_refs(held))
        if held.num_rows:
            held = held.append_column(COPY, pa.array([False] * held.num_rows, pa.bool_()))
            new = pa.concat_tables([held, new])
        rows = new.sort_by(_LANDING_ORDER)
        copies = rows.column(COPY).to_pylist()
        rows = rows.drop_columns([COPY])
        messages = [m for batch in rows.to_batches() for m in messages_of(batch)]
        landed_refs = [m.ref for m in messages]
        copied = {ref for ref, copy in zip(landed_refs, copies, strict=True) if copy}
        events = pa.Table.from_batches([self.parser.parse_all(messages, context)], schema=_event_arrow_schema())
        kinds = events.column("kind")
        is_held = pc.fill_null(pc.equal(kinds, KIND_HELD), False)
        consumed = set(events.filter(pc.invert(is_held)).column("bronze_ref").to_pylist())
        for refs in events.filter(pc.invert(is_held)).column("related_refs").to_pylist():
            consumed.update(refs or ())
        waiting = {ref for ref in events.filter(is_held).column("bronze_ref").to_pylist() if ref not in consumed}
        waiting -= copied  # held, if at all, by its own group
        still = rows.filter(pa.array([ref in waiting for ref in landed_refs], pa.bool_()))
        # A message already held is reported once: its repeated `held` event is not emitted again;
        # a copy's events are its own group's to emit.
        refs = events.column("bronze_ref").to_pylist()
        repeated = [held_now and ref in was_held for held_now, ref in zip(is_held.to_pylist(), refs, strict=True)]
        learned = events.filter(pc.invert(pa.array(repeated, pa.bool_())))
        context += _context_events(learned, self.parser.context_kinds)
        own = [ref not in copied for ref in learned.column("bronze_ref").to_pylist()]
        emitted = learned.filter(pa.array(own, pa.bool_()))
        state.update((_ipc(still), json.dumps(context)))
        yield emitted.to_pandas(maps_as_pydicts="strict")


class _NoState:
    """The state of a group parsed outside a stream: empty, and not kept."""

    exists = False

    def update(self, value: tuple) -> None:
        pass


def _bronze_arrow() -> pa.Schema:
    from cdc_medallion.sources.files import BRONZE_ARROW

    return BRONZE_ARROW


def _bronze(frames: Iterator[pd.DataFrame]) -> pa.Table:
    """The group's new rows as bronze Arrow rows, with their `COPY` mark (pandas gives naive
    UTC times, and Python objects for binaries and header lists)."""
    schema = _bronze_arrow().append(pa.field(COPY, pa.bool_()))
    tables = []
    for frame in frames:
        frame = frame.drop(columns=[GROUP])
        columns = []
        for field in schema:
            values = frame[field.name]
            if pa.types.is_timestamp(field.type):
                columns.append(pa.array(pd.to_datetime(values).dt.tz_localize("UTC"), field.type))
            elif pa.types.is_list(field.type):
                columns.append(pa.array([_plain(v) for v in values], field.type))
            else:  # flat values: Arrow reads the pandas column itself (NaN as null)
                columns.append(pa.array(values, field.type, from_pandas=True))
        tables.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(tables) if tables else schema.empty_table()


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


def _refs(rows: pa.Table) -> list[str]:
    """Each bronze row's reference, as `BronzeMessage.ref` spells it."""
    from cdc_medallion.formats.base import messages_of

    return [m.ref for batch in rows.to_batches() for m in messages_of(batch)]


def _load(state: GroupState | _NoState) -> tuple[pa.Table, list[dict[str, Any]]]:
    if not state.exists:
        return _bronze_arrow().empty_table(), []
    held, context = state.get
    table = pa.ipc.open_stream(held).read_all() if held else _bronze_arrow().empty_table()
    return table.cast(_bronze_arrow()), json.loads(context or "[]")


def _ipc(rows: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue()


def _context_events(events: pa.Table, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    if not kinds or events.num_rows == 0:
        return []
    wanted = events.filter(pc.is_in(events.column("kind"), pa.array(list(kinds), pa.string())))
    return wanted.select(list(CONTEXT_FIELDS)).to_pylist()


assert set(BRONZE_SCHEMA.fieldNames()) >= {"_file", "_line", "topic", "partition", "offset"}
