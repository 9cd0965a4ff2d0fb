"""IBM Db2 Q Replication Event Publishing, delimited messages (`ibm-qrep-delimited`).

A message holds one or more change-data records (record delimiter between them): the 12-field
header (type, identifier, date, time, owner, table, ISRT/REPL/DLET, transaction id, commit LSN,
commit time, plan, segment number), then the before and the after values in column-ID order.
Column names and types come from the `tables` option (`--columns` for `cdc-medallion ingest`).

Segmented transactions (segments 0001, 0002, ..., and 0000 for the last) are reassembled per
transaction id and commit LSN; a transaction's changes are emitted only once it is complete, so
gold never shows half of one. Until then its messages are held (re-fed next run); after
`incomplete_timeout_seconds` they are quarantined as an incomplete transaction, by a timer even
when nothing else arrives (`timed`). A redelivered segment (same transaction, segment number and
bytes) becomes a `transaction` event flagged `duplicate_segment`: counted in silver, never
applied. A segment with the same number but other bytes is quarantined. Completed segmented
transactions leave a `transaction` event whose segment digests recognise redeliveries in later
runs too, for `redelivery_window_seconds` of landing time (the state keeps one per transaction,
`context_key`, and nothing of a completed transaction after that).

Order: the commit LSN (both widths compared as numbers) and the record's position within its
transaction, then the landing position. Timestamps are decoded; invalid ones (the spec's own
example has 67 seconds) keep the row and flag it. Invalid character data
(`IBM-INVALID-COLUMN-####-@-HEX|NULL`) is decoded or left out and flagged.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BeforeValidator, Field

from cdc_medallion.errors import ConfigError
from cdc_medallion.formats.base import RAW_MESSAGE_LIMIT, Format, FormatOptions, ParseError, register_format
from cdc_medallion.formats.ibm_qrep_records import Delimiters, Header, RawRecord, RecordError, Scanner, parse_header
from cdc_medallion.formats.ibm_qrep_tables import TableSpec, check_code_page, image, parse_tables
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import dumps
from cdc_medallion.model import KIND_CHANGE, KIND_TOMBSTONE, KIND_TRANSACTION, OP_DELETE, OP_INSERT, OP_UPDATE

OPS = {"ISRT": OP_INSERT, "REPL": OP_UPDATE, "DLET": OP_DELETE}
DUPLICATE_FLAG = "duplicate_segment"
TxKey = tuple[str, str]


@dataclass
class _Record:
    message: BronzeMessage
    raw: RawRecord
    header: Header | None = None
    change: Event | None = None
    error: tuple[str, str] | None = None  # (field, reason)


@dataclass
class _Piece:
    """The records of one message that belong to one segment of one transaction."""

    message: BronzeMessage
    tx: TxKey
    segment: int
    records: list[_Record]
    digest: str


@dataclass
class _Message:
    message: BronzeMessage
    records: list[_Record]
    loose_errors: list[_Record] = field(default_factory=list)  # records without a usable header
    pieces: list[_Piece] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (field, reason) of conflicting pieces
    duplicates: list[str] = field(default_factory=list)


@dataclass
class _Transaction:
    key: TxKey
    tx_id: str
    commit_lsn: str
    numbered: dict[int, _Piece] = field(default_factory=dict)
    finals: list[_Piece] = field(default_factory=list)
    messages: list[_Message] = field(default_factory=list)

    def missing(self) -> str | None:
        """What keeps the transaction incomplete, or None when it is complete."""
        top = max(self.numbered, default=0)
        gaps = [f"{s:04d}" for s in range(1, top + 1) if s not in self.numbered]
        parts = [f"segment(s) {', '.join(gaps)}"] if gaps else []
        if not self.finals:
            parts.append("the final segment 0000")
        return " and ".join(parts) or None

    def missing_count(self) -> int:
        """How many segments are known to be missing (the gaps, and the final one if it is)."""
        top = max(self.numbered, default=0)
        return sum(1 for s in range(1, top + 1) if s not in self.numbered) + (not self.finals)

    def have(self) -> str:
        segments = [f"{s:04d}" for s in sorted(self.numbered)] + ["0000"] * bool(self.finals)
        return ", ".join(segments)


def _char(value: Any) -> Any:
    """Delimiter option text: `\\n`, `\\t`, `\\r`, `\\xHH` and `\\uHHHH` as on a command line."""
    if isinstance(value, str) and len(value) > 1 and value.startswith("\\"):
        try:
            return value.encode("ascii").decode("unicode_escape")
        except (UnicodeError, ValueError):
            return value
    return value


def _tables_shape(value: Any) -> Any:
    """Text (a command line's) or a mapping; `parse_tables` reads either and checks what is in it."""
    if value is None or isinstance(value, str | Mapping):
        return value
    raise ValueError(f"must be a mapping of OWNER.TABLE to its columns, got {type(value).__name__}")


def _none_from_text(value: Any) -> Any:
    """`null` on a command line (`--option incomplete_timeout_seconds=null`) is YAML's null."""
    return None if isinstance(value, str) and value.strip().lower() in ("", "null", "none") else value


class IbmQrepDelimitedOptions(FormatOptions):
    tables: Annotated[str | dict[Any, Any] | None, BeforeValidator(_tables_shape)] = Field(
        None,
        description="source tables and their columns in column-ID order: {OWNER.TABLE or TABLE: [COL:TYPE, ...] "
        "or {COL: TYPE} or {columns: ..., code_page: ...}}, or TABLE=COL:TYPE,...;TABLE=... on a command line",
    )
    column_delimiter: str = Field(",", description="column delimiter (one non-alphanumeric character)")
    record_delimiter: str = Field(
        "\n",
        description="record delimiter between change-data records of one message, as a character of the decoded "
        "text (new line for both X'0A' in ASCII and X'25' in EBCDIC)",
    )
    string_delimiter: str = Field('"', description="string delimiter around character, date, time and LOB values")
    decimal_character: str = Field(".", description="decimal character of numeric values")
    code_page: str = Field(
        "utf-8", description="Python codec of character data sent as hex (IBM-INVALID-COLUMN-...-HEX)"
    )
    message_encoding: str = Field(
        "utf-8", description="Python codec of the message bytes (cp037 for EBCDIC read from MQ)"
    )
    time_zone: str = Field("UTC", description="time zone of commit_time and the message date/time (IANA name)")
    incomplete_timeout_seconds: Annotated[float | None, BeforeValidator(_none_from_text)] = Field(
        86400.0,
        ge=0,
        description="how long the segments of an incomplete transaction are held (by landing time of the oldest) "
        "before they are quarantined; null: hold forever",
    )
    repair_typographic_quotes: bool = Field(
        True,
        description="accept a value closed by a typographic quote (”) followed by a delimiter, flagged repaired_quote",
    )
    redelivery_window_seconds: float = Field(
        86400.0,
        ge=0,
        description="how long (by landing time) a completed segmented transaction's segment digests are kept, so "
        "that a redelivered segment is recognised and not applied again; 0: only within a micro-batch",
    )


@register_format
class IbmQrepDelimited(Format):
    name = "ibm-qrep-delimited"
    stateful: ClassVar[bool] = True
    # The markers of completed segmented transactions, one per transaction for the redelivery
    # window; an incomplete transaction's segments are held, and time out on a timer.
    context_kinds: ClassVar[tuple[str, ...]] = (KIND_TRANSACTION,)
    timed: ClassVar[bool] = True
    #: `cdc-medallion ingest --columns TABLE=COL:TYPE,...` lands in this option (the messages carry no names).
    column_specs_option: ClassVar[str] = "tables"
    options = IbmQrepDelimitedOptions
    settings: IbmQrepDelimitedOptions

    def __init__(self, source_name: str, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(source_name, options)
        where = f"source {source_name!r}: option"
        s = self.settings
        self.delimiters = Delimiters(
            column=_char(s.column_delimiter),
            record=_char(s.record_delimiter),
            string=_char(s.string_delimiter),
            decimal=_char(s.decimal_character),
        )
        problems = self.delimiters.problems()
        if problems:
            raise ConfigError(f"{where}s of format {self.name}: {'; '.join(problems)}")
        check_code_page(s.code_page, f"{where} 'code_page'")
        check_code_page(s.message_encoding, f"{where} 'message_encoding'")
        self.tables: dict[str, TableSpec] = parse_tables(s.tables, s.code_page, f"{where} 'tables'")
        try:
            self.zone = ZoneInfo(s.time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"{where} 'time_zone': unknown time zone {s.time_zone!r}") from None
        self.timeout = s.incomplete_timeout_seconds
        self.held_timeout = self.timeout
        self.repair = s.repair_typographic_quotes

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        """One message on its own (a transaction split over messages needs `parse_messages`)."""
        return self.parse_messages([message], [])

    def context_key(self, event: Event) -> str | None:
        """A completed transaction's marker, by transaction: a redelivery notice is not kept."""
        marked = _marked(event)
        return None if marked is None else "\x1f".join(marked[0])

    @property
    def context_window(self) -> float | None:
        return self.settings.redelivery_window_seconds

    # --- the batch: parse, deduplicate, reassemble ------------------------------------------------
    def parse_messages(self, messages: list[BronzeMessage], context: list[Event]) -> list[Event]:
        now = dt.datetime.now(dt.UTC)
        completed = _completed(context)
        events: list[Event] = []
        transactions: dict[TxKey, _Transaction] = {}
        seen: dict[tuple[TxKey, int, str], str] = {}
        parsed: list[_Message] = []
        for message in messages:
            if message.value is None and not message.landing_error:  # a Kafka tombstone: counted, no records
                events.append(self.complete({"kind": KIND_TOMBSTONE, "sequence": message.position}, message))
                continue
            try:
                item = self._parse(message)
                self._assign(item, transactions, completed, seen)
            except ParseError as error:
                events.append(self.error_event(message, error.field, error.reason))
                continue
            except Exception as error:  # a parser bug must not lose the message either
                events.append(self.error_event(message, "message", f"parser failed: {type(error).__name__}: {error}"))
                continue
            if item.pieces:
                parsed.append(item)
            else:  # nothing to wait for: duplicates, conflicts, errors
                events.extend(self._settled(item) or [self.error_event(message, "value", "no change-data records")])
        for group in _components(parsed):
            try:
                events.extend(self._resolve(group, transactions, now))
            except Exception as error:  # a bug in reassembly must not lose the messages either
                reason = f"parser failed: {type(error).__name__}: {error}"
                events.extend(self.error_event(item.message, "transaction", reason) for item in group)
        return events

    def _parse(self, message: BronzeMessage) -> _Message:
        if message.landing_error:
            raise ParseError("value", message.landing_error)
        if message.value is None or not message.value.strip():
            raise ParseError("value", "empty message: no change-data records")
        try:
            text = message.value.decode(self.settings.message_encoding)
        except UnicodeDecodeError as error:
            raise ParseError(
                "value", f"not {self.settings.message_encoding} text ({error}); set the option message_encoding"
            ) from None
        raws = Scanner(self.delimiters, self.repair).records(text)
        if not raws:
            raise ParseError("value", "empty message: no change-data records")
        item = _Message(message, [self._record(message, raw, len(raws)) for raw in raws])
        for record in item.records:
            if record.header is None:
                item.loose_errors.append(record)
        return item

    def _record(self, message: BronzeMessage, raw: RawRecord, count: int) -> _Record:
        record = _Record(message, raw)
        where = f"record {raw.index + 1} of {count}" if count > 1 else "record"
        if raw.error is not None:
            record.error = (where, raw.error)
            return record
        try:
            record.header = parse_header(raw.fields, self.zone)
            record.change = self._change(record.header, raw)
        except RecordError as error:
            record.error = (where, f"{error.field}: {error.reason}")
        return record

    def _change(self, header: Header, raw: RawRecord) -> Event:
        table = self.tables.get(f"{header.owner}.{header.table}".upper()) or self.tables.get(header.table.upper())
        if table is None:
            known = ", ".join(sorted(self.tables)) or "none"
            raise RecordError(
                "table_name",
                f"no columns configured for {header.owner}.{header.table} (known: {known}): the messages carry "
                "no column names; add the table to the format option `tables` (or --columns TABLE=COL:TYPE,...)",
            )
        values = raw.fields[12:]
        width = len(table.columns)
        if len(values) != 2 * width:
            raise RecordError(
                "values",
                f"{len(values)} values, but {table.name} has {width} columns in conf, so a record carries "
                f"{2 * width} ({width} before and {width} after)",
            )
        flags = list(header.flags)
        invalid = header.invalid
        if invalid is not None:
            name = table.columns[invalid.column - 1].name if 0 < invalid.column <= width else "?"
            mode = "hex" if invalid.mode == "HEX" else "null"
            flags.append(f"invalid_char_{mode}:col {invalid.column} ({name}):{invalid.image}")
        before = image(table, values[:width], "B", self.delimiters, invalid, flags)
        after = image(table, values[width:], "A", self.delimiters, invalid, flags)
        op = OPS[header.operation]
        if op == OP_INSERT and any(v is not None for v in before.values()):
            flags.append("unexpected_image:before")
        if op == OP_DELETE and any(v is not None for v in after.values()):
            flags.append("unexpected_image:after")
        before_image = None if op == OP_INSERT else before
        after_image = None if op == OP_DELETE else after
        changed = None
        if op == OP_UPDATE:
            changed = [c for c in after if c in before and before[c] != after[c]]
        detail = {"identifier": header.identifier, "plan_name": header.plan_name, "segment": f"{header.segment:04d}"}
        if header.put_time is not None:
            detail["put_time"] = header.put_time.isoformat()
        return {
            "kind": KIND_CHANGE,
            "source_schema": header.owner,
            "source_table": header.table,
            "op": op,
            "before": before_image,
            "after": after_image,
            "changed_columns": changed,
            "present_columns": list(after_image) if after_image is not None else None,
            "column_types": {c.name: c.spark_type for c in table.columns},
            "source_types": {c.name: c.sql_type for c in table.columns},
            "tx_id": header.tx_id,
            "event_ts": header.commit_time,
            "detail": dumps(detail),
            "flags": flags or None,
        }

    def _assign(
        self,
        item: _Message,
        transactions: dict[TxKey, _Transaction],
        completed: dict[TxKey, dict[int, tuple[str, str]]],
        seen: dict[tuple[TxKey, int, str], str],
    ) -> None:
        """Group the message's records into pieces; recognise duplicates and conflicting segments."""
        groups: dict[tuple[TxKey, int], list[_Record]] = {}
        for record in item.records:
            if record.header is not None:
                groups.setdefault((record.header.tx_key, record.header.segment), []).append(record)
        for (key, segment), records in groups.items():
            header = records[0].header
            assert header is not None
            digest = hashlib.sha256("\x1e".join(r.raw.text for r in records).encode("utf-8")).hexdigest()
            label = f"segment {segment:04d} of transaction {header.tx_id} (commit_lsn {header.commit_lsn})"
            earlier = completed.get(key, {}).get(segment)
            if earlier is not None and earlier[0] == digest:
                item.duplicates.append(f"duplicate of {label}, applied in an earlier run ({earlier[1]}); not applied")
                continue
            if earlier is not None:
                item.rejected.append(("segment_number", f"{label} differs from the one applied earlier ({earlier[1]})"))
                continue
            if (key, segment, digest) in seen:
                item.duplicates.append(f"duplicate of {label} ({seen[(key, segment, digest)]}); not applied")
                continue
            tx = transactions.setdefault(key, _Transaction(key, header.tx_id, header.commit_lsn))
            if segment and segment in tx.numbered:
                other = tx.numbered[segment].message.ref
                item.rejected.append(("segment_number", f"{label} differs from the one received as {other}"))
                continue
            seen[(key, segment, digest)] = item.message.ref
            piece = _Piece(item.message, key, segment, records, digest)
            if segment:
                tx.numbered[segment] = piece
            else:
                tx.finals.append(piece)
            if item not in tx.messages:
                tx.messages.append(item)
            item.pieces.append(piece)

    # --- outcomes -----------------------------------------------------------------------------------
    def _settled(self, item: _Message) -> list[Event]:
        """Everything a message yields besides its changes: duplicates, conflicts, record errors."""
        events: list[Event] = []
        if item.duplicates:
            first = next(r.header for r in item.records if r.header is not None)
            duplicate = {
                "kind": KIND_TRANSACTION,
                "tx_id": first.tx_id,
                "detail": "; ".join(item.duplicates),
                "flags": [DUPLICATE_FLAG],
                "sequence": item.message.position,
            }
            events.append(self.complete(duplicate, item.message))
        events.extend(self.error_event(item.message, where, reason) for where, reason in item.rejected)
        events.extend(self._record_error(r) for r in item.loose_errors)
        return events

    def _record_error(self, record: _Record) -> Event:
        assert record.error is not None
        event = self.error_event(record.message, *record.error)
        event["raw_message"] = record.raw.text[:RAW_MESSAGE_LIMIT]
        return event

    def _resolve(self, group: list[_Message], transactions: dict[TxKey, _Transaction], now: dt.datetime) -> list[Event]:
        keys = list(dict.fromkeys(p.tx for m in group for p in m.pieces))
        incomplete = [(transactions[k], transactions[k].missing()) for k in keys if transactions[k].missing()]
        if not incomplete:
            events = [e for k in keys for e in self._emit(transactions[k])]
            return events + [e for item in group for e in self._settled(item)]
        what = "; ".join(
            f"incomplete transaction {tx.tx_id} (commit_lsn {tx.commit_lsn}): have segment(s) {tx.have() or 'none'}, "
            f"missing {missing}"
            for tx, missing in incomplete
        )
        landed = [m.message.ingest_ts for m in group if m.message.ingest_ts is not None]
        oldest = min((_aware(t) for t in landed), default=now)
        waited = (now - oldest).total_seconds()
        if self.timeout is None or waited < self.timeout:
            return [self.held_event(m.message, what, tx_id=incomplete[0][0].tx_id) for m in group]
        lacking = sum(tx.missing_count() for tx, _ in incomplete)
        reason = (
            f"{what}; {lacking} segment(s) missing; waited {waited:.0f}s for it "
            f"(incomplete_timeout_seconds: {self.timeout:g})"
        )
        events = []
        for item in group:
            events.append(self.error_event(item.message, "transaction", reason))
            events.extend(self._settled(item))
        return events

    def _emit(self, tx: _Transaction) -> list[Event]:
        """A complete transaction's changes in order (numbered segments, then the final ones)."""
        pieces = [tx.numbered[s] for s in sorted(tx.numbered)] + tx.finals
        segmented = bool(tx.numbered)
        refs = list(dict.fromkeys(p.message.ref for p in pieces))
        events: list[Event] = []
        index = 0
        for piece in pieces:
            related = [r for r in refs if r != piece.message.ref] if segmented else None
            for position, record in enumerate(piece.records):
                index += 1
                if record.change is None:
                    events.append(self._record_error(record))
                    continue
                header = record.header
                assert header is not None
                # Within a segmented transaction the index runs across its segments; otherwise it is
                # the record's place among its transaction's records in the message (with one record
                # per message, row-at-a-time publishing, the landing position decides).
                number = index if segmented else position + 1
                last = piece is pieces[-1] and position == len(piece.records) - 1
                event = {
                    **record.change,
                    "sequence": f"lsn:{header.lsn_key}:{number:010d}|{piece.message.position}",
                    "tx_seq": number,
                    "tx_last": last if segmented else position == len(piece.records) - 1,
                    "related_refs": related or None,
                }
                events.append(self.complete(event, piece.message))
        if segmented:
            final = pieces[-1]
            header = final.records[0].header
            assert header is not None
            marker = {
                "kind": KIND_TRANSACTION,
                "tx_id": tx.tx_id,
                "sequence": f"lsn:{header.lsn_key}:{0:010d}|{final.message.position}",
                "event_ts": header.commit_time,
                "related_refs": [r for r in refs if r != final.message.ref] or None,
                "detail": dumps(
                    {
                        "transaction": tx.tx_id,
                        "commit_lsn": tx.commit_lsn,
                        "records": index,
                        "segments": {f"{p.segment:04d}": p.digest for p in pieces},
                    }
                ),
            }
            events.append(self.complete(marker, final.message))
        return events


# --- helpers -----------------------------------------------------------------------------------------
def _aware(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


def _completed(context: list[Event]) -> dict[TxKey, dict[int, tuple[str, str]]]:
    """Segment digests of the segmented transactions completed in earlier runs (their markers)."""
    completed: dict[TxKey, dict[int, tuple[str, str]]] = {}
    for event in context:
        marked = _marked(event)
        if marked is None:
            continue
        key, digests = marked
        completed.setdefault(key, {}).update({s: (d, str(event.get("bronze_ref"))) for s, d in digests.items()})
    return completed


def _marked(event: Event) -> tuple[TxKey, dict[int, str]] | None:
    """A completed segmented transaction's key and segment digests, from its marker event."""
    if event.get("kind") != KIND_TRANSACTION or not event.get("detail") or event.get("flags"):
        return None
    try:
        detail = json.loads(event["detail"])
        key = (str(detail["transaction"]).replace(":", "").lower(), _lsn_key(str(detail["commit_lsn"])))
        return key, {int(s): str(d) for s, d in detail["segments"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _lsn_key(commit_lsn: str) -> str:
    return commit_lsn.replace(":", "").lower().rjust(32, "0")


def _components(items: list[_Message]) -> list[list[_Message]]:
    """Messages that share a transaction, transitively: they are released (or held) together."""
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[TxKey, int] = {}
    for i, item in enumerate(items):
        for piece in item.pieces:
            if piece.tx in owner:
                parent[find(i)] = find(owner[piece.tx])
            else:
                owner[piece.tx] = i
    groups: dict[int, list[_Message]] = {}
    for i, item in enumerate(items):
        groups.setdefault(find(i), []).append(item)
    return list(groups.values())
