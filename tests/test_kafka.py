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
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_medallion.config import InputConf, PipelineConf, SourceConf, TableConf, load_conf
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import render
from cdc_medallion.layers import bronze_name, silver_name
from cdc_medallion.pipeline import run_pipeline
from tests.conftest import REPO
from tests.kafka_feed import ORIGIN_HEADER, has, path_of, produce, records, ref_of, rows, status, topic_of

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
    history = generate_history(tables=1, transactions=10, seed=42)  # one table: every run costs per table
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


def bad_records(topic: str, partition: int) -> list[dict[str, Any]]:
    """Two records no format reads and a tombstone, with a key like their topic's others."""
    kinds = [(b"not a message \xff\xfe", "garbage"), (b"", "empty"), (None, "tombstone")]
    return [
        {
            "key": b"fault",
            "value": value,
            "topic": topic,
            "partition": partition,
            "headers": [{"key": "fault", "value": what.encode()}],
        }
        for value, what in kinds
    ]


FAULT_PARTITION = 1
# The bad records go to the DTS Avro topic (binary values) and a Canal one (JSON text).
FAULT_TOPICS = {"dts_warehouse": "dts_warehouse", "canal_crm": topic_of("canal_crm")}


@pytest.fixture(scope="module")
def runs(spark, kafka_broker, tmp_path_factory) -> dict[str, Any]:
    """The file-layout run, the records produced from its bronze, and the Kafka run."""
    work = tmp_path_factory.mktemp("kafka")
    files = file_conf(work)
    run_pipeline(files, spark=spark)
    produced = {source.name: records(files.storage, source, PARTITIONS) for source in files.sources}
    faults = [record for topic in FAULT_TOPICS.values() for record in bad_records(topic, FAULT_PARTITION)]
    # The bad records follow the sample's in their partition.
    produce(spark, [r for records_ in produced.values() for r in records_] + faults, kafka_broker.bootstrap_servers)
    topics = {name: sorted({r["topic"] for r in records_}) for name, records_ in produced.items()}
    kafka = kafka_conf(files, work / "kafka", kafka_broker.bootstrap_servers, topics)
    run_pipeline(kafka, spark=spark)
    return {"files": files, "kafka": kafka, "produced": produced, "faults": faults}


def _normalized(table: list[dict[str, Any]]) -> list[tuple]:
    """A gold table's rows, sorted, with the landing position in each sequence (its tie-breaker:
    a file and line in one run, a topic, partition and offset in the other) masked."""
    masked = []
    for row in table:
        for name in SEQUENCES:
            if row.get(name) is not None:
                row[name] = re.sub(POSITION, "|<position>", row[name])
        masked.append(tuple(row.items()))
    return sorted(masked, key=repr)


def _gold(storage: Path) -> list[str]:
    return sorted(d["name"] for d in status(storage) if d["layer"] == "gold")


def test_gold_from_kafka_equals_gold_from_files(runs):
    files, kafka = runs["files"].storage, runs["kafka"].storage
    gold = _gold(files)
    assert _gold(kafka) == gold
    assert len(gold) >= 2 * len(runs["files"].sources)  # a table or more per source, SCD1 and SCD2 each
    assert len({s.format for s in runs["files"].sources}) == 10
    for name in gold:
        assert _schema(kafka, name) == _schema(files, name), name
        assert _normalized(rows(kafka, name)) == _normalized(rows(files, name)), name


def _schema(storage: Path, name: str) -> list[tuple[str, str]]:
    """Column names and types (a mapped column's physical name differs from run to run)."""
    return [(f.name, str(f.type)) for f in DeltaTable(path_of(storage, name)).schema().fields]


def _record(row: dict[str, Any]) -> tuple:
    """A Kafka record as compared: topic, partition, key, value and headers."""
    headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
    return (row["topic"], row["partition"], row["key"], row["value"], headers)


