"""Maxwell JSON (`maxwell-json`): Zendesk Maxwell's MySQL binlog messages.

`type` insert / update / delete map to the unified ops and bootstrap-insert to SNAPSHOT;
bootstrap-start / bootstrap-complete are informational; table-* and database-* messages
(with their `sql`) are schema changes. `data` is the row after the change (before it, for a
delete); `old` holds the previous values of only the changed columns. Values are typed JSON,
so column types are inferred from them. The key comes from `primary_key_columns` (as Flink
exposes it) or from the Kafka key Maxwell writes (`{"database", "table", "pk.<col>": ...}`).

Order: `ts` (seconds; `ts_ms` where present), then the transaction `xid`, then `xoffset` within
it (the row marked `commit` without an `xoffset` is the transaction's last), then the landing
position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from cdc_medallion.formats.base import Format, FormatOptions, ParseError, register_format
from cdc_medallion.formats.json_common import (
    change,
    epoch_millis,
    flag_field,
    id_field,
    image_of,
    inferred_types,
    key_names,
    load_document,
    order_number,
    padded,
    schema_change,
    sequence,
    text_field,
    tombstone,
    unknown_operation,
    whole_number,
)
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import loads
from cdc_medallion.model import KIND_MESSAGE, OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE

OPS = {"insert": OP_INSERT, "update": OP_UPDATE, "delete": OP_DELETE, "bootstrap-insert": OP_SNAPSHOT}
INFORMATIONAL = ("bootstrap-start", "bootstrap-complete")
DDL_PREFIXES = ("table-", "database-")
LAST_IN_TRANSACTION = 9_999_999_999


class MaxwellJsonOptions(FormatOptions):
    table: str | None = Field(None, description="table name for messages that name none")


@register_format
class MaxwellJson(Format):
    name = "maxwell-json"
    options = MaxwellJsonOptions
    settings: MaxwellJsonOptions

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        document = load_document(message)
        if document is None:
            return [tombstone(message)]
        code = text_field(document.get("type"), "type")
        if code is None:
            raise ParseError("type", "missing: not a Maxwell message")
        code = code.lower()
        millis = order_number(document.get("ts_ms"), "ts_ms")
        seconds = order_number(document.get("ts"), "ts")
        if millis is None and seconds is not None:
            millis = seconds * 1000
        transaction = order_number(document.get("xid"), "xid")  # None: absent, or a none marker
        xid = padded(transaction, 20)
        commit = flag_field(document.get("commit"), "commit") is True
        order = sequence(message, padded(millis, 15), xid, _xoffset(document, commit))
        event_ts = epoch_millis(millis)
        database = text_field(document.get("database"), "database")
        table = text_field(document.get("table"), "table")
        if code.startswith(DDL_PREFIXES):
            sql = text_field(document.get("sql"), "sql")
            return [schema_change((database, None, table), sql, order, event_ts=event_ts, flags=[code])]
        if code in INFORMATIONAL:
            return [{"kind": KIND_MESSAGE, "op": code.upper(), "source_db": database, "sequence": order}]
        if code not in OPS:
            raise unknown_operation("type", code, [*OPS, *INFORMATIONAL, "table-*", "database-*"])
        op = OPS[code]
        data = image_of(document.get("data"), "data")
        if data is None:
            raise ParseError("data", f"{code} without a `data` row")
        table = table or self.settings.table
        if not table:
            raise ParseError("table", "missing, and no `table` option to take it from")
        old = image_of(document.get("old"), "old")
        before, after, changed = (data, None, None) if op == OP_DELETE else (None, data, None)
        flags = []
        if op == OP_UPDATE:
            if old is None:
                flags.append("before_image_missing")
            else:
                before, changed = {**data, **old}, list(old)
        types, source_types = inferred_types(document.get("old"), document.get("data"))
        return [
            change(
                op,
                (database, None, table),
                before,
                after,
                order,
                keys=key_names(document.get("primary_key_columns"), "primary_key_columns") or _key_of(message),
                types=types,
                source_types=source_types,
                changed=changed,
                flags=flags,
                tx_id=None if transaction is None else id_field(document.get("xid"), "xid"),
                tx_seq=whole_number(document.get("xoffset")),
                tx_last=commit or None,
                event_ts=event_ts,
            )
        ]


def _xoffset(document: Mapping[str, Any], commit: bool) -> str:
    xoffset = order_number(document.get("xoffset"), "xoffset")
    if xoffset is not None:
        return padded(xoffset, 10)
    return padded(LAST_IN_TRANSACTION if commit else 0, 10)


def _key_of(message: BronzeMessage) -> list[str] | None:
    """Primary-key columns named by Maxwell's Kafka key (`"pk.id": 101`), if it is JSON."""
    if not message.key:
        return None
    try:
        key = loads(message.key)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(key, dict):
        return None
    names = [name[3:] for name in key if isinstance(name, str) and name.startswith("pk.") and len(name) > 3]
    return names or None
