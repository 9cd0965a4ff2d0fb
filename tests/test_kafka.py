"""Bronze from a real Kafka broker, every format: the same messages, the same tables.

One pipeline run reads the ten formats' messages from files (the embedded samples of `make run`,
and for Maxwell, OGG and AWS DMS, which have none, a small generated history); their bronze rows
are produced into a real broker (keys, headers, three partitions per topic, DTS Avro as binary
values), and one more run reads them through Spark's Kafka source. Gold must be the same table
for table, row for row; silver must account for the same messages; bronze must hold each
produced record once, with its Kafka coordinates. Two bad records ride along in the Kafka run
(bytes that are no message of their format, an empty value) and a tombstone: each lands once,
in quarantine (or, the tombstone, as a counted `tombstone` event) with its topic, partition and
offset, and changes nothing in gold.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion.catalog import dataset_status, read_dataset
from cdc_medallion.config import InputConf, PipelineConf, SourceConf, TableConf, load_conf
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import render
from cdc_medallion.layers import bronze_name, silver_name
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.accounting import account_source
from tests.conftest import REPO
from tests.kafka_feed import HEADERS, ORIGIN_HEADER, produce, records, topic_of

pytestmark = pytest.mark.xdist_group("kafka")

PARTITIONS = 3
GENERATED = ("maxwell-json", "ogg-json", "aws-dms-json")  # the formats without an embedded sample
SEQUENCES = ("__sequence", "__START_AT", "__END_AT")
# The landing position inside a sequence (BronzeMessage.position): a file and its line number, or a
# topic, partition and offset; each sequence part is cut by "|".
POSITION = r"\|[^|]*/(\d{12}|\d{6}/\d{20})(?=\||$)"


def file_conf(work: Path) -> PipelineConf:
    """conf/local.yml's seven samples plus the three generated sources, read from files."""
    base = load_conf(REPO / "conf" / "local.yml")
    sources = [
        s if s.input.layout == "kafka-dump" else dataclasses.replace(s, topic=topic_of(s.name)) for s in base.sources
    ]
    tables = list(base.tables)
    history = generate_history(tables=2, transactions=10, seed=42)
    for fmt in GENERATED:
        name = fmt.replace("-", "_")
        rendered = render(history, fmt, work / "generated" / fmt)
        assert rendered.layout == "kafka-dump"
        # The renderers name every topic `gen.<db>.<table>`: one source's topics each here.
        text = rendered.path.read_text(encoding="utf-8")
        rendered.path.write_text(text.replace('"topic":"gen.', f'"topic":"{name}.'), encoding="utf-8")
        sources.append(SourceConf(name, fmt, InputConf(rendered.path, "kafka-dump"), options=rendered.options))
        tables += [
            TableConf(source=name, table=t, keys=k, columns=rendered.columns.get(t, {}), name=f"{name}_{t}")
            for t, k in rendered.keys.items()
        ]
    return dataclasses.replace(base, storage=work / "files", sources=tuple(sources), tables=tuple(tables))


def kafka_conf(conf: PipelineConf, storage: Path, bootstrap_servers: str, topics: dict[str, list[str]]) -> PipelineConf:
    """The same sources and tables, each source reading its topics from the broker."""
    sources = tuple(
        dataclasses.replace(
            s,
            input=None,
            topic=None,
            kafka={"bootstrap_servers": bootstrap_servers, "subscribe": ",".join(topics[s.name])},
        )
        for s in conf.sources
    )
    return dataclasses.replace(conf, storage=storage, sources=sources)


def bad_records(spark, topic: str, partition: int) -> DataFrame:
    """Two records no format reads and a tombstone, with a key like their topic's others."""
    rows = [(b"not a message \xff\xfe", "garbage"), (b"", "empty"), (None, "tombstone")]
    return spark.createDataFrame(
        [
            {
                "key": b"fault",
                "value": value,
                "topic": topic,
                "partition": partition,
                "headers": [{"key": "fault", "value": what.encode()}],
            }
            for value, what in rows
        ],
        f"key binary, value binary, topic string, partition int, headers {HEADERS}",
    )


