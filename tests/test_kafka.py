"""Bronze from a real Kafka broker, every format: the same messages, the same outcomes, true gold.

One history (cdc_medallion/generator) is rendered by each of the ten formats. A first update
reads the renderings from files, bronze and silver only; its bronze rows are produced into a
real broker (keys, headers, three partitions per topic, DTS Avro as binary values), and a whole
run reads them through Spark's Kafka source. Gold must equal the history's ground truth, SCD1
and SCD2, for every format; every message must have the outcome it had from its file; bronze
must hold each produced record once, with its Kafka coordinates. Two bad records ride along in
the Kafka run (bytes that are no message of their format, an empty value) and a tombstone: each
lands once, in quarantine (or, the tombstone, as a counted `tombstone` event) with its topic,
partition and offset, and changes nothing in gold.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cdc_medallion.config import PipelineConf
from cdc_medallion.generator.compare import diff_scd1, diff_scd2
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import RENDERERS, render
from cdc_medallion.names import bronze_name, silver_name
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.sources.kafka_settings import KafkaSettings
from tests.helpers import gold_of, land_and_parse, read_rows, rendered_pipeline, source_of
from tests.kafka_feed import ORIGIN_HEADER, has, path_of, produce, records, ref_of, rows

pytestmark = pytest.mark.xdist_group("kafka")

PARTITIONS = 3
# Messages a bronze micro-batch reads at most: each source's backlog takes several batches.
PER_TRIGGER = 16
# One table: a run's cost follows its tables, and the formats' own tests cover many.
HISTORY = generate_history(tables=1, transactions=10, seed=42)


def file_conf(work: Path) -> PipelineConf:
    """Each format's rendering of the history, a source each, read from files."""
    rendered = [render(HISTORY, fmt, work / "rendered" / fmt) for fmt in sorted(RENDERERS)]
    return rendered_pipeline(rendered, work / "files")


def kafka_conf(conf: PipelineConf, storage: Path, bootstrap_servers: str, topics: dict[str, list[str]]) -> PipelineConf:
    """The same sources and tables, each source reading its topics from the broker."""
    sources = tuple(
        s.model_copy(
            update={
                "input": None,
                "topic": None,
                "kafka": KafkaSettings(
                    bootstrap_servers=bootstrap_servers,
                    subscribe=",".join(topics[s.name]),
                    max_offsets_per_trigger=PER_TRIGGER,
                ),
            }
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
FAULT_SOURCES = (source_of("dts-avro"), source_of("canal-json"))


@pytest.fixture(scope="module")
def runs(spark, kafka_broker, tmp_path_factory) -> dict[str, Any]:
    """The files' bronze and silver, the records produced from its bronze, and the Kafka run."""
    work = tmp_path_factory.mktemp("kafka")
    files = file_conf(work)
    # Bronze and silver only (a run's first update): gold from files is the conformance test's.
    land_and_parse(files, spark)
    produced = {s.name: records(files.storage, s, PARTITIONS, topic_prefix=s.name) for s in files.sources}
    topics = {name: sorted({r["topic"] for r in records_}) for name, records_ in produced.items()}
    fault_topics = {source: topics[source][0] for source in FAULT_SOURCES}
    faults = [record for topic in fault_topics.values() for record in bad_records(topic, FAULT_PARTITION)]
    # The bad records follow the history's in their partition.
    every = [r for records_ in produced.values() for r in records_] + faults
    produce(spark, every, kafka_broker.bootstrap_servers, PARTITIONS)
    kafka = kafka_conf(files, work / "kafka", kafka_broker.bootstrap_servers, topics)
    run_pipeline(kafka, spark=spark)
    return {"files": files, "kafka": kafka, "produced": produced, "faults": faults, "fault_topics": fault_topics}


def test_gold_from_kafka_is_the_ground_truth_in_every_format(spark, runs):
    storage = runs["kafka"].storage
    assert len({s.format for s in runs["kafka"].sources}) == 10
    problems = []
    for source in runs["kafka"].sources:
        for table in (t.name for t in HISTORY.tables):
            gold = gold_of(source.format, table)
            scd1 = diff_scd1(HISTORY, table, read_rows(spark, storage, f"gold_{gold}"))
            scd2 = diff_scd2(HISTORY, table, read_rows(spark, storage, f"gold_{gold}_history"))
            problems += [f"{source.format}: {p}" for p in scd1 + scd2]
    assert not problems, "\n".join(problems)


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
    dts = [r[3] for r in landed if r[0] == runs["fault_topics"]["dts_avro"] and r[3]]
    assert any(not _is_utf8(v) for v in dts), "DTS Avro values are binary"
    # Keyless messages keep a table to one partition; Debezium's and Maxwell's keys spread rows.
    assert sum(1 for count in spread.values() if count >= 2) >= 2, f"several partitions per topic: {sorted(partitions)}"
    for (topic, partition), held in partitions.items():
        held.sort(key=lambda row: row["offset"])
        assert [row["offset"] for row in held] == list(range(len(held))), (topic, partition)
        origins = [o for o in map(_origin, held) if o is not None]
        assert origins == sorted(origins), f"{topic}/{partition} keeps the file's order"


def _rows_per_commit(table: Path) -> list[int]:
    """Rows each commit of a Delta table added (a micro-batch of bronze is one commit)."""
    added = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text(encoding="utf-8").splitlines() if line]
        rows = sum(json.loads(a["add"]["stats"])["numRecords"] for a in actions if "add" in a)
        if rows:
            added.append(rows)
    return added


def test_the_backlog_lands_in_bounded_batches(runs):
    """`max_offsets_per_trigger` holds under a run's availableNow trigger: each topic's backlog
    lands in several micro-batches of at most the bound (Spark shares it out over the partitions
    by backlog and gives each partition with one at least one message, so a batch may exceed it
    by one per partition), and every record once (test_bronze_holds_each_produced_record_once...)."""
    storage = runs["kafka"].storage
    batches = {}
    for source in runs["kafka"].sources:
        sizes = _rows_per_commit(Path(path_of(storage, bronze_name(source.name))))
        topics = {r["topic"] for r in runs["produced"][source.name]}
        produced = len(runs["produced"][source.name]) + sum(1 for f in runs["faults"] if f["topic"] in topics)
        assert sum(sizes) == produced, (source.name, sizes)
        assert max(sizes) <= PER_TRIGGER + PARTITIONS * len(topics), (source.name, sizes)
        batches[source.name] = sizes
    several = [name for name, sizes in batches.items() if len(sizes) >= 3]
    assert len(several) >= len(batches) // 2, f"the bound made few batches: {batches}"


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
        if source.name in FAULT_SOURCES:
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
    for source, topic in runs["fault_topics"].items():
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
