"""Qlik Replicate JSON (`qlik-json`): data messages, and the metadata messages their masks refer to.

Messages come wrapped (`{"magic": "atMSG", "type": "DT" | "MD", "message": {...}}`) or bare (a
data message's `data` / `beforeData` / `headers` at top level). A metadata message (MD) gives a
table's lineage (schema, table, version) and columns (ordinal, type, primary-key position); it
becomes a `schema_change` event whose `detail` keeps all of it, so later runs rebuild the
catalog from earlier events (`context_kinds`). A wrapped data message finds its metadata by
`messageSchemaId` (and is held until it arrives when it is not known yet); a bare one by its
table, named by the topic (`schema.table` or `table`) or the `table` option. Without metadata
the columns are those of the data, in message order, and types are inferred; keys then come
from conf (or, for a DELETE, from its changeMask, which names exactly the key columns).

Ops: REFRESH (full load) -> SNAPSHOT, INSERT, UPDATE, DELETE. `changeMask` / `columnMask` are
decoded into `changed_columns` / `present_columns` (see masks.py); a column whose columnMask bit
is clear and whose value is null was not replicated: it is absent from the image, so gold keeps
its previous value. Mask problems are facts in `flags`, counted by expectations/silver.qlik-json.yml.
`changeSequence` orders changes; an `externalSchemaId` a table version (`messageSchemaId`) has
not shown before is a schema change.

Parsed on every core: data messages are split over the groups of the stateful operator, and
every group sees every metadata message (`stateful.py`); the messages that carry an
`externalSchemaId` go by their table version and that id, so each new id is seen in one group.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar

from pydantic import Field

from cdc_medallion.formats.base import Format, FormatOptions, ParseError, millis_to_ts, register_format
from cdc_medallion.formats.json_common import (
    count_field,
    flag_field,
    id_field,
    json_type,
    load_document,
    padded,
    text_field,
    tombstone,
)
from cdc_medallion.formats.masks import Mask, MaskError, decode_mask
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import dumps, inferred_type, loads, text_of
from cdc_medallion.identifiers import COLUMN_NAME_RULE, is_column_name
from cdc_medallion.model import (
    KIND_CHANGE,
    KIND_SCHEMA_CHANGE,
    OP_DELETE,
    OP_INSERT,
    OP_SNAPSHOT,
    OP_UPDATE,
)
from cdc_medallion.sqltypes import MAX_FRACTION_DIGITS, UNCONSTRAINED_DECIMAL, decimal_type

OPS = {"REFRESH": OP_SNAPSHOT, "INSERT": OP_INSERT, "UPDATE": OP_UPDATE, "DELETE": OP_DELETE}
SEQUENCE_WIDTH = 35  # YYYYMMDDHHmmSShh + a 19-digit change number
METADATA_DETAIL = "qlik-metadata"
EXTERNAL_ID_DETAIL = "qlik-external-schema-id"

# Qlik Replicate data types -> Spark SQL types (NUMERIC uses the column's precision and scale).
QLIK_TYPES = {
    "BOOLEAN": "boolean",
    "BYTES": "binary",
    "BLOB": "binary",
    "DATE": "date",
    "TIME": "string",
    "DATETIME": "timestamp",
    "TIMESTAMP": "timestamp",
    "INT1": "tinyint",
    "INT2": "smallint",
    "INT4": "int",
    "INT8": "bigint",
    "UINT1": "smallint",
    "UINT2": "int",
    "UINT4": "bigint",
    "UINT8": "decimal(20,0)",
    "REAL4": "float",
    "REAL8": "double",
    "STRING": "string",
    "WSTRING": "string",
    "CLOB": "string",
    "NCLOB": "string",
}
LOB_TYPES = frozenset({"BLOB", "CLOB", "NCLOB"})  # not in changeMask (Qlik's note)
BINARY_TYPES = frozenset({"BYTES", "BLOB"})  # JSON carries them as hex digits
MAX_ORDERS_KEPT = 1024  # image spellings remembered per table version (hostile input varies them)


# --- metadata ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class QlikColumn:
    name: str
    ordinal: int
    type: str
    precision: int = 0
    scale: int = 0
    key_position: int = 0

    @property
    def spark_type(self) -> str:
        if self.type == "NUMERIC":  # without a precision, or wider than Spark's: the exact text
            return decimal_type(self.precision, self.scale) if self.precision else UNCONSTRAINED_DECIMAL
        if self.type == "DATETIME" and self.scale > MAX_FRACTION_DIGITS:
            return "string"  # nanoseconds (scale 7-9): more than a Spark timestamp keeps; exact text
        return QLIK_TYPES.get(self.type, "string")

    @property
    def source_type(self) -> str:
        return f"NUMERIC({self.precision},{self.scale})" if self.type == "NUMERIC" else self.type

    @property
    def is_lob(self) -> bool:
        return self.type in LOB_TYPES


@dataclass(frozen=True)
class TableMeta:
    """One version of one table's structure, from a metadata message."""

    schema_id: str | None
    schema: str | None
    table: str
    version: int | None
    columns: tuple[QlikColumn, ...]  # by ordinal
    raw: Mapping[str, Any] = field(compare=False, repr=False, default_factory=dict)

    # Worked out once per metadata version, not once per data message that names it (the
    # Qlik parse runs in one Python worker: it is the slowest of the formats when it repeats them).
    @cached_property
    def by_name(self) -> Mapping[str, QlikColumn]:
        return MappingProxyType({c.name: c for c in self.columns})

    @cached_property
    def ordinals(self) -> Mapping[int, str]:
        return MappingProxyType({c.ordinal: c.name for c in self.columns})

    @cached_property
    def _orders(self) -> dict[tuple[str, ...], tuple[str, ...]]:
        return {}

    def in_order(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """An image's column names by ordinal; names the table lacks last, as given. Most
        images of a table name the same columns, so each spelling is sorted once."""
        ordered = self._orders.get(names)
        if ordered is None:
            columns = self.by_name
            ordered = tuple(sorted(names, key=lambda name: columns[name].ordinal if name in columns else 1 << 30))
            if len(self._orders) < MAX_ORDERS_KEPT:
                self._orders[names] = ordered
        return ordered

    @cached_property
    def key(self) -> tuple[str, ...]:
        return tuple(c.name for c in sorted(self.columns, key=lambda c: c.key_position) if c.key_position > 0)

    @cached_property
    def lobs(self) -> frozenset[str]:
        return frozenset(c.name for c in self.columns if c.is_lob)

    @cached_property
    def spark_types(self) -> Mapping[str, str]:
        return MappingProxyType({c.name: c.spark_type for c in self.columns})

    @cached_property
    def source_types(self) -> Mapping[str, str]:
        return MappingProxyType({c.name: c.source_type for c in self.columns})


def _int_field(raw: Mapping[str, Any], name: str, where: str, default: int | None = 0) -> int:
    value = raw.get(name, default)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParseError(f"{where}.{name}", f"expected a whole number, got {json_type(value)} ({value!r})")
    return value


def parse_metadata(body: Mapping[str, Any], where: str = "message", schema_id: str | None = None) -> TableMeta:
    """A metadata message body (`schemaId`, `lineage`, `tableStructure.tableColumns`).

    `schema_id` is the envelope's messageSchemaId, used when the body names none.
    """
    lineage = body.get("lineage")
    if not isinstance(lineage, dict):
        raise ParseError(f"{where}.lineage", "missing: a metadata message names its table in `lineage`")
    table = lineage.get("table")
    if not isinstance(table, str) or not table:
        raise ParseError(f"{where}.lineage.table", f"expected a table name, got {table!r}")
    structure = body.get("tableStructure")
    columns_raw = structure.get("tableColumns") if isinstance(structure, dict) else None
    if not isinstance(columns_raw, dict) or not columns_raw:
        raise ParseError(f"{where}.tableStructure.tableColumns", "missing or empty: expected the table's columns")
    columns = []
    for name, spec in columns_raw.items():
        here = f"{where}.tableStructure.tableColumns.{name}"
        if not is_column_name(name):
            raise ParseError(here, f"unusable column name {name!r}: {COLUMN_NAME_RULE}")
        if not isinstance(spec, dict):
            raise ParseError(here, f"expected a JSON object, got {type(spec).__name__}")
        ordinal = _int_field(spec, "ordinal", here, default=None)
        if ordinal < 1:
            raise ParseError(f"{here}.ordinal", f"ordinals start at 1, got {ordinal}")
        kind = spec.get("type")
        if not isinstance(kind, str) or not kind:
            raise ParseError(f"{here}.type", f"expected a type name, got {kind!r}")
        columns.append(
            QlikColumn(
                name=name,
                ordinal=ordinal,
                type=kind.upper(),
                precision=_int_field(spec, "precision", here),
                scale=_int_field(spec, "scale", here),
                key_position=_int_field(spec, "primaryKeyPosition", here),
            )
        )
    ordinals = [c.ordinal for c in columns]
    if len(set(ordinals)) != len(ordinals):
        raise ParseError(f"{where}.tableStructure.tableColumns", f"duplicate ordinals {sorted(ordinals)}")
    version = count_field(lineage.get("tableVersion"), f"{where}.lineage.tableVersion")
    schema_id = text_field(body.get("schemaId"), f"{where}.schemaId") or schema_id
    return TableMeta(
        schema_id=schema_id,
        schema=text_field(lineage.get("schema"), f"{where}.lineage.schema"),
        table=table,
        version=version,
        columns=tuple(sorted(columns, key=lambda c: c.ordinal)),
        raw={"schemaId": schema_id, "lineage": lineage, "tableStructure": {"tableColumns": columns_raw}},
    )


class Catalog:
    """Metadata known so far: by schema id (exact) and the latest version per table."""

    def __init__(self) -> None:
        self.by_id: dict[str, TableMeta] = {}
        self.latest: dict[tuple[str, str], tuple[tuple[int, int], TableMeta]] = {}
        self.latest_by_name: dict[str, tuple[tuple[int, int], TableMeta]] = {}
        self.external_ids: set[tuple[str, str, str | None, str]] = set()  # table, messageSchemaId, id
        self._order = 0

    def add(self, meta: TableMeta) -> None:
        self._order += 1
        rank = (meta.version if meta.version is not None else -1, self._order)
        if meta.schema_id:
            self.by_id[meta.schema_id] = meta
        for index, key in (
            (self.latest, _table_key(meta.schema, meta.table)),
            (self.latest_by_name, meta.table.lower()),
        ):
            if key not in index or index[key][0] <= rank:
                index[key] = (rank, meta)

    def for_table(self, schema: str | None, table: str) -> TableMeta | None:
        found = self.latest.get(_table_key(schema, table)) if schema else self.latest_by_name.get(table.lower())
        return found[1] if found else None

    @classmethod
    def from_context(cls, context: list[Event]) -> Catalog:
        """Rebuild from earlier runs' schema_change events, in their landing order."""
        catalog = cls()
        for event in sorted(context, key=lambda e: e.get("sequence") or ""):
            if event.get("kind") != KIND_SCHEMA_CHANGE or not event.get("detail"):
                continue
            try:
                detail = loads(event["detail"])
            except ValueError:
                continue
            if not isinstance(detail, dict):
                continue
            if detail.get("type") == METADATA_DETAIL:
                try:
                    catalog.add(parse_metadata(detail, "context"))
                except ParseError:
                    continue
            elif detail.get("type") == EXTERNAL_ID_DETAIL and event.get("source_table"):
                table = _table_key(event.get("source_schema"), event["source_table"])
                catalog.external_ids.add((*table, detail.get("messageSchemaId"), str(detail.get("externalSchemaId"))))
        return catalog


# --- the format -------------------------------------------------------------------------------
#: SQL: what the split needs of a message's JSON, read in one pass (NULL members where the text
#: is no JSON object, or has none of them).
_ENVELOPE = (
    "from_json(CAST(value AS STRING), 'type STRING, tableStructure STRING, messageSchemaId STRING,"
    " headers STRUCT<externalSchemaId: STRING>, message STRUCT<headers: STRUCT<externalSchemaId: STRING>>')"
)
_EXTERNAL_ID = "coalesce(__envelope.message.headers.externalSchemaId, __envelope.headers.externalSchemaId)"


@dataclass
class _Parsed:
    """A message's envelope read in the first pass."""

    kind: str  # "MD" or "DT"
    body: dict[str, Any]
    schema_id: str | None
    meta: TableMeta | None = None  # for MD


class QlikJsonOptions(FormatOptions):
    table: str | None = Field(
        None, description="table of data messages without metadata (bare messages) when there is no topic to name it"
    )
    schema_name: str | None = Field(None, alias="schema", description="schema of such messages")
    wait_for_metadata: bool = Field(
        True,
        description="hold a wrapped data message whose messageSchemaId names metadata not seen yet until that metadata "
        "message arrives (false: parse it at once, without metadata)",
    )


@register_format
class QlikJson(Format):
    name = "qlik-json"
    stateful: ClassVar[bool] = True
    context_kinds: ClassVar[tuple[str, ...]] = (KIND_SCHEMA_CHANGE,)
    # A data message needs only metadata, and every group sees all of it; the one thing data
    # messages keep for one another is which externalSchemaIds a table version has shown, so a
    # message with one goes by its table version and that id, any other by its own position.
    related_by: ClassVar[str | None] = f"""
        CASE WHEN {_EXTERNAL_ID} IS NULL
        THEN concat_ws('/', _file, CAST(_line AS STRING), topic, CAST(partition AS STRING), CAST(offset AS STRING))
        ELSE concat_ws('/', coalesce(__envelope.messageSchemaId, topic), {_EXTERNAL_ID}) END"""
    needed_by_all: ClassVar[str | None] = "__envelope.type = 'MD' OR __envelope.tableStructure IS NOT NULL"
    split_envelope: ClassVar[str | None] = _ENVELOPE
    split_since_layout: ClassVar[int] = 2
    options = QlikJsonOptions
    settings: QlikJsonOptions

    def __init__(self, source_name: str, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(source_name, options)
        self.wait_for_metadata = self.settings.wait_for_metadata

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        return self.parse_messages([message], [])

    def parse_messages(self, messages: list[BronzeMessage], context: list[Event]) -> list[Event]:
        catalog = Catalog.from_context(context)
        # Pass 1: envelopes, and the metadata of this batch by schema id (a data message may land
        # before the metadata it names, e.g. when they come from different topics or files).
        parsed: list[_Parsed | ParseError | None] = []  # None: a Kafka tombstone
        batch_ids: dict[str, TableMeta] = {}
        for message in messages:
            if message.value is None and not message.landing_error:
                parsed.append(None)
                continue
            try:
                if message.landing_error:
                    raise ParseError("value", message.landing_error)
                item = _envelope(message)
                if item.kind == "MD":
                    item.meta = parse_metadata(item.body, schema_id=item.schema_id)
                    if item.meta.schema_id:
                        batch_ids.setdefault(item.meta.schema_id, item.meta)
            except ParseError as error:
                item = error
            except Exception as error:  # a parser bug must not lose the message either
                item = ParseError("message", f"parser failed: {type(error).__name__}: {error}")
            parsed.append(item)
        # Pass 2: events, in landing order.
        events: list[Event] = []
        for message, item in zip(messages, parsed, strict=True):
            if item is None:
                events.append(self.complete(tombstone(message), message))
            elif isinstance(item, ParseError):
                events.append(self.error_event(message, item.field, item.reason))
            elif item.kind == "MD":
                events.extend(self._guarded(message, self._metadata_event, item, catalog))
            else:
                events.extend(self._guarded(message, self._data_events, item, catalog, batch_ids))
        return events

    def _guarded(self, message: BronzeMessage, produce: Callable[..., list[Event]], *args: Any) -> list[Event]:
        """Events of one message, completed; its errors become a quarantined event."""
        try:
            produced = produce(message, *args)
        except ParseError as error:
            return [self.error_event(message, error.field, error.reason)]
        except Exception as error:
            return [self.error_event(message, "message", f"parser failed: {type(error).__name__}: {error}")]
        return [event if event.get("bronze_ref") else self.complete(event, message) for event in produced]

    # --- metadata messages ----------------------------------------------------------------
    def _metadata_event(self, message: BronzeMessage, item: _Parsed, catalog: Catalog) -> list[Event]:
        meta = item.meta
        assert meta is not None
        known = catalog.by_id.get(meta.schema_id) if meta.schema_id else None
        catalog.add(meta)
        lineage = meta.raw.get("lineage") or {}
        return [
            {
                "kind": KIND_SCHEMA_CHANGE,
                "op": "METADATA",
                "source_schema": meta.schema,
                "source_table": meta.table,
                "key_columns": list(meta.key) or None,
                "column_types": dict(meta.spark_types),
                "source_types": dict(meta.source_types),
                "present_columns": [c.name for c in meta.columns],
                "sequence": message.position,
                "event_ts": _timestamp(lineage.get("timestamp"), "message.lineage.timestamp"),
                "detail": dumps({"type": METADATA_DETAIL, **meta.raw}),
                "flags": ["metadata_repeated"] if known is not None and known.columns == meta.columns else None,
            }
        ]

    # --- data messages --------------------------------------------------------------------
    def _data_events(
        self, message: BronzeMessage, item: _Parsed, catalog: Catalog, batch_ids: Mapping[str, TableMeta]
    ) -> list[Event]:
        body = item.body
        headers = body.get("headers")
        if not isinstance(headers, dict):
            raise ParseError(
                "headers", f"expected the change headers (operation, changeSequence, ...), got {headers!r}"
            )
        meta = None
        if item.schema_id:
            meta = catalog.by_id.get(item.schema_id) or batch_ids.get(item.schema_id)
            if meta is None and self.wait_for_metadata:
                reason = f"waiting for the metadata message of messageSchemaId {item.schema_id}"
                return [self.held_event(message, reason)]
        if meta is not None:
            schema, table = meta.schema, meta.table
        else:
            topic_schema, topic_table = _names_from_topic(message.topic)
            table = topic_table or self.settings.table
            schema = topic_schema if topic_table else self.settings.schema_name
            if not table:
                raise ParseError(
                    "message",
                    "cannot name the table: no metadata message for it, no topic, and no `table` option",
                )
            if not item.schema_id:
                meta = catalog.for_table(schema, table)
                if meta is not None:
                    schema = meta.schema or schema
        change = self._change(message, headers, body, meta, schema, table)  # raises before any state changes
        events: list[Event] = []
        external = id_field(headers.get("externalSchemaId"), "headers.externalSchemaId")
        if external is not None:
            key = (*_table_key(schema, table), item.schema_id, str(external))
            if key not in catalog.external_ids:
                catalog.external_ids.add(key)
                events.append(
                    {
                        "kind": KIND_SCHEMA_CHANGE,
                        "op": "EXTERNAL_SCHEMA_ID",
                        "source_schema": schema,
                        "source_table": table,
                        "sequence": _sequence(headers, None, message),
                        "event_ts": _timestamp(headers.get("timestamp"), "headers.timestamp"),
                        "detail": dumps(
                            {
                                "type": EXTERNAL_ID_DETAIL,
                                "externalSchemaId": str(external),
                                "messageSchemaId": item.schema_id,
                            }
                        ),
                    }
                )
        events.append(change)
        return events

    def _change(
        self,
        message: BronzeMessage,
        headers: Mapping[str, Any],
        body: Mapping[str, Any],
        meta: TableMeta | None,
        schema: str | None,
        table: str,
    ) -> Event:
        operation = headers.get("operation")
        if not isinstance(operation, str) or operation not in OPS:
            raise ParseError("headers.operation", f"unknown operation {operation!r} (expected {', '.join(OPS)})")
        op = OPS[operation]
        data, before_data = body.get("data"), body.get("beforeData")
        for name, image in (("data", data), ("beforeData", before_data)):
            if image is not None and not isinstance(image, dict):
                raise ParseError(name, f"expected a JSON object or null, got {type(image).__name__}")
        if op != OP_DELETE and data is None:
            raise ParseError("data", f"{operation} without `data`")
        if op == OP_DELETE:
            if before_data is None and data is None:
                raise ParseError("beforeData", "DELETE without the deleted row (neither `beforeData` nor `data`)")
            before_data, data = (before_data if before_data is not None else data), None
        flags: dict[str, None] = {}
        problems: list[str] = []
        if meta is None:
            flags["metadata_missing"] = None
            names = list(dict.fromkeys([*(data or {}), *(before_data or {})]))
            ordinals = {i + 1: n for i, n in enumerate(names)}
        else:
            ordinals = meta.ordinals
        count = max(ordinals, default=0)
        change_mask = _mask(headers, "changeMask", count, flags, problems)
        column_mask = _mask(headers, "columnMask", count, flags, problems)
        # A mask's ordinals ascend, so its columns come in the table's order.
        present_names = None if column_mask is None else [ordinals[o] for o in column_mask.ordinals if o in ordinals]
        present = None if present_names is None else set(present_names)
        after = self._image(data, meta, present, flags, problems, "data")
        before = self._image(before_data, meta, present, flags, problems, "beforeData")
        changed = None if change_mask is None else [ordinals[o] for o in change_mask.ordinals if o in ordinals]
        key = list(meta.key) if meta is not None else []
        lobs = meta.lobs if meta is not None else frozenset()
        if change_mask is not None and changed is not None:
            masked = set(changed)
            if op in (OP_INSERT, OP_SNAPSHOT) and meta is not None:
                missing = [c.name for c in meta.columns if not c.is_lob and c.name not in masked]
                if missing:
                    flags["insert_mask_incomplete"] = None
                    problems.append(f"changeMask of {operation} lacks columns {missing}")
            elif op == OP_DELETE and key:
                if masked != set(key):
                    flags["delete_mask_not_key"] = None
                    problems.append(f"changeMask of DELETE has {sorted(masked)}, the key is {key}")
            elif op == OP_DELETE and changed:
                key = changed  # "only primary-key (or unique index) columns have the associated bits set"
                flags["key_from_delete_mask"] = None
            elif op == OP_UPDATE and after is not None and before is not None:
                common = (set(after) & set(before)) - lobs
                differ = {c for c in common if after[c] != before[c]}
                if differ != (masked & common):
                    flags["change_mask_disagrees_with_images"] = None
                    problems.append(
                        f"changeMask of UPDATE names {sorted(masked & common)}, "
                        f"data and beforeData differ in {sorted(differ)}"
                    )
        types, source_types = _types(meta, data, before_data)
        tx_id = text_field(headers.get("transactionId"), "headers.transactionId")
        counter = count_field(headers.get("transactionEventCounter"), "headers.transactionEventCounter")
        last = flag_field(headers.get("transactionLastEvent"), "headers.transactionLastEvent")
        return {
            "kind": KIND_CHANGE,
            "source_schema": schema,
            "source_table": table,
            "op": op,
            "key_columns": key or None,
            "before": before,
            "after": after,
            "changed_columns": changed,
            "present_columns": present_names,
            "column_types": types or None,
            "source_types": source_types or None,
            "sequence": _sequence(headers, op, message),
            "tx_id": tx_id,
            "tx_seq": counter,
            "tx_last": last,
            "event_ts": _timestamp(headers.get("timestamp"), "headers.timestamp"),
            "flags": list(flags) or None,
            "detail": dumps({"mask_problems": problems}) if problems else None,
        }

    def _image(
        self,
        row: Mapping[str, Any] | None,
        meta: TableMeta | None,
        present: set[str] | None,
        flags: dict[str, None],
        problems: list[str],
        where: str,
    ) -> dict[str, str | None] | None:
        """A row image: columns not replicated (columnMask bit clear, value null) are left out."""
        if row is None:
            return None
        columns = meta.by_name if meta is not None else {}
        ordered = meta.in_order(tuple(row)) if meta is not None else row
        image: dict[str, str | None] = {}
        for name in ordered:
            value = row[name]
            if meta is not None and name not in columns:
                flags["column_not_in_metadata"] = None
            if present is not None and name not in present:
                if value is None:
                    continue  # not replicated: absent, not NULL
                flags["column_mask_misses_value"] = None
                problems.append(f"columnMask lacks {name}, which has a value in {where}")
            column = columns.get(name)
            image[name] = _value(value, column, where, name)
        return image


# --- helpers ----------------------------------------------------------------------------------
def _envelope(message: BronzeMessage) -> _Parsed:
    document = load_document(message)
    if document is None:
        raise ParseError("value", "empty message: a Qlik message is a JSON object")
    if "magic" in document or ("type" in document and "message" in document):
        if document.get("magic") != "atMSG":
            raise ParseError("magic", f"expected 'atMSG', got {document.get('magic')!r}")
        body = document.get("message")
        if not isinstance(body, dict):
            raise ParseError("message", f"expected a JSON object, got {type(body).__name__}")
        kind = document.get("type")
        schema_id = text_field(document.get("messageSchemaId"), "messageSchemaId")
        if kind == "MD":
            return _Parsed("MD", body, text_field(body.get("schemaId"), "message.schemaId") or schema_id)
        if kind == "DT":
            return _Parsed("DT", body, schema_id)
        raise ParseError("type", f"unknown message type {kind!r} (expected DT or MD)")
    if "lineage" in document and "tableStructure" in document:
        return _Parsed("MD", document, text_field(document.get("schemaId"), "schemaId"))
    if {"data", "beforeData", "headers"} & set(document):
        return _Parsed("DT", document, None)
    raise ParseError("value", "neither a Qlik data message (data, beforeData, headers) nor a metadata message")


def _mask(
    headers: Mapping[str, Any], name: str, count: int, flags: dict[str, None], problems: list[str]
) -> Mask | None:
    text = headers.get(name)
    if text is None or text == "":
        return None
    try:
        mask = decode_mask(text)
    except MaskError as error:
        flags["mask_not_hex"] = None
        problems.append(f"{name}: {error}")
        return None
    if mask.odd_length:
        flags["mask_odd_length"] = None
        problems.append(f"{name} {text!r} has an odd number of digits (read as '0{text}')")
    beyond = mask.beyond(count)
    if beyond:
        flags["mask_bit_beyond_columns"] = None
        problems.append(f"{name} {text!r} sets ordinals {list(beyond)} beyond the {count} column(s)")
    return mask


def _value(value: Any, column: QlikColumn | None, image: str, name: str) -> str | None:
    """A value's text; binary columns' hex digits as base64. `image` and `name` say where."""
    if value is None or column is None or column.type not in BINARY_TYPES:
        return text_of(value)
    if not isinstance(value, str):
        reason = f"{column.type} value must be hexadecimal text, got {type(value).__name__}"
        raise ParseError(f"{image}.{name}", reason)
    try:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    except ValueError:
        raise ParseError(f"{image}.{name}", f"{column.type} value {value[:40]!r} is not hexadecimal") from None


def _types(
    meta: TableMeta | None, data: Mapping[str, Any] | None, before_data: Mapping[str, Any] | None
) -> tuple[dict[str, str], dict[str, str]]:
    """Types from the metadata; columns it lacks (or all, without it) inferred from the JSON values."""
    types: dict[str, str] = {}
    source_types: dict[str, str] = {}
    if meta is not None:
        types.update(meta.spark_types)
        source_types.update(meta.source_types)
    for row in (before_data, data):
        for name, value in (row or {}).items():
            if name in types:
                continue
            inferred = "double" if isinstance(value, float) else inferred_type(value)
            if inferred is not None:
                types[name] = inferred
                source_types[name] = "json"
    return types, source_types


def _sequence(headers: Mapping[str, Any], op: str | None, message: BronzeMessage) -> str:
    """changeSequence (35 digits, sortable as text) then the landing position as tie-breaker.

    Full-load rows (REFRESH) carry none: they sort before every CDC change.
    """
    raw = headers.get("changeSequence")
    text = "" if raw is None else str(raw).strip()
    if not text:
        if op in (OP_INSERT, OP_UPDATE, OP_DELETE):
            raise ParseError("headers.changeSequence", f"missing on a {op}: the change cannot be ordered")
        text = "0"
    if re.fullmatch(r"[0-9]+", text) is None:
        raise ParseError("headers.changeSequence", f"expected digits, got {text[:40]!r}")
    return f"{padded(int(text), SEQUENCE_WIDTH)}|{message.position}"


def _timestamp(value: Any, where: str) -> dt.datetime | None:
    """Qlik's change timestamp (UTC text like 2018-04-13T20:13:58.289), or epoch milliseconds.

    Absent, null or empty it is unknown (full-load rows carry ""); present but not a time, it is
    an error naming it."""
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return millis_to_ts(value)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        reason = f"expected a timestamp (text or epoch milliseconds), got {json_type(value)} ({value!r})"
        raise ParseError(where, reason)
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ParseError(where, f"cannot read {value[:40]!r} as a timestamp") from None
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def _names_from_topic(topic: str | None) -> tuple[str | None, str | None]:
    """A per-table topic `schema.table` or `table`."""
    if not topic:
        return None, None
    parts = topic.split(".")
    return (parts[-2] if len(parts) >= 2 else None), parts[-1]


def _table_key(schema: str | None, table: str) -> tuple[str, str]:
    return (schema or "").lower(), table.lower()