FAULT_PARTITION = 1
# The bad records go to the DTS Avro topic (binary values) and a Canal one (JSON text).
FAULT_TOPICS = {"dts_warehouse": "dts_warehouse", "canal_crm": topic_of("canal_crm")}


@pytest.fixture(scope="module")
def runs(spark, kafka_broker, tmp_path_factory) -> dict[str, Any]:
    """The file-layout run, the records produced from its bronze, and the Kafka run."""
    work = tmp_path_factory.mktemp("kafka")
    files = file_conf(work)
    run_pipeline(files, spark=spark)
    produced = None
    for source in files.sources:
        rows = records(spark, files.storage, source, PARTITIONS)
        produced = rows if produced is None else produced.unionByName(rows)
    assert produced is not None
    produced = produced.localCheckpoint()
    produce(produced, kafka_broker.bootstrap_servers)
    faults = None
    for topic in FAULT_TOPICS.values():
        rows = bad_records(spark, topic, FAULT_PARTITION)
        faults = rows if faults is None else faults.unionByName(rows)
    assert faults is not None
    faults.write.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers).save()
    topics: dict[str, list[str]] = {}
    for row in produced.select("_source", "topic").distinct().collect():
        topics.setdefault(row._source, []).append(row.topic)
    kafka = kafka_conf(files, work / "kafka", kafka_broker.bootstrap_servers, topics)
    run_pipeline(kafka, spark=spark)
    return {"files": files, "kafka": kafka, "produced": produced.collect(), "faults": faults.collect()}


def _normalized(df: DataFrame) -> list[tuple]:
    """A gold table's rows, sorted, with the landing position in each sequence (its tie-breaker:
    a file and line in one run, a topic, partition and offset in the other) masked."""
    for name in SEQUENCES:
        if name in df.columns:
            df = df.withColumn(name, F.regexp_replace(name, POSITION, "|<position>"))
    rows = [tuple(r) for r in df.collect()]
    return sorted(rows, key=repr)


def test_gold_from_kafka_equals_gold_from_files(spark, runs):
    files, kafka = runs["files"].storage, runs["kafka"].storage
    gold = sorted(d["name"] for d in dataset_status(files) if d["layer"] == "gold")
    assert sorted(d["name"] for d in dataset_status(kafka) if d["layer"] == "gold") == gold
    assert len(gold) >= 20  # every source has gold: two tables or more each
    formats = {s.name: s.format for s in runs["files"].sources}
    assert len(set(formats.values())) == 10
    for name in gold:
        expected = read_dataset(spark, files, name)
        actual = read_dataset(spark, kafka, name)
        assert actual.schema == expected.schema, name
        assert _normalized(actual) == _normalized(expected), name


def _bronze(spark, storage: Path, source: str) -> DataFrame:
    return read_dataset(spark, storage, bronze_name(source))


def _record(row) -> tuple:
    """A Kafka record as compared: topic, partition, key, value and headers."""
    headers = tuple((h["key"], bytes(h["value"])) for h in row["headers"] or ())
    key = None if row["key"] is None else bytes(row["key"])
    value = None if row["value"] is None else bytes(row["value"])
    return (row["topic"], row["partition"], key, value, headers)


