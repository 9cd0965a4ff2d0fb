"""The shape every format shares.

A format turns one bronze message into zero or more silver events (`parse_message`). The
shared driver runs it over Arrow batches inside Spark (`mapInArrow`), so parsing is parallel
and works the same on Databricks; anything a parser raises becomes a quarantined event with
the message's bronze reference, the field and the reason — never a crash, never a silent drop.
"""

from __future__ import annotations

import abc
import datetime as dt
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import EPOCH
from cdc_medallion.identifiers import COLUMN_NAME_RULE, TABLE_NAME_RULE, is_column_name, is_table_name
from cdc_medallion.model import EVENT_COLUMNS, EVENT_SCHEMA, KIND_ERROR, KIND_HELD
from cdc_medallion.strict import StrictModel, check

RAW_MESSAGE_LIMIT = 4096


class ParseError(Exception):
    """A message cannot be parsed: names the field and the reason (it goes to quarantine)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class FormatOptions(StrictModel):
    """A format's options (`options:` of a source in conf, `ingest --option NAME=VALUE`).

    Each format module declares its own subclass beside its format: a field per option, with its
    type, default and description. Text from the command line becomes the field's type (`true`,
    `86400`); what does not fit it (`flase`, a choice not offered) is a config error, never a
    default.
    """


class Format(abc.ABC):
    """Base format. Subclasses set `name`, declare their `options`, implement `parse_message`."""

    name: ClassVar[str]
    #: The format's options model (none by default); unknown options are a config error.
    options: ClassVar[type[FormatOptions]] = FormatOptions
    settings: FormatOptions
    #: Stateful formats see a whole batch at once, in landing order (`parse_messages`), with
    #: the messages they held in earlier batches re-fed (an unpaired UPDATE_BEFOR, an
    #: incomplete segmented transaction; each reported once as a `held` event) and earlier
    #: events of `context_kinds` (e.g. Qlik metadata kept as schema changes) as context.
    stateful: ClassVar[bool] = False
    context_kinds: ClassVar[tuple[str, ...]] = ()
    #: For a stateful format whose messages only ever need the messages sharing one value: that
    #: value, a Spark SQL expression over the bronze row (DataWorks pairs an UPDATE_BEFOR with
    #: its UPDATE_AFTER by `$.payload.sequenceId` of the text of `value`). The batch and the held
    #: messages are then split by it over several groups instead of parsed as one. None: every
    #: message may need any other.
    related_by: ClassVar[str | None] = None
    #: For a format split by `related_by`: a Spark SQL condition over the bronze row for the
    #: messages that any message may need, whatever its value (Qlik's metadata, which a data
    #: message of any group may name). Such a message is fed to every group: one emits its
    #: events, the others only learn from it.
    needed_by_all: ClassVar[str | None] = None
    #: For a format split by `related_by`: a Spark SQL expression over the bronze row that
    #: `related_by` and `needed_by_all` read as the column `__envelope` (Qlik's envelope). Spark
    #: prunes each `from_json` to the one field read where it is spelled, so an envelope spelled
    #: inline is parsed once per field read (seven times a Qlik message); a column, once.
    split_envelope: ClassVar[str | None] = None
    #: The state layout (`stateful.STATE_LAYOUT`) from which this format is split by `related_by`;
    #: a query whose checkpoint is older keeps it in the one group it began with.
    split_since_layout: ClassVar[int] = 1

    def __init__(self, source_name: str, options: Mapping[str, Any] | None = None) -> None:
        self.source_name = source_name
        where = f"source {source_name!r}, format {self.name}"
        self.settings = check(self.options, dict(options or {}), where, at="options")

    @abc.abstractmethod
    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        """Events for one message. Raise ParseError for a message that must be quarantined."""

    def parse_messages(self, messages: list[BronzeMessage], context: list[Event]) -> list[Event]:
        """A stateful format's whole batch (held messages first, then new ones, in landing order).

        `context` holds earlier events of `context_kinds`. Override in stateful formats; use
        `events_for` for the per-message part so that errors still become quarantined events.
        """
        return [event for message in messages for event in self.events_for(message)]

    # --- shared machinery -----------------------------------------------------------------
    def parse(self, bronze: DataFrame) -> DataFrame:
        """Bronze rows -> silver events, in parallel via Arrow batches (`mapInArrow`).

        A stateful format parses through Spark's stateful operator instead (`stateful.py`): the
        messages it holds wait in the query's state store for what completes them.
        """
        if self.stateful:
            from cdc_medallion.formats.stateful import parse_with_state

            return parse_with_state(self, bronze)
        if self.native:
            from cdc_medallion.formats.native import parse_hybrid

            return parse_hybrid(self, bronze)
        parser = self

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                yield parser.parse_batch(batch)

        return spread_over_cores(bronze).mapInArrow(run, EVENT_SCHEMA)

    @property
    def native(self) -> bool:
        """True when this parser parses in the JVM first (`native.py`)."""
        return False

    def native_events(self, bronze: DataFrame) -> DataFrame:
        """The format's parse in the JVM (`native.py`), for a format that has one: the bronze
        rows, each with its events in `_native`, or NULL there for the Python parser to decide."""
        raise NotImplementedError(f"format {self.name} has no native parse")

    def parse_counted(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, list[int]]:
        """`parse_batch`, with how many events each message gave (in the batch's order)."""
        with cycle_collection_paused():
            messages = list(messages_of(batch))
            return self.to_arrow_counted([self.events_for(m) for m in messages], messages)

    def held_event(self, message: BronzeMessage, reason: str, **fields: Any) -> Event:
        """A message kept back until what completes it arrives; re-fed to the next batch."""
        event: Event = {"kind": KIND_HELD, "detail": reason, "sequence": message.position, **fields}
        return self.complete(event, message)

    def parse_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        with cycle_collection_paused():
            messages = list(messages_of(batch))
            return self.to_arrow([self.events_for(m) for m in messages], messages)

    def parse_all(self, messages: list[BronzeMessage], context: list[Event]) -> pa.RecordBatch:
        """A stateful batch: guarded like `events_for`, so a parser bug quarantines, never crashes."""
        with cycle_collection_paused():
            return self._parse_all(messages, context)

    def _parse_all(self, messages: list[BronzeMessage], context: list[Event]) -> pa.RecordBatch:
        try:
            events = self.parse_messages(messages, context)
        except Exception as error:
            reason = f"parser failed on this batch: {type(error).__name__}: {error}"
            return self.to_arrow([[self.error_event(m, "message", reason)] for m in messages], messages)
        by_ref = {m.ref: m for m in messages}
        groups: dict[str, list[Event]] = {}
        for event in events:
            groups.setdefault(event.get("bronze_ref") or "", []).append(event)
        ordered = [m for m in messages if m.ref in groups]
        orphans = [e for ref, group in groups.items() if ref not in by_ref for e in group]
        return self.to_arrow([groups[m.ref] for m in ordered] + [orphans], [*ordered, None])

    def to_arrow(self, groups: list[list[Event]], messages: list[BronzeMessage | None]) -> pa.RecordBatch:
        """Events -> Arrow; a message whose events do not fit the schema is quarantined instead."""
        return self.to_arrow_counted(groups, messages)[0]

    def to_arrow_counted(
        self, groups: list[list[Event]], messages: list[BronzeMessage | None]
    ) -> tuple[pa.RecordBatch, list[int]]:
        """`to_arrow`, with how many rows each group became (its events, or its one error)."""
        schema = _event_arrow_schema()
        try:
            batch = pa.RecordBatch.from_pylist([e for group in groups for e in group], schema=schema)
            return batch, [len(group) for group in groups]
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        rows: list[Event] = []
        counts: list[int] = []
        for group, message in zip(groups, messages, strict=True):
            before = len(rows)
            try:
                pa.RecordBatch.from_pylist(group, schema=schema)
                rows.extend(group)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
                if message is not None:
                    rows.append(self.error_event(message, "message", f"parser produced an invalid event: {error}"))
            counts.append(len(rows) - before)
        return pa.RecordBatch.from_pylist(rows, schema=schema), counts

    def events_for(self, message: BronzeMessage) -> list[Event]:
        """Every outcome of one message, completed with lineage; errors become error events."""
        if message.landing_error:
            return [self.error_event(message, "value", message.landing_error)]
        try:
            produced = list(self.parse_message(message))
        except ParseError as error:
            return [self.error_event(message, error.field, error.reason)]
        except Exception as error:  # a parser bug must not lose the message either
            return [self.error_event(message, "message", f"parser failed: {type(error).__name__}: {error}")]
        for event in produced:
            self.complete(event, message)
        return produced

    def complete(self, event: Event, message: BronzeMessage) -> Event:
        event.setdefault("source_name", self.source_name)
        event.setdefault("source_format", self.name)
        event.setdefault("ingest_ts", message.ingest_ts)
        event["bronze_ref"] = message.ref
        # Names from messages reach paths and SQL: an unsafe one quarantines the message.
        problem = _unsafe_name(event)
        if problem is not None:
            event.clear()
            event.update(self.error_event(message, *problem))
        return event

    def error_event(self, message: BronzeMessage, field: str, reason: str) -> Event:
        return {
            "kind": KIND_ERROR,
            "source_name": self.source_name,
            "source_format": self.name,
            "ingest_ts": message.ingest_ts,
            "bronze_ref": message.ref,
            "error": f"{field}: {reason}",
            "raw_message": message.text(RAW_MESSAGE_LIMIT),
            "sequence": message.position,
        }


#: Over how many partitions the parse spreads bronze: a session setting, read (never set) by the
#: query function. The local runner sets it to its cores (`spark.parse_over_cores`); on Databricks
#: a pipeline configuration entry may set it, and without it the runtime's own split stands.
PARSE_PARTITIONS_CONF = "cdc_medallion.parse.partitions"


def spread_over_cores(bronze: DataFrame) -> DataFrame:
    """Bronze spread over every core before parsing.

    A landed batch is one Parquet file of one row group, which Spark reads as one partition, so
    parsing, the costliest step of silver, would run on one core while the others wait; a
    round-robin shuffle of the raw messages costs less than it frees. A stream's partitions are
    not known until each batch runs, so it is always spread, and so is a batch: how many
    partitions a DataFrame has is a question for the JVM (`rdd`), which Spark Connect (Databricks
    serverless) does not answer. The core count is a setting for the same reason:
    `sparkContext.defaultParallelism` does not exist there.
    """
    cores = parse_partitions(bronze.sparkSession)
    return bronze.repartition(cores) if cores > 1 else bronze


def parse_partitions(spark: SparkSession) -> int:
    """`PARSE_PARTITIONS_CONF` of the session: 1 (as it is) when unset or not a number."""
    setting = spark.conf.get(PARSE_PARTITIONS_CONF, None)
    return int(setting) if setting and setting.strip().isdigit() else 1


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Python's cycle collector off while a batch is parsed, back on (if it was) afterwards.

    A batch keeps every message and event alive until it is handed back as Arrow, so each
    automatic collection walks a heap that only grows, and for nothing: parsed messages form no
    cycles, reference counting frees them; the saving grows with the fields a message has.
    Whatever cycles a batch does make are collected once the collector is back on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _unsafe_name(event: Event) -> tuple[str, str] | None:
    table = event.get("source_table")
    if table is not None and not _known(table, _SAFE_TABLES, is_table_name):
        return "source_table", f"unusable table name {table!r}: {TABLE_NAME_RULE}"
    for image in ("before", "after"):
        columns = event.get(image)
        if not columns or _COLUMN_NAMES.issuperset(columns):
            continue
        for column in columns:
            if not _known(column, _COLUMN_NAMES, is_column_name):
                return f"{image}.{column}", f"unusable column name {column!r}: {COLUMN_NAME_RULE}"
    return None


# Names already checked: a batch names the same few tables and columns thousands of times.
# Bounded, so that a hostile stream of fresh names costs checks, not memory.
_SAFE_TABLES: set[str] = set()
_COLUMN_NAMES: set[str] = set()
_KNOWN_LIMIT = 100_000


def _known(name: object, known: set[str], check: Callable[[object], bool]) -> bool:
    if isinstance(name, str) and name in known:
        return True
    if not check(name):
        return False
    if len(known) < _KNOWN_LIMIT:
        known.add(name)  # type: ignore[arg-type]
    return True


_ARROW_SCHEMA: pa.Schema | None = None


def _event_arrow_schema() -> pa.Schema:
    global _ARROW_SCHEMA
    if _ARROW_SCHEMA is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        _ARROW_SCHEMA = pa.schema([f.with_nullable(True) for f in to_arrow_schema(EVENT_SCHEMA, timezone="UTC")])
    return _ARROW_SCHEMA


def messages_of(batch: pa.RecordBatch) -> Iterator[BronzeMessage]:
    columns = {name: _python_values(batch.column(name), name in _REPEATING_COLUMNS) for name in batch.schema.names}
    for i in range(batch.num_rows):
        headers = columns["headers"][i] or ()
        yield BronzeMessage(
            value=columns["value"][i],
            key=columns["key"][i],
            topic=columns["topic"][i],
            partition=columns["partition"][i],
            offset=columns["offset"][i],
            timestamp=columns["timestamp"][i],
            headers=tuple((h["key"], h["value"]) for h in headers),
            file=columns["_file"][i],
            line=columns["_line"][i],
            ingest_ts=columns["_ingest_ts"][i],
            landing_error=columns["_landing_error"][i],
        )


# Columns a batch fills with a few values: a file landing has one file name and ingest time, a
# Kafka batch a few topics.
_REPEATING_COLUMNS = frozenset({"topic", "_source", "_file", "_ingest_ts"})


def _python_values(column: pa.Array, repeats: bool) -> list[Any]:
    """A bronze column as Python values, converting each distinct value of a repeating column
    once and an empty column (a file landing has no Kafka key, offset or headers) not at all."""
    rows = len(column)
    if column.null_count == rows:
        return [None] * rows
    if not repeats:
        return _to_python(column)
    encoded = column.dictionary_encode()
    distinct = _to_python(encoded.dictionary)
    return [None if i is None else distinct[i] for i in encoded.indices.to_pylist()]


_UTC_MICROS = pa.timestamp("us", tz="UTC")


def _to_python(column: pa.Array) -> list[Any]:
    """`to_pylist`, but UTC timestamps (bronze's Kafka and ingest times) from their integers:
    pyarrow builds each aware datetime through its time-zone object, far slower than adding the
    integer to the epoch."""
    if column.type != _UTC_MICROS:
        return column.to_pylist()
    micros = column.cast(pa.int64()).to_pylist()
    return [None if value is None else EPOCH + dt.timedelta(microseconds=value) for value in micros]


def millis_to_ts(value: Any) -> dt.datetime | None:
    """Epoch milliseconds -> aware UTC datetime; None for missing/negative ('unknown') values."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    try:
        return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):  # out of the representable range: unknown
        return None


# --- registry ---------------------------------------------------------------------------------
_FORMATS: dict[str, type[Format]] = {}


def register_format(cls: type[Format]) -> type[Format]:
    if cls.name in _FORMATS:
        first = _FORMATS[cls.name]
        raise ValueError(
            f"format {cls.name!r} registered twice: {first.__module__}.{first.__qualname__} "
            f"and {cls.__module__}.{cls.__qualname__}"
        )
    _FORMATS[cls.name] = cls
    return cls


def format_names() -> list[str]:
    return sorted(_FORMATS)


def get_format(name: str) -> type[Format]:
    try:
        return _FORMATS[name]
    except KeyError:
        raise KeyError(f"unknown format {name!r} (known: {', '.join(format_names())})") from None


assert set(EVENT_COLUMNS) >= {"kind", "error"}
