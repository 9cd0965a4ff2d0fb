"""Order fields take every value their vendor writes, and sort as the source does (issue 69, item 7).

A sequence is text compared as text (`__sequence` in gold): each format turns its order fields
into fixed-width digits. Every value a vendor writes must be read, never quarantined: zero,
leading zeros, values wider than the width, and the "none" markers (DataWorks writes `-1` where
it has no sequence); a none marker falls back to the format's next order field. And the texts
must sort as the values do, which is what these tests compare: not only that a message passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from cdc_medallion.formats import get_format
from tests import dts_avro_builder as dts
from tests import exact_values_vendors as vendor
from tests.helpers import gold_rows, ingest, message

# Values of an order field: -1 is the none marker; ABSENT leaves the field out of the message.
ZERO, SMALL, LEADING_ZEROS, WIDE, NONE_MARKER = 0, 7, "007", 10**40, -1
ABSENT = object()


def _json_edit(text: str, edit: Callable[[dict[str, Any]], None]) -> str:
    document = json.loads(text)
    edit(document)
    return json.dumps(document)


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(document: dict[str, Any]) -> None:
        holder = document
        for key in path[:-1]:
            holder = holder[key]
        if value is ABSENT:
            holder.pop(path[-1], None)
        else:
            holder[path[-1]] = value

    return edit


def _debezium(source: dict[str, Any]) -> Callable[[Any], str]:
    """A Debezium change whose `source` block orders it by the field marked `...`, set to the
    value (and no `payload.ts_ms`, the last fallback, so that the field alone orders it)."""

    def write(value: Any) -> str:
        def edit(document: dict[str, Any]) -> None:
            fields = {k: (value if v is ... else v) for k, v in source.items() if not (v is ... and value is ABSENT)}
            document["payload"]["source"] = {"db": "db", "table": "t", **fields}
            del document["payload"]["ts_ms"]

        return _json_edit(vendor.debezium(0, {"type": "string"}, "x"), edit)

    return write


def _shareplex(field: str) -> Callable[[Any], str]:
    def write(value: Any) -> str:
        return _json_edit(vendor.shareplex(0, "x"), _set(("meta", field), value))

    return write


# (label, format, options, writer of a message with the order field set to a value (ABSENT: left
# out), how the vendor spells the field: a JSON number or digits as text)
ORDER_FIELDS: list[tuple[str, str, dict[str, Any], Callable[[Any], str | bytes], str]] = [
    ("debezium lsn", "debezium-json", {}, _debezium({"lsn": ...}), "number"),
    (
        "debezium binlog pos",
        "debezium-json",
        {},
        _debezium({"file": "binlog.000001", "pos": ..., "row": 0}),
        "number",
    ),
    ("debezium scn", "debezium-json", {}, _debezium({"scn": ...}), "text"),
    ("debezium ts_ms", "debezium-json", {}, _debezium({"ts_ms": ...}), "number"),
    (
        "canal es",
        "canal-json",
        {},
        lambda v: _json_edit(vendor.canal(0, "x", "varchar(9)"), _set(("es",), v)),
        "number",
    ),
    (
        "canal id",
        "canal-json",
        {},
        lambda v: _json_edit(vendor.canal(0, "x", "varchar(9)"), _set(("id",), v)),
        "number",
    ),
    (
        "maxwell ts",
        "maxwell-json",
        {},
        lambda v: _json_edit(vendor.maxwell(0, "x"), _set(("ts",), v)),
        "number",
    ),
    (
        "maxwell xid",
        "maxwell-json",
        {},
        lambda v: _json_edit(vendor.maxwell(0, "x"), _set(("xid",), v)),
        "number",
    ),
    ("shareplex scn", "shareplex-json", {}, _shareplex("scn"), "text"),
    ("shareplex seq", "shareplex-json", {}, _shareplex("seq"), "number"),
    ("ogg pos", "ogg-json", {}, lambda v: _json_edit(vendor.ogg(0, "x"), _set(("pos",), v)), "text"),
    (
        "dms transaction-record-id",
        "aws-dms-json",
        {"order_by": "timestamp"},
        lambda v: _json_edit(vendor.dms(0, "x"), _set(("metadata", "transaction-record-id"), v)),
        "number",
    ),
    (
        "dataworks sequenceId",
        "dataworks-json",
        {},
        lambda v: _json_edit(vendor.dataworks(0, "STRING", "x"), _set(("payload", "sequenceId"), v)),
        "text",
    ),
    (
        "dts sourcePosition",
        "dts-avro",
        {},
        lambda v: dts.encode(
            dts.record(
                "INSERT",
                "db.t",
                record_id=1,
                position="" if v is ABSENT else v,
                fields=[("v", 253)],
                after=[dts.character("x")],
            )
        ),
        "text",
    ),
]


def _spelled(value: Any, kind: str) -> Any:
    """A value as the field's vendor writes it: a JSON number, or its digits as text."""
    if kind == "text" or isinstance(value, str):
        return str(value)
    return value


