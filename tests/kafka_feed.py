"""Feeding a real broker the messages a file-layout run landed, the way CDC tools produce them.

The bronze table of a file-layout run holds each message byte-exact, in file order; what goes to
Kafka is exactly those bytes, so the two runs read the same messages. As a CDC tool would, each
message gets a key (the Kafka-dump's own key if it had one, else its source table, named by the
silver or quarantine event that message became) and a partition from the key's hash, so that one
table's (or one row's) messages keep their order in one partition while a topic's partitions
interleave. Messages no event names a table for (heartbeats, garbage) are spread by their line.
Every record carries a header naming where the message came from.

Tables are read with delta-rs (no Spark job per table: a few hundred rows each), and records are
written with Spark's own Kafka sink (`spark-sql-kafka` is on the classpath already), in one task,
in file order, so each partition's order is the file's.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa

from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.catalog import dataset_status
from cdc_medallion.config import SourceConf
from cdc_medallion.names import bronze_name, silver_name
from cdc_medallion.storage.delta_rs import read_table

ORIGIN_HEADER = "cdc-medallion-origin"
HEADERS = "array<struct<key:string,value:binary>>"
RECORD = f"key binary, value binary, topic string, partition int, headers {HEADERS}"


def topic_of(source: str) -> str:
    """The topic a json-lines source's messages go to (a Kafka-dump keeps its own topics)."""
    return f"cdc.{source}"


@functools.cache
def status(storage: Path) -> tuple[dict[str, Any], ...]:
    """`dataset_status` of a finished run, read once per storage (it scans every Delta log)."""
    return tuple(dataset_status(storage))


def _paths(storage: Path) -> dict[str, str]:
    return {d["name"]: d["path"] for d in status(storage)}


def path_of(storage: Path, name: str) -> str:
    return _paths(storage)[name]


def has(storage: Path, name: str) -> bool:
    return name in _paths(storage)


def rows(storage: Path, name: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """A dataset's rows as pyarrow gives them, read without the JVM (deletion vectors applied),
    but for its dates and timestamps: those are read from their integers (`arrow_rows.python_rows`),
    since gold holds years outside 1-9999 where pyarrow's conversion fails; such a value is its
    text, and an instant is an aware UTC datetime (`+00:00` after its text)."""
    table = read_table(path_of(storage, name), columns)
    moments = [f for f in table.schema if pa.types.is_date32(f.type) or pa.types.is_timestamp(f.type)]
    found = table.drop_columns([f.name for f in moments]).to_pylist()
    # Instants as their UTC wall clock, so that python_rows gives no local time.
    naive = [
        table.column(f.name).cast(pa.timestamp(f.type.unit)) if _zoned(f) else table.column(f.name) for f in moments
    ]
    read = python_rows(pa.table(naive, names=[f.name for f in moments])) if moments else []
    for row, values in zip(found, read, strict=False):
        for field in moments:
            value = values[field.name]
            if _zoned(field) and value is not None:
                value = value.replace(tzinfo=dt.UTC) if isinstance(value, dt.datetime) else f"{value}+00:00"
            row[field.name] = value
    return [{n: row[n] for n in table.schema.names} for row in found]


def _zoned(field: pa.Field) -> bool:
    return pa.types.is_timestamp(field.type) and field.type.tz is not None


def ref_of(row: dict[str, Any]) -> str:
    """A bronze row's `bronze_ref` (BronzeMessage.ref): topic/partition/offset, or file:line."""
    if row["offset"] is not None:
        return f"{row['topic'] or ''}/{row['partition'] or 0}/{row['offset']}"
    return f"{row['_file']}:{row['_line']}"


def _tables(storage: Path, source: str) -> dict[str, str]:
    """Each bronze reference's table, from the silver or quarantine events it made (or took part in)."""
    named: dict[str, str] = {}
    columns = ["bronze_ref", "related_refs", "source_db", "source_schema", "source_table"]
    for dataset in (silver_name(source), f"{silver_name(source)}_quarantine"):
        if not has(storage, dataset):
            continue
        for event in rows(storage, dataset, columns):
            if event["source_table"] is None:
                continue
            table = ".".join(event[c] or "" for c in ("source_db", "source_schema", "source_table"))
            for ref in [event["bronze_ref"], *(event["related_refs"] or [])]:
                if ref is not None:
                    named[ref] = min(named.get(ref, table), table)
    return named


def records(
    storage: Path, source: SourceConf, partitions: int, topic_prefix: str | None = None
) -> list[dict[str, Any]]:
    """A file-layout run's bronze messages of `source` as Kafka records, in landing order.

    `topic_prefix` replaces the first dotted part of each topic: the renderings of one generated
    history all name their topics `gen.<db>.<table>`, and one broker must keep them apart."""
    tables = _tables(storage, source.name)
    produced = []
    for row in sorted(rows(storage, bronze_name(source.name)), key=lambda r: (r["_file"], r["_line"])):
        ref = ref_of(row)
        table = tables.get(ref)
        key = row["key"] if row["key"] is not None else (table.encode() if table is not None else None)
        headers = [*(row["headers"] or []), {"key": ORIGIN_HEADER, "value": ref.encode()}]
        topic = row["topic"] or topic_of(source.name)
        if topic_prefix is not None:
            topic = f"{topic_prefix}.{topic.partition('.')[2]}"
        produced.append(
            {
                "key": key,
                "value": row["value"],
                "topic": topic,
                "partition": (zlib.crc32(key) if key is not None else row["_line"]) % partitions,
                "headers": headers,
            }
        )
    return produced


def produce(spark, produced: list[dict[str, Any]], bootstrap_servers: str, partitions: int = 3) -> None:
    """Write records to Kafka in one task, in list order (the order each partition keeps), into
    topics of `partitions` partitions created beforehand (`create_topics`)."""
    assert all(r["partition"] < partitions for r in produced), "a record for a partition its topic lacks"
    create_topics(spark, {r["topic"] for r in produced}, partitions, bootstrap_servers)
    frame = spark.createDataFrame(produced, RECORD).coalesce(1)
    frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers).save()


