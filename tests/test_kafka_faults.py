"""Faults with a real broker: the pipeline SIGKILLed while it reads Kafka, then the broker stopped
and started again in the middle of the rerun. Nothing may be lost or landed twice.

The embedded Debezium sample (ground truth: `samples.expected_state`) goes to three topics of
three partitions, keyed as Debezium keys them. Bronze reads 60 records a micro-batch, so a run
takes several: the first run is killed right after bronze's second batch is written and before
its offsets are committed (a batch the rerun must not land again); the rerun meets the broker
going down after its next bronze batch and coming back on the same port and data. Afterwards
bronze holds every record once, every message is accounted for, and gold is the ground truth.
One scenario, two faults: each run of the pipeline is a process of its own, with its own JVM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from cdc_medallion.catalog import dataset_status, read_dataset
from cdc_medallion.config import load_conf
from cdc_medallion.lines import lines_of
from cdc_medallion.names import bronze_name, silver_name
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.accounting import account_source
from cdc_medallion.sources.kafka_dump import unpack_line
from tests.conftest import REPO
from tests.kafka_feed import produce
from tests.test_pipeline import SAMPLE, assert_gold_is_ground_truth

pytestmark = pytest.mark.xdist_group("kafka")

PREFIX = "outage."  # topics of their own on the shared broker
PER_BATCH = 60


def sample_records() -> list[dict]:
    """The sample's messages as Debezium produces them: per-table topics, keyed, hashed to partitions."""
    records = []
    for line_no, line in enumerate(lines_of(SAMPLE.read_bytes())):
        record = unpack_line(line, None)
        key, value = record["key"], record["value"]
        topic = PREFIX + (record["topic"] or "shop.unreadable")
        partition = zlib.crc32(key) % 3 if key else line_no % 3
        records.append({"key": key, "value": value, "topic": topic, "partition": partition, "headers": None})
    return records


def write_conf(path: Path, storage: Path, bootstrap_servers: str) -> Path:
    path.write_text(
        f"""
pipeline:
  name: kafka_faults
  storage: {storage}
  transformations: {REPO / "transformations"}
  expectations: {REPO / "expectations"}
sources:
  - name: shop
    format: debezium-json
    kafka:
      bootstrap_servers: "{bootstrap_servers}"
      subscribe_pattern: "outage\\\\..*"
      max_offsets_per_trigger: {PER_BATCH}
tables:
  - {{source: shop, table: customers, keys: [id]}}
  - {{source: shop, table: orders, keys: [order_id]}}
  - {{source: shop, table: order_lines, keys: [order_id, line_no]}}
""",
        encoding="utf-8",
    )
    return path


def bronze_version(storage: Path) -> int:
    """The latest commit of bronze's Delta log (-1 before the table exists)."""
    log = storage / bronze_name("shop") / "_delta_log"
    return max((int(p.stem) for p in log.glob("*.json")), default=-1) if log.exists() else -1


class Outage(threading.Thread):
    """Stops the broker once bronze has committed a batch past `after`, starts it again
    `seconds` later, and records when."""

    def __init__(self, broker, storage: Path, after: int, seconds: float = 3.0) -> None:
        super().__init__(daemon=True)
        self.broker, self.storage, self.after, self.seconds = broker, storage, after, seconds
        self.stopped_at: float | None = None
        self.started_at: float | None = None
        self.cancelled = threading.Event()

    def run(self) -> None:
        while bronze_version(self.storage) <= self.after:
            if self.cancelled.wait(0.05):
                return
        self.broker.stop()
        self.stopped_at = time.monotonic()
        time.sleep(self.seconds)
        self.broker.start()
        self.started_at = time.monotonic()


def test_killed_while_reading_kafka_then_the_broker_goes_down_mid_run(spark, kafka_broker, tmp_path):
    records = sample_records()
    produce(spark, records, kafka_broker.bootstrap_servers)
    storage = tmp_path / "storage"
    conf_file = write_conf(tmp_path / "pipeline.yml", storage, kafka_broker.bootstrap_servers)

    # 1. SIGKILL after bronze's second batch is written, before its offsets are committed.
    command = [sys.executable, "-m", "cdc_medallion.cli", "run", "--conf", str(conf_file), "--no-quality", "--quiet"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "CDC_MEDALLION_KILL_WHERE": "after batch 1 of bronze_shop"}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    landed = read_dataset(spark, storage, bronze_name("shop")).count()
    assert 0 < landed < len(records), "killed while reading: some records landed, not all"

    # 2. The rerun, with the broker stopped after its next bronze batch and started again.
    outage = Outage(kafka_broker, storage, after=bronze_version(storage))
    outage.start()
    try:
        run_pipeline(load_conf(conf_file), spark=spark)
    finally:
        outage.cancelled.set()
        outage.join(timeout=120)
    ended = time.monotonic()
    assert outage.stopped_at is not None and outage.started_at is not None, "the broker went down during the run"
    assert outage.started_at < ended

    bronze = read_dataset(spark, storage, bronze_name("shop"))
    assert bronze.count() == len(records), "every record landed, none twice"
    assert bronze.select("topic", "partition", "offset").distinct().count() == len(records)
    names = {d["name"] for d in dataset_status(storage)}
    quarantine = f"{silver_name('shop')}_quarantine"
    accounting = account_source(
        "shop",
        bronze,
        read_dataset(spark, storage, silver_name("shop")),
        read_dataset(spark, storage, quarantine) if quarantine in names else None,
    )
    assert accounting.balanced, accounting.equation()
    assert accounting.outcomes.get("quarantined") == 4  # the sample's malformed messages, once each
    assert_gold_is_ground_truth(spark, storage)
