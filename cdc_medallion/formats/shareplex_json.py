"""SharePlex JSON (`shareplex-json`): Quest SharePlex's Oracle change messages, as DTS writes them.

`meta` describes the operation: `op` (`ins`, `upd`, `del`, `truncate`, or the long forms
INSERT, UPDATE, DELETE, TRUNCATE, DROP COLUMN, UPDATE BEFORE, UPDATE AFTER), `table`
(`OWNER.TABLE`), `scn`, the transaction `trans` with the operation's `seq` of `size` (`idx` is
`seq/size`), `rowid`, commit `time` (UTC) and `posttime`.

Images: an insert's `data` is the new row; a delete's `data` is the row before. An update's
`data` holds only the changed columns' new values and `key` the before values of the key (and
other) columns: `after` is `data` plus the `key` columns the update did not change (their value
is unchanged, and gold needs the key), never a NULL for a column the message does not carry,
so gold keeps the columns the update did not touch. UPDATE BEFORE / UPDATE AFTER are the two
halves of an update: the AFTER half applies (as an update of its columns), the BEFORE half is
kept as an informational event with its image. DROP COLUMN is a schema change; TRUNCATE
empties the table. Values are Oracle text; columns are typed `string` unless conf types them.

Order: `scn`, then `seq` within the transaction, then the landing position (a message without
an `scn` sorts after those with one, by its commit `time`; it is flagged `scn_missing`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from cdc_medallion.formats.base import Format, FormatOptions, ParseError, register_format
from cdc_medallion.formats.json_common import (
    Image,
    change,
    count_field,
    image_of,
    inferred_types,
    load_document,
    order_number,
    padded,
    schema_change,
    sequence,
    split_name,
    text_field,
    tombstone,
    unknown_operation,
    utc_timestamp,
    whole_number,
)
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.formats.values import dumps
from cdc_medallion.model import KIND_MESSAGE, OP_DELETE, OP_INSERT, OP_TRUNCATE, OP_UPDATE

OPS = {
    "ins": OP_INSERT,
    "insert": OP_INSERT,
    "upd": OP_UPDATE,
    "update": OP_UPDATE,
    "update after": OP_UPDATE,
    "del": OP_DELETE,
    "delete": OP_DELETE,
    "truncate": OP_TRUNCATE,
}
UPDATE_BEFORE = "update before"
DROP_COLUMN = "drop column"


class SharePlexJsonOptions(FormatOptions):
    table: str | None = Field(None, description="OWNER.TABLE for messages whose meta names none")
    rowid_column: str | None = Field(
        None,
        description="add meta.rowid to every image under this column name (a key for tables without a primary key)",
    )


@register_format
class SharePlexJson(Format):
    name = "shareplex-json"
    options = SharePlexJsonOptions
    settings: SharePlexJsonOptions

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        document = load_document(message)
        if document is None:
            return [tombstone(message)]
        meta = document.get("meta")
        if not isinstance(meta, dict):
            raise ParseError("meta", "missing or not an object: not a SharePlex message")
        code = " ".join((text_field(meta.get("op"), "meta.op") or "").lower().split())
        if not code:
            raise ParseError("meta.op", "missing")
        if code not in OPS and code not in (UPDATE_BEFORE, DROP_COLUMN):
            raise unknown_operation("meta.op", meta.get("op"), ["ins", "upd", "del", "truncate", *_LONG_FORMS])
        names = split_name(text_field(meta.get("table"), "meta.table") or self.settings.table, "meta.table")
        seq, size = _position_in_transaction(meta)
        scn = order_number(meta.get("scn"), "meta.scn")
        # Without an scn a change sorts after every change that has one, by commit time.
        scn_part = padded(scn, 30) if scn is not None else f"~{meta.get('time') or ''}"
        order = sequence(message, scn_part, padded(seq, 10))
        common = {
            "tx_id": text_field(meta.get("trans"), "meta.trans"),
            "tx_seq": seq,
            "tx_last": None if seq is None or size is None else seq == size,
            "event_ts": utc_timestamp(meta.get("time"), "meta.time"),
        }
        flags = [] if scn is not None else ["scn_missing"]
        data = self._image(document.get("data"), "data", meta)
        if code == DROP_COLUMN:
            detail = "DROP COLUMN" if document.get("data") is None else f"DROP COLUMN {dumps(document['data'])}"
            return [schema_change(names, detail, order, flags=flags or None, **common)]
        if code == UPDATE_BEFORE:
            if data is None:
                raise ParseError("data", "UPDATE BEFORE without `data` (the row before the update)")
            before = {"kind": KIND_MESSAGE, "op": "UPDATE BEFORE", "before": data, "sequence": order, **common}
            return [{**before, "flags": flags or None}]
        op = OPS[code]
        if op == OP_TRUNCATE:
            return [change(op, names, None, None, order, flags=flags, **common)]
        if data is None:
            raise ParseError("data", f"{op} without `data`")
        before, after, changed = None, data, None
        if op == OP_DELETE:
            before, after = data, None
        elif op == OP_UPDATE:
            before = self._image(document.get("key"), "key", meta)
            after = {**{c: v for c, v in (before or {}).items() if c not in data}, **data}
            if code != "update after":  # `upd` data is exactly the changed columns
                changed = [c for c in data if c != self.settings.rowid_column]
            if before is None:
                flags.append("before_image_missing")
        types, source_types = inferred_types(document.get("key"), document.get("data"))
        if self.settings.rowid_column:
            types[self.settings.rowid_column] = "string"
        return [
            change(
                op,
                names,
                before,
                after,
                order,
                types=types,
                source_types=source_types,
                changed=changed,
                flags=flags,
                **common,
            )
        ]

    def _image(self, raw: Any, where: str, meta: Mapping[str, Any]) -> Image | None:
        image = image_of(raw, where)
        column = self.settings.rowid_column
        if image is not None and column:
            image[column] = text_field(meta.get("rowid"), "meta.rowid")
        return image


_LONG_FORMS = ["INSERT", "UPDATE", "DELETE", "TRUNCATE", "DROP COLUMN", "UPDATE BEFORE", "UPDATE AFTER"]


def _position_in_transaction(meta: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """`seq` and `size`, or the `idx` text `seq/size` when they are absent."""
    seq, size = order_number(meta.get("seq"), "meta.seq"), count_field(meta.get("size"), "meta.size")
    if (seq is None or size is None) and isinstance(meta.get("idx"), str) and "/" in meta["idx"]:
        first, _, second = meta["idx"].partition("/")
        seq = seq if seq is not None else whole_number(first)
        size = size if size is not None else whole_number(second)
    return seq, size
