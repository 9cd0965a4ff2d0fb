"""AWS DMS JSON (`aws-dms-json`): what AWS Database Migration Service writes to Kafka / Kinesis.

Each message is `{"data": {...}, "metadata": {...}}`. `metadata.record-type` is `data` (row
changes) or `control` (table and column changes: schema changes; a truncate empties the table).
`metadata.operation` load (full load: SNAPSHOT), insert, update, delete; `schema-name` and
`table-name` name the table; `timestamp` is the commit time; `transaction-id` /
`transaction-record-id` are present with IncludeTransactionDetails. `data` is the row after the
change (before it, for a delete). An update's before image comes from the task's
BeforeImageSettings (a member named by `before_image_field`) or from an
`add-before-image-columns` rule (columns prefixed `before_image_prefix` inside `data`, as Apache
Paimon reads them). Values are typed JSON, so column types are inferred from them; keys come
from conf (DMS messages name none).

Order: DMS writes each key's changes in commit order (partition key = primary key), and the
commit `timestamp` of changes cached during a full load precedes the load rows they follow, so
by default the order is the landing position (Kafka partition and offset, or file and line).
`order_by: timestamp` orders by `timestamp`, then `transaction-id` and `transaction-record-id`.

DMS leaves NULL and empty columns out of `data` unless the endpoint sets IncludeNullAndEmpty;
an absent column then keeps its previous value in gold. Such events carry the flag
`nulls_may_be_omitted` unless the source declares `include_null_and_empty: true`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field

from cdc_medallion.formats.base import Format, FormatOptions, ParseError, register_format
from cdc_medallion.formats.json_common import (
    Image,
    change,
    id_field,
    image_of,
    inferred_types,
    load_document,
    object_field,
    order_number,
    padded,
    schema_change,
    sequence,
    text_field,
    tombstone,
    unknown_operation,
    utc_timestamp,
    whole_number,
)
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import dumps
from cdc_medallion.model import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_TRUNCATE, OP_UPDATE

OPS = {"load": OP_SNAPSHOT, "insert": OP_INSERT, "update": OP_UPDATE, "delete": OP_DELETE}


class AwsDmsJsonOptions(FormatOptions):
    order_by: Literal["position", "timestamp"] = Field(
        "position", description="position (landing order, as DMS writes each key's changes) or timestamp"
    )
    before_image_field: str = Field("before-image", description="the BeforeImageSettings FieldName of the task")
    before_image_prefix: str = Field(
        "BI_", description="prefix of before-image columns inside `data` ('' to read none)"
    )
    include_null_and_empty: bool = Field(
        False, description="true when the endpoint sets IncludeNullAndEmpty, so that an absent column is really absent"
    )


@register_format
class AwsDmsJson(Format):
    name = "aws-dms-json"
    options = AwsDmsJsonOptions
    settings: AwsDmsJsonOptions

    def __init__(self, source_name: str, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(source_name, options)
        self.complete_images = self.settings.include_null_and_empty

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        document = load_document(message)
        if document is None:
            return [tombstone(message)]
        meta = document.get("metadata")
        if not isinstance(meta, dict):
            raise ParseError("metadata", "missing or not an object: not an AWS DMS message")
        record_type = (text_field(meta.get("record-type"), "metadata.record-type") or "").lower()
        operation = (text_field(meta.get("operation"), "metadata.operation") or "").lower()
        names = (
            None,
            text_field(meta.get("schema-name"), "metadata.schema-name"),
            text_field(meta.get("table-name"), "metadata.table-name"),
        )
        event_ts = utc_timestamp(meta.get("timestamp"), "metadata.timestamp")
        common = {
            "tx_id": id_field(meta.get("transaction-id"), "metadata.transaction-id"),
            "tx_seq": whole_number(meta.get("transaction-record-id")),
            "event_ts": event_ts,
        }
        order = self._sequence(message, meta, event_ts)
        if record_type == "control":
            if "truncate" in operation and names[2]:
                return [change(OP_TRUNCATE, (None, names[1], names[2]), None, None, order, **common)]
            detail = dumps({"operation": meta.get("operation"), "data": object_field(document.get("data"), "data")})
            return [schema_change(names, detail, order, flags=[f"dms:{operation}"], **common)]
        if record_type != "data":
            raise ParseError("metadata.record-type", f"expected data or control, got {meta.get('record-type')!r}")
        if operation not in OPS:
            raise unknown_operation("metadata.operation", meta.get("operation"), list(OPS))
        if not names[2]:
            raise ParseError("metadata.table-name", "missing")
        op = OPS[operation]
        data, before = self._images(document, op)
        if data is None:
            raise ParseError("data", f"{operation} without `data`")
        flags = [] if self.complete_images or op == OP_DELETE else ["nulls_may_be_omitted"]
        if op == OP_UPDATE and before is None:
            flags.append("before_image_missing")
        raw = document["data"]
        types, source_types = inferred_types({c: v for c, v in raw.items() if c in data})
        return [
            change(
                op,
                (None, names[1], names[2]),
                data if op == OP_DELETE else before,
                None if op == OP_DELETE else data,
                order,
                types=types,
                source_types=source_types,
                flags=flags,
                **common,
            )
        ]

    def _images(self, document: Mapping[str, Any], op: str) -> tuple[Image | None, Image | None]:
        """The `data` row without before-image columns, and the update's before image."""
        data = image_of(document.get("data"), "data")
        if data is None or op != OP_UPDATE:
            return data, None
        field, prefix = self.settings.before_image_field, self.settings.before_image_prefix
        before = image_of(document.get(field), field) if field else None
        if prefix:
            prefixed = {c: v for c, v in data.items() if c.startswith(prefix)}
            data = {c: v for c, v in data.items() if c not in prefixed}
            if prefixed:
                before = {**{c.removeprefix(prefix): v for c, v in prefixed.items()}, **(before or {})}
        return data, before

    def _sequence(self, message: BronzeMessage, meta: Mapping[str, Any], event_ts: Any) -> str:
        if self.settings.order_by == "position":
            return sequence(message)
        stamp = "" if event_ts is None else event_ts.strftime("%Y%m%d%H%M%S%f")
        return sequence(
            message,
            stamp,
            # A transaction id is an identifier (hex on some sources), ordered only when it is a number.
            padded(whole_number(meta.get("transaction-id")), 20),
            padded(order_number(meta.get("transaction-record-id"), "metadata.transaction-record-id"), 20),
        )
