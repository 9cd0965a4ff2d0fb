"""Oracle GoldenGate JSON (`ogg-json`): the GoldenGate for Big Data JSON formatter's messages.

`op_type` I / U / D / T (or INSERT / UPDATE / DELETE / TRUNCATE) map to the unified ops;
`before` and `after` are the row images (an update's `after` may hold only the changed and key
columns when the trail is compressed: gold keeps the others). `table` is `SCHEMA.TABLE`,
`primary_keys` keys it. Values are typed JSON, so column types are inferred from them. Any
other member (`tokens`, an unrelated `source` object) is ignored.

Order: the trail position `pos` (sequence number and RBA, fixed-width digits), then the landing
position; `op_ts` is the commit time (UTC) and is NOT an order: GoldenGate fixtures carry
later positions with earlier `op_ts`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from cdc_medallion.formats.base import Format, FormatOptions, ParseError, register_format
from cdc_medallion.formats.json_common import (
    change,
    image_of,
    inferred_types,
    key_names,
    load_document,
    order_number,
    padded,
    sequence,
    split_name,
    tombstone,
    unknown_operation,
    utc_timestamp,
)
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.model import OP_DELETE, OP_INSERT, OP_TRUNCATE, OP_UPDATE

OPS = {
    "I": OP_INSERT,
    "U": OP_UPDATE,
    "D": OP_DELETE,
    "T": OP_TRUNCATE,
    "INSERT": OP_INSERT,
    "UPDATE": OP_UPDATE,
    "DELETE": OP_DELETE,
    "TRUNCATE": OP_TRUNCATE,
}


class OggJsonOptions(FormatOptions):
    table: str | None = Field(None, description="SCHEMA.TABLE for messages that name none")


@register_format
class OggJson(Format):
    name = "ogg-json"
    options = OggJsonOptions
    settings: OggJsonOptions

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        document = load_document(message)
        if document is None:
            return [tombstone(message)]
        code = document.get("op_type")
        if code is None:
            raise ParseError("op_type", "missing: not a GoldenGate JSON message")
        if str(code).upper() not in OPS:
            raise unknown_operation("op_type", code, ["I", "U", "D", "T"])
        op = OPS[str(code).upper()]
        before = image_of(document.get("before"), "before")
        after = image_of(document.get("after"), "after")
        flags = []
        if op in (OP_INSERT, OP_UPDATE) and after is None:
            raise ParseError("after", f"{op} without an 'after' image")
        if op == OP_DELETE and before is None:
            raise ParseError(
                "before",
                "DELETE without a 'before' image, so the deleted row cannot be identified; have the "
                "Extract capture before images of deletes (do not use COMPRESSDELETES)",
            )
        if op == OP_UPDATE and before is None:
            flags.append("before_image_missing")
        names = split_name(document.get("table") or self.settings.table, "table")
        types, source_types = inferred_types(document.get("before"), document.get("after"))
        return [
            change(
                op,
                names,
                before,
                after,
                sequence(message, _position(document.get("pos"))),
                keys=key_names(document.get("primary_keys"), "primary_keys"),
                types=types,
                source_types=source_types,
                flags=flags,
                event_ts=utc_timestamp(document.get("op_ts"), "op_ts"),
            )
        ]


def _position(pos: Any) -> str:
    """The trail position (digits, as OGG writes it) as fixed-width text; absent: empty."""
    number = order_number(pos, "pos")
    return "" if number is None else padded(number, 30)
