"""Kafka-dump lines land as `unpack_line` defines, whichever way a block is read: Arrow's JSON
reader for plain records, Python for every line it cannot take exactly."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_medallion.config import InputConf, SourceConf
from cdc_medallion.lines import Lines
from cdc_medallion.sources.files import FileLanding
from cdc_medallion.sources.kafka_dump import KAFKA_COLUMNS, _plain_records, unpack_block, unpack_line

TOPIC = "default.topic"
MISSING = object()

texts = st.text(st.characters(codec=None, exclude_categories=["Cn"]), max_size=12) | st.sampled_from(
    ['"value":null', '\\"value\\":null', "\u2028", "\\", '"', "{", "\n"]
)


def nullable(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.just(MISSING) | st.none() | values


# Plain records: the six fields Arrow reads, of their JSON types (values out of a column's range
# included); most of a real dump.
PLAIN_FIELDS = {
    "topic": nullable(texts),
    "partition": nullable(st.integers(-(2**33), 2**33)),
    "offset": nullable(st.integers(0, 2**63 - 1)),
    "timestamp": nullable(st.integers(-(10**13), 3 * 10**14) | st.just(1_700_000_000_123)),
    "key": nullable(texts),
    "value": nullable(texts),
}
# Any record: other types and the fields Arrow is not given.
ANY_FIELDS = {
    "topic": nullable(texts),
    "partition": nullable(st.integers(-(2**33), 2**33) | st.sampled_from(["3", 1.0, True])),
    "offset": nullable(st.integers(0, 2**64) | st.just(2.5)),
    "timestamp": nullable(st.integers(-(10**13), 3 * 10**14) | st.sampled_from(["1700000000123", 1.7e12])),
    "key": nullable(texts | st.just({"id": 1})),
    "value": nullable(texts | st.just({"op": "c"})),
    "value_base64": nullable(st.sampled_from(["eyJhIjoxfQ==", "not base64"])),
    "headers": nullable(st.sampled_from([{"h": "v"}, [{"key": "h", "value": 1}], [1], "x"])),
}
NOT_RECORDS = [b"", b"   ", b"not json", b'{"value":"a"} {"value":"b"}', b'{"value":"\xff"}', b"[1]"]


@st.composite
def dump_lines(draw, plain: bool) -> bytes:
    if not plain and draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(NOT_RECORDS))
    record = {name: draw(strategy) for name, strategy in (PLAIN_FIELDS if plain else ANY_FIELDS).items()}
    record = {name: value for name, value in record.items() if value is not MISSING}
    spaced = draw(st.booleans())
    text = json.dumps(record, ensure_ascii=draw(st.booleans()), separators=(", ", ": ") if spaced else (",", ":"))
    return text.encode("utf-8", errors="surrogatepass")


def reference(lines: list[bytes], topic: str | None = TOPIC) -> pa.Table:
    return pa.Table.from_pylist([unpack_line(raw, topic) for raw in lines], schema=KAFKA_COLUMNS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans().flatmap(lambda plain: st.lists(dump_lines(plain), min_size=1, max_size=12)))
def test_a_block_lands_as_its_lines_do_one_by_one(lines):
    block = b"\n".join(lines) + b"\n"
    assert unpack_block(block, Lines.of(block), TOPIC).equals(reference(lines))


def plain(n: int, **extra) -> list[bytes]:
    return [
        json.dumps(
            {"topic": "t", "partition": 0, "offset": i, "timestamp": 1_700_000_000_000 + i, "value": f"m{i}"} | extra
        )
        .replace(" ", "")
        .encode()
        for i in range(n)
    ]


def test_plain_records_are_read_by_arrow_and_anything_else_is_not():
    block = b"\n".join(plain(3))
    assert _plain_records(block, Lines.of(block)).num_rows == 3
    for odd in (b"", b'{"value":"a","extra":1}', b'{"value":"a"} {"value":"b"}', b'{"value":"a","offset":"7"}'):
        mixed = odd + b"\n" + block
        assert _plain_records(mixed, Lines.of(mixed)) is None, odd


def test_what_a_null_or_a_missing_field_means():
    lines = [
        b'{"topic":"t","offset":1,"value":null}',  # a tombstone
        b'{"topic":"t","offset":2,"value": null}',  # a tombstone spelled otherwise
        b'{"topic":"t","offset":3,"key":"k"}',  # no value at all: not a Kafka record
        b'{"offset":4,"value":"v"}',  # no topic: the source's
        b'{"topic":null,"offset":5,"value":"v"}',  # a null topic stays null
        b'{"topic":"t","partition":3000000000,"value":"v"}',  # does not fit the partition column
        b'{"topic":"t","timestamp":1700000000123,"value":"v"}',
    ]
    block = b"\n".join(lines)
    rows = unpack_block(block, Lines.of(block), TOPIC).to_pylist()
    assert [(r["value"], r["_landing_error"] is None) for r in rows[:2]] == [(None, True), (None, True)]
    assert rows[2]["value"] == lines[2] and "no 'value' or 'value_base64'" in rows[2]["_landing_error"]
    assert (rows[3]["topic"], rows[4]["topic"]) == (TOPIC, None)
    assert rows[5]["partition"] is None and "partition 3000000000 is out of range" in rows[5]["_landing_error"]
    assert rows[6]["timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)


def test_a_dump_file_lands_every_line_once_in_order(tmp_path):
    lines = [*plain(5), b"not json", *plain(2, value=None), b'{"value":"\xff"}', *plain(3)]
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(b"\n".join(lines))  # the last line has no newline: still a message
    source = SourceConf(name="s", format="debezium-json", input=InputConf(path=dump, layout="kafka-dump"))
    offset = None
    landed = []
    while (batch := FileLanding(source, max_messages=4).next_batch(offset)).messages:
        landed.extend(batch.to_arrow().to_pylist())
        offset = batch.offset  # where the stream's checkpoint says the next batch starts

    assert [row["_line"] for row in landed] == list(range(len(lines)))
    expected = reference(lines, source.topic).to_pylist()
    assert [{name: row[name] for name in KAFKA_COLUMNS.names} for row in landed] == expected
    assert [row["_landing_error"] is not None for row in landed] == [False] * 5 + [True] + [False] * 2 + [True] + [
        False
    ] * 3