def _order_key(fmt: str, options: dict[str, Any], raw: str | bytes, line: int) -> str:
    """The event's sequence up to the landing position (the last tie-breaker): its own order."""
    [event] = get_format(fmt)("order", options).parse_messages([message(raw, line=line)], [])
    assert event["kind"] == "change", event.get("error")
    return event["sequence"].split("|", 1)[0]  # (Canal's row index follows the position)


@pytest.mark.parametrize("label, fmt, options, write, kind", ORDER_FIELDS, ids=[f[0] for f in ORDER_FIELDS])
def test_every_order_value_the_vendor_writes_is_read_and_sorts_as_its_value(label, fmt, options, write, kind):
    """Zero, leading zeros and a value of 41 digits are read and sort as numbers (the wide one after
    every value of the field's width: a zero-padded text of more digits would sort by its first
    digits); the none marker -1 is read as the field absent, so the change sorts where the format
    puts one without the field (its next order field decides: DataWorks' is tested below)."""
    values = {"absent": ABSENT, "none": NONE_MARKER, "zero": ZERO, "small": SMALL, "leading": LEADING_ZEROS}
    values["wide"], values["widest fitting"] = WIDE, 10**29 - 1
    key = {
        name: _order_key(fmt, options, write(value if value is ABSENT else _spelled(value, kind)), line)
        for line, (name, value) in enumerate(values.items(), 1)
    }
    assert key["zero"] < key["small"] == key["leading"] < key["widest fitting"] < key["wide"], key
    assert key["none"] == key["absent"], key


# --- DataWorks: -1 where it has no sequence --------------------------------------------------------------
def _dataworks(op: str, sequence_id: Any, system_time: int | None, row: dict[str, Any], **more: Any) -> str:
    document = json.loads(vendor.dataworks(0, "STRING", "x"))
    payload = document["payload"]
    payload.update(op=op, sequenceId=sequence_id, **more)
    payload["timestamp"] = {"eventTime": -1, "checkpointTime": -1} | (
        {} if system_time is None else {"systemTime": system_time}
    )
    payload["after"] = {"dataColumn": row}
    document["schema"]["dataColumn"] = [{"name": "id", "type": "LONG"}, {"name": "v", "type": "STRING"}]
    document["schema"]["source"]["tableName"] = "t"
    return json.dumps(document)


def test_dataworks_change_without_a_sequence_is_applied_before_every_sequenced_one():
    """Issue 69: an insert with sequenceId "-1" (eventTime and checkpointTime -1 too, as DataWorks
    writes a row it has no sequence for) was quarantined as "present but not a whole number".
    It is a change; it sorts before every change with a sequence, those without one among
    themselves by `timestamp.systemTime`, then by landing position; null is read as -1 is."""
    parser = get_format("dataworks-json")("order")
    messages = [
        _dataworks("INSERT", "-1", 1620457896977, {"id": 1, "v": "read second"}),
        _dataworks("INSERT", "-1", 1620457896001, {"id": 2, "v": "read first"}),
        _dataworks("INSERT", -1, 1620457896500, {"id": 3, "v": "a number -1"}),
        _dataworks("INSERT", None, None, {"id": 4, "v": "null, no systemTime"}),
        _dataworks("UPDATE_AFTER", "1620457642589000000", 1620457890000, {"id": 1, "v": "sequenced"}),
    ]
    events = parser.parse_messages([message(m, line=i) for i, m in enumerate(messages, 1)], [])
    assert [e["kind"] for e in events] == ["change"] * 5, [e.get("error") for e in events]
    assert all(e["event_ts"] is None for e in events[:4])  # eventTime -1: unknown
    ordered = [e["after"]["v"] for e in sorted(events, key=lambda e: e["sequence"])]
    assert ordered == ["null, no systemTime", "read first", "a number -1", "read second", "sequenced"]


def test_dataworks_full_load_row_without_a_sequence_reaches_gold_and_a_later_change_wins(spark, storage, tmp_path):
    """End to end: the full load's row (sequenceId -1) is in gold, and the update that follows it,
    with a real sequence but read earlier by the node, is applied after it."""
    source = tmp_path / "dataworks.jsonl"
    lines = [
        _dataworks("INSERT", "-1", 1620457896977, {"id": 1, "v": "full load"}),
        _dataworks("INSERT", "-1", 1620457896977, {"id": 2, "v": "full load"}),
        _dataworks("UPDATE_AFTER", "1620457642589000001", 1620457800000, {"id": 2, "v": "updated"}),
    ]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ingest(spark, "dataworks-json", source, storage, keys={"t": "id"})
    assert sorted((r["id"], r["v"]) for r in gold_rows(spark, storage, "t")) == [(1, "full load"), (2, "updated")]
