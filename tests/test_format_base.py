"""The machinery every format shares: bronze rows handed to parsers, names checked on the way out."""

from __future__ import annotations

import datetime as dt
import typing

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_medallion.errors import ConfigError
from cdc_medallion.formats import format_names, get_format
from cdc_medallion.formats.base import FormatOptions, messages_of
from cdc_medallion.model import BRONZE_SCHEMA, KIND_ERROR
from cdc_medallion.parsing.execute import parse
from cdc_medallion.sources.files import BRONZE_ARROW
from tests.helpers import message

_TIMES = st.sampled_from([None, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 11, 22, 7, tzinfo=dt.UTC)])
_HEADER = st.fixed_dictionaries({"key": st.sampled_from(["a", "b"]), "value": st.binary(max_size=3)})
_ROW = st.fixed_dictionaries(
    {
        "value": st.one_of(st.none(), st.binary(max_size=8)),
        "key": st.one_of(st.none(), st.binary(max_size=4)),
        "topic": st.sampled_from([None, "db.inventory.orders", "t"]),
        "partition": st.sampled_from([None, 0, 3]),
        "offset": st.one_of(st.none(), st.integers(0, 2**40)),
        "timestamp": _TIMES,
        "headers": st.one_of(st.none(), st.lists(_HEADER, max_size=3)),
        "_source": st.just("s"),
        "_file": st.sampled_from([None, "in/a.jsonl", "in/b.jsonl"]),
        "_line": st.one_of(st.none(), st.integers(0, 10**6)),
        "_ingest_ts": _TIMES,
        "_landing_error": st.sampled_from([None, "not valid UTF-8"]),
    }
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_ROW, max_size=40))
def test_messages_carry_every_bronze_cell_whatever_repeats(rows):
    """Repeated and all-null columns take a shortcut into Python values: it must change nothing."""
    batch = pa.RecordBatch.from_pylist(rows, schema=BRONZE_ARROW)
    got = list(messages_of(batch))
    assert len(got) == len(rows)
    for m, row in zip(got, rows, strict=True):
        assert (m.value, m.key, m.topic, m.partition, m.offset) == (
            row["value"],
            row["key"],
            row["topic"],
            row["partition"],
            row["offset"],
        )
        assert (m.timestamp, m.ingest_ts) == (row["timestamp"], row["_ingest_ts"])
        assert m.headers == tuple((h["key"], h["value"]) for h in row["headers"] or ())
        assert (m.file, m.line, m.landing_error) == (row["_file"], row["_line"], row["_landing_error"])


def test_a_column_name_seen_safe_does_not_let_an_unusable_one_through():
    """Column names are remembered between messages; one with a control character must still
    quarantine its message (any other name is quoted wherever it reaches SQL)."""
    parser = get_format("maxwell-json")("test", None)
    safe = b'{"database":"d","table":"t","type":"insert","ts":1,"data":{"id":1,"name":"a"}}'
    unsafe = b'{"database":"d","table":"t","type":"insert","ts":1,"data":{"id":1,"name\\u0000":"a"}}'
    assert [e["kind"] for e in parser.events_for(message(safe))] == ["change"]
    [event] = parser.events_for(message(unsafe))
    assert event["kind"] == KIND_ERROR
    assert event["error"].startswith("after.name\x00: unusable column name")
    assert [e["kind"] for e in parser.events_for(message(safe, line=2))] == ["change"]


def test_a_one_file_batch_is_parsed_on_every_core(spark, tmp_path):
    """A landed batch is one file Spark reads as one partition; the parse must not stay on one core."""
    rows = [{**dict.fromkeys(BRONZE_SCHEMA.fieldNames()), "value": b'{"type":"insert"}', "_line": i} for i in range(50)]
    spark.createDataFrame(rows, BRONZE_SCHEMA).coalesce(1).write.parquet(str(tmp_path / "bronze"))
    bronze = spark.read.parquet(str(tmp_path / "bronze"))
    assert bronze.rdd.getNumPartitions() == 1
    cores = spark.sparkContext.defaultParallelism
    events = parse(get_format("maxwell-json")("test", None), bronze)
    assert events.rdd.getNumPartitions() == cores > 1
    assert events.count() == 50  # spread, not lost or doubled


@pytest.mark.parametrize("fmt", format_names())
def test_every_format_declares_typed_options(fmt):
    """Each format's options are a model: an unknown key names the known ones, a boolean is a
    boolean (a typo is an error, never false), a choice is one of its values."""
    cls = get_format(fmt)
    assert issubclass(cls.options, FormatOptions)
    assert isinstance(cls("s", None).settings, cls.options)
    keys = sorted(field.alias or name for name, field in cls.options.model_fields.items())
    with pytest.raises(ConfigError) as error:
        cls("s", {"no_such_option": 1})
    assert f"key 'options.no_such_option': unknown key (known: {', '.join(keys) or 'none'})" in str(error.value)
    for name, field in cls.options.model_fields.items():
        key = field.alias or name
        if field.annotation is bool:
            assert getattr(cls("s", {key: "false"}).settings, name) is False  # text, as from --option
            assert getattr(cls("s", {key: True}).settings, name) is True
            for typo in ("flase", "yes please", 2):
                with pytest.raises(ConfigError, match=rf"key 'options\.{key}': must be true or false"):
                    cls("s", {key: typo})
        if typing.get_origin(field.annotation) is typing.Literal:
            choices = typing.get_args(field.annotation)
            assert getattr(cls("s", {key: choices[-1]}).settings, name) == choices[-1]
            with pytest.raises(ConfigError, match=rf"key 'options\.{key}': must be one of {', '.join(choices)}, got"):
                cls("s", {key: "nope"})


def test_arrow_counts_follow_each_message_when_an_event_does_not_fit():
    """The native parse's Python half places each message's events by these counts: a message whose
    event does not fit the schema becomes its one error row, and the counts say so."""
    parser = get_format("debezium-json")("t")
    fits = [{"kind": "change", "sequence": "1"}, {"kind": "change", "sequence": "2"}]
    too_big = [{"kind": "change", "sequence": "3"}, {"kind": "change", "tx_seq": 2**70}]  # two events, one row
    messages = [message("{}", line=1), message("{}", line=2), message("{}", line=3)]
    batch, counts = parser.to_arrow_counted([fits, too_big, []], messages)
    rows = batch.to_pylist()
    assert counts == [2, 1, 0]
    assert [r["kind"] for r in rows] == ["change", "change", KIND_ERROR]
    assert "invalid event" in rows[2]["error"] and rows[2]["bronze_ref"] == "test.jsonl:2"