def create_topics(spark, topics: set[str], partitions: int, bootstrap_servers: str, seconds: float = 120) -> None:
    """Create the topics not there yet and wait until each of their partitions has a leader.

    A producer sending to a topic the broker does not have yet makes the broker create it; while
    a loaded one-node broker elects the leaders of a dozen such topics, the producer's batches can
    wait out its delivery timeout (a CI run failed so: "Expiring 9 record(s) for
    debezium_json.app.accounts-1: 120001 ms has passed since batch creation"). Kafka's own admin
    client, from the kafka-clients jar Spark's Kafka connector brings, does it beforehand."""
    jvm = spark.sparkContext._jvm
    admin_api = jvm.org.apache.kafka.clients.admin
    settings = jvm.java.util.Properties()
    settings.setProperty("bootstrap.servers", bootstrap_servers)
    admin = admin_api.Admin.create(settings)
    try:
        seconds_unit = jvm.java.util.concurrent.TimeUnit.SECONDS
        existing = set(admin.listTopics().names().get(int(seconds), seconds_unit))
        new = jvm.java.util.ArrayList()
        for topic in sorted(topics - existing):
            new.add(admin_api.NewTopic(topic, jvm.java.util.Optional.of(partitions), jvm.java.util.Optional.empty()))
        admin.createTopics(new).all().get(int(seconds), seconds_unit)
        names = jvm.java.util.ArrayList()
        for topic in sorted(topics):
            names.add(topic)
        deadline = time.monotonic() + seconds
        while True:
            described = admin.describeTopics(names).allTopicNames().get(int(seconds), seconds_unit)
            leaderless = [
                f"{name}-{p.partition()}"
                for name in topics
                for p in described.get(name).partitions()
                if p.leader() is None
            ]
            if not leaderless:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions without a leader after {seconds:.0f} s: {leaderless}")
            time.sleep(0.2)
    finally:
        admin.close()