def test_bronze_holds_each_produced_record_once_in_partition_order(spark, runs):
    """Every record, with its key, value bytes (DTS Avro's binary ones too) and headers, lands
    once; offsets run without a gap; each partition keeps the file's order."""
    produced = [_record(r) for r in runs["produced"]] + [_record(r) for r in runs["faults"]]
    landed = []
    positions: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for source in runs["kafka"].sources:
        for row in _bronze(spark, runs["kafka"].storage, source.name).collect():
            landed.append(_record(row))
            assert row["_file"] is None and row["_landing_error"] is None
            positions.setdefault((row["topic"], row["partition"]), []).append((row["offset"], row))
    assert sorted(landed, key=repr) == sorted(produced, key=repr)
    used = {topic for topic, partition in positions if partition > 0}
    assert len(used) >= 5, f"several partitions hold messages: {sorted(positions)}"
    dts = [r[3] for r in landed if r[0] == "dts_warehouse" and r[3]]
    assert any(not _is_utf8(v) for v in dts), "DTS Avro values are binary"
    for (topic, partition), rows in positions.items():
        offsets = sorted(offset for offset, _ in rows)
        assert offsets == list(range(len(offsets))), (topic, partition)
        origins = [_origin(row) for _, row in sorted(rows, key=lambda item: item[0])]
        origins = [o for o in origins if o is not None]
        assert origins == sorted(origins), f"{topic}/{partition} keeps the file's order"


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _origin(row) -> tuple[str, int] | None:
    """Where a landed record came from in the file run: (file or topic, line or offset)."""
    for header in row["headers"] or ():
        if header["key"] == ORIGIN_HEADER:
            ref = bytes(header["value"]).decode()
            where, _, number = ref.rpartition(":" if ":" in ref else "/")
            return where, int(number)
    return None


def test_every_message_has_the_same_outcome_as_from_files(spark, runs):
    """Per source, as many messages became changes, schema changes, heartbeats, tombstones,
    quarantined ... from Kafka as from files; the bad records add exactly their own outcomes."""
    for source in runs["files"].sources:
        outcomes = {}
        for run in ("files", "kafka"):
            storage = runs[run].storage
            names = {d["name"] for d in dataset_status(storage)}
            quarantine = f"{silver_name(source.name)}_quarantine"
            accounting = account_source(
                source.name,
                _bronze(spark, storage, source.name),
                read_dataset(spark, storage, silver_name(source.name)),
                read_dataset(spark, storage, quarantine) if quarantine in names else None,
            )
            assert accounting.balanced, (run, source.name, accounting.equation())
            outcomes[run] = dict(accounting.outcomes)
        if source.name in FAULT_TOPICS:
            outcomes["files"]["quarantined"] = outcomes["files"].get("quarantined", 0) + 2
            outcomes["files"]["tombstone"] = outcomes["files"].get("tombstone", 0) + 1
        assert {k: v for k, v in outcomes["kafka"].items() if v} == {k: v for k, v in outcomes["files"].items() if v}, (
            source.name
        )


def test_bad_records_are_quarantined_with_their_topic_partition_and_offset(spark, runs):
    """Bytes that are no message of the format and an empty value land in quarantine, once each,
    naming topic/partition/offset; a null value is a tombstone (counted in silver, as every
    format treats it), never a change."""
    storage = runs["kafka"].storage
    for source, topic in FAULT_TOPICS.items():
        refs = {}
        for row in _bronze(spark, storage, source).collect():
            fault = next((bytes(h["value"]).decode() for h in row["headers"] or () if h["key"] == "fault"), None)
            if fault is not None:
                assert (row["topic"], row["partition"]) == (topic, FAULT_PARTITION)
                refs[fault] = f"{topic}/{FAULT_PARTITION}/{row['offset']}"
        assert sorted(refs) == ["empty", "garbage", "tombstone"]
        quarantine = read_dataset(spark, storage, f"{silver_name(source)}_quarantine")
        held = quarantine.where(F.col("bronze_ref").isin(list(refs.values()))).collect()
        assert sorted(r["bronze_ref"] for r in held) == sorted([refs["garbage"], refs["empty"]]), source
        assert all(r["error"] for r in held)
        silver = read_dataset(spark, storage, silver_name(source))
        events = silver.where(F.col("bronze_ref").isin(list(refs.values()))).collect()
        assert [(r["bronze_ref"], r["kind"]) for r in events] == [(refs["tombstone"], "tombstone")], source