def test_bronze_holds_each_produced_record_once_in_partition_order(runs):
    """Every record, with its key, value bytes (DTS Avro's binary ones too) and headers, lands
    once; offsets run without a gap; each partition keeps the file's order."""
    storage = runs["kafka"].storage
    produced = [_record(r) for records_ in runs["produced"].values() for r in records_]
    produced += [_record(r) for r in runs["faults"]]
    landed = []
    partitions: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for source in runs["kafka"].sources:
        for row in rows(storage, bronze_name(source.name)):
            landed.append(_record(row))
            assert row["_file"] is None and row["_landing_error"] is None
            partitions.setdefault((row["topic"], row["partition"]), []).append(row)
    assert sorted(landed, key=repr) == sorted(produced, key=repr)
    spread = Counter(topic for topic, _ in partitions)
    assert sum(1 for count in spread.values() if count >= 2) >= 5, f"several partitions per topic: {sorted(partitions)}"
    dts = [r[3] for r in landed if r[0] == "dts_warehouse" and r[3]]
    assert any(not _is_utf8(v) for v in dts), "DTS Avro values are binary"
    for (topic, partition), held in partitions.items():
        held.sort(key=lambda row: row["offset"])
        assert [row["offset"] for row in held] == list(range(len(held))), (topic, partition)
        origins = [o for o in map(_origin, held) if o is not None]
        assert origins == sorted(origins), f"{topic}/{partition} keeps the file's order"


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _origin(row: dict[str, Any]) -> tuple[str, int] | None:
    """Where a landed record came from in the file run: (file or topic, line or offset)."""
    ref = _origin_ref(row)
    if ref is None:
        return None
    where, _, number = ref.rpartition(":" if ":" in ref else "/")
    return where, int(number)


def _outcomes(storage: Path, source: str) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """Per bronze reference, the kinds of the events it became (`quarantined` for a quarantine
    row, `part of <kind>` where it took part in another message's event); and bronze's refs."""
    outcomes: dict[str, list[str]] = {}
    columns = ["kind", "bronze_ref", "related_refs"]
    for dataset, quarantined in ((silver_name(source), False), (f"{silver_name(source)}_quarantine", True)):
        if not has(storage, dataset):
            continue
        for event in rows(storage, dataset, columns):
            kind = "quarantined" if quarantined else event["kind"]
            outcomes.setdefault(event["bronze_ref"], []).append(kind)
            for ref in event["related_refs"] or ():
                outcomes.setdefault(ref, []).append(f"part of {kind}")
    cols = ["topic", "partition", "offset", "_file", "_line"]
    bronze = {ref_of(row) for row in rows(storage, bronze_name(source), cols)}
    return {ref: tuple(sorted(kinds)) for ref, kinds in outcomes.items()}, bronze


def test_every_message_has_the_same_outcome_as_from_files(runs):
    """Each message became the same events from Kafka as from its file (a change, a schema
    change, a heartbeat, a tombstone, a quarantined row, part of a transaction ...): the Kafka
    record is matched to its file line by its origin header. Every bronze message has an
    outcome, and no event names a message bronze does not hold."""
    for source in runs["files"].sources:
        expected, bronze = _outcomes(runs["files"].storage, source.name)
        assert set(expected) == bronze, (source.name, sorted(set(expected) ^ bronze)[:5])
        found, bronze = _outcomes(runs["kafka"].storage, source.name)
        assert set(found) == bronze, (source.name, sorted(set(found) ^ bronze)[:5])
        origins = {ref_of(row): _origin_ref(row) for row in rows(runs["kafka"].storage, bronze_name(source.name))}
        by_origin = {origins[ref]: kinds for ref, kinds in found.items() if origins[ref] is not None}
        assert by_origin == expected, source.name
        faults = sorted(kinds for ref, kinds in found.items() if origins[ref] is None)
        if source.name in FAULT_TOPICS:
            assert faults == [("quarantined",), ("quarantined",), ("tombstone",)], source.name
        else:
            assert faults == [], source.name


def _origin_ref(row: dict[str, Any]) -> str | None:
    return next((h["value"].decode() for h in row["headers"] or () if h["key"] == ORIGIN_HEADER), None)


def test_bad_records_are_quarantined_with_their_topic_partition_and_offset(runs):
    """Bytes that are no message of the format and an empty value land in quarantine, once each,
    naming topic/partition/offset; a null value is a tombstone (counted in silver, as every
    format treats it), never a change."""
    storage = runs["kafka"].storage
    for source, topic in FAULT_TOPICS.items():
        refs = {}
        for row in rows(storage, bronze_name(source)):
            fault = next((h["value"].decode() for h in row["headers"] or () if h["key"] == "fault"), None)
            if fault is not None:
                assert (row["topic"], row["partition"]) == (topic, FAULT_PARTITION)
                refs[fault] = f"{topic}/{FAULT_PARTITION}/{row['offset']}"
        assert sorted(refs) == ["empty", "garbage", "tombstone"]
        quarantine = [r for r in rows(storage, f"{silver_name(source)}_quarantine") if r["bronze_ref"] in refs.values()]
        assert sorted(r["bronze_ref"] for r in quarantine) == sorted([refs["garbage"], refs["empty"]]), source
        assert all(r["error"] for r in quarantine)
        events = [r for r in rows(storage, silver_name(source)) if r["bronze_ref"] in refs.values()]
        assert [(r["bronze_ref"], r["kind"]) for r in events] == [(refs["tombstone"], "tombstone")], source
