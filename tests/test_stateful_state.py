"""What the stateful formats keep in their state store, read back with Spark's state data source
(`statestore`, `state-metadata`) on the query's checkpoint, and the timer that quarantines an
incomplete IBM Q Replication transaction at its timeout.

The state must be what is open, not the source's history: a completed transaction leaves only
its segment digests, for the redelivery window (by landing time); a Qlik table version's
metadata is kept once however often it is sent. The operator-level tests run silver's streaming
query over a bronze Delta table built in memory (so landing times can be chosen); the timer and
upgrade tests run the pipeline.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from cdc_medallion.adhoc import adhoc_conf
from cdc_medallion.formats import get_format
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.names import CHECKPOINT_DIR
from cdc_medallion.parsing.execute import parse
from cdc_medallion.parsing.stateful import LAYOUT_CONF
from cdc_medallion.pipeline import run_pipeline
from tests.helpers import datasets, gold_rows, land_and_parse, read_rows
from tests.test_ibm_qrep_delimited import ACCT, kafka_dump, record, transaction
from tests.test_qlik_json import METADATA as QLIK_METADATA
from tests.test_qlik_json import ROW, data_message, fixture

IBM = "ibm-qrep-delimited"
SOURCE = "ibm_qrep_delimited"
RUN = {"keys": ["ACCT=ID"], "columns": [f"ACCT={ACCT}"], "layout": "kafka-dump"}


# --- silver's query over an in-memory bronze -------------------------------------------------------
def bronze_rows(values: list[str], landed: dt.datetime, first_offset: int) -> list[tuple[Any, ...]]:
    """Bronze rows of Kafka messages (topic `qrep`, partition 0) that landed at `landed`."""
    return [
        (None, value.encode("utf-8"), "qrep", 0, offset, None, None, "s", None, None, landed, None)
        for offset, value in enumerate(values, first_offset)
    ]


def append_bronze(spark: Any, path: Path, rows: list[tuple[Any, ...]]) -> None:
    """One Delta commit of one file: one micro-batch of the stream below."""
    spark.createDataFrame(rows, BRONZE_SCHEMA).coalesce(1).write.format("delta").mode("append").save(str(path))


def run_silver(spark: Any, parser: Any, bronze: Path, checkpoint: Path) -> Counter[str]:
    """Silver's parse as the pipeline streams it (a commit of bronze a micro-batch), until it has
    caught up; how many events of each kind it made."""
    kinds: Counter[str] = Counter()
    stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(str(bronze))

    def keep(batch: Any, _: int) -> None:
        kinds.update({row["kind"]: row["count"] for row in batch.groupBy("kind").count().collect()})

    query = (
        parse(parser, stream)
        .writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return kinds


def state_size(spark: Any, checkpoint: Path, batch: int) -> tuple[int, int]:
    """Rows and bytes (of their JSON) in the state store of the query's stateful operator after
    micro-batch `batch`: every state variable of a transformWithState operator (its timers
    aside), or the one store of a legacy operator."""
    reader = spark.read.format("statestore").option("batchId", batch)
    names: list[str] = []
    for operator in spark.read.format("state-metadata").load(str(checkpoint)).collect():
        properties = json.loads(operator["operatorProperties"] or "{}")
        names += [v["stateName"] for v in properties.get("stateVariables", []) if not v["stateName"].startswith("$")]
    frames = [reader.option("stateVarName", n).load(str(checkpoint)) for n in names] or [reader.load(str(checkpoint))]
    rows = size = 0
    for frame in frames:
        values = [c for c in frame.columns if c != "partition_id"]
        [total] = frame.select(F.count("*"), F.sum(F.octet_length(F.to_json(F.struct(*values))))).collect()
        rows, size = rows + total[0], size + (total[1] or 0)
    return rows, size


def test_after_ten_thousand_completed_transactions_the_state_is_what_ten_open_ones_need(spark, tmp_path):
    """Issue 68: the state grew with the source's history (every completed transaction's marker
    stayed). Ten open transactions (micro-batch 0), then 10,000 completed segmented ones that
    landed two days ago, past the default redelivery window of a day (1), then one more message
    (2): the state is what the ten open ones left alone."""
    parser = get_format(IBM)("s", {"tables": {"ACCT": ACCT}})
    now = dt.datetime.now(dt.UTC)

    def segments(tx: int) -> list[str]:  # a row inserted in segment 0001, deleted in the final one
        row = (tx, "o", 1)
        return [record(tx, 1, "ISRT", None, row), record(tx, 0, "DLET", row, None)]

    opened = [segments(tx)[0] for tx in range(20_001, 20_011)]  # 0001 only: the final segment never comes
    completed = [text for tx in range(1, 10_001) for text in segments(tx)]
    bronze = tmp_path / "bronze"
    append_bronze(spark, bronze, bronze_rows(opened, now, 0))
    append_bronze(spark, bronze, bronze_rows(completed, now - dt.timedelta(days=2), 10))
    append_bronze(spark, bronze, bronze_rows([record(30_000, 0, "ISRT", None, (30_000, "x", 1))], now, 20_010))

    kinds = run_silver(spark, parser, bronze, tmp_path / "checkpoint")

    assert kinds == {"held": 10, "change": 20_001, "transaction": 10_000}
    open_rows, open_bytes = state_size(spark, tmp_path / "checkpoint", 0)
    rows, size = state_size(spark, tmp_path / "checkpoint", 2)
    print(f"state: 10 open {open_rows} rows, {open_bytes:,} B; then 10,000 completed: {rows} rows, {size:,} B")
    assert rows <= 2 * open_rows and size <= 2 * open_bytes, (rows, size, open_rows, open_bytes)
    assert open_rows >= 1 and open_bytes > 1000  # the held segments themselves


def test_a_qlik_table_versions_metadata_is_kept_once_however_often_it_is_sent(spark, tmp_path):
    """Qlik's state kept every metadata message it was sent (a task restart sends them again):
    499 more of one table version's metadata (micro-batch 1) leave what the first left (0)."""
    parser = get_format("qlik-json")("s")
    now = dt.datetime.now(dt.UTC)
    metadata = json.dumps(json.loads(fixture(QLIK_METADATA)))
    bronze = tmp_path / "bronze"
    append_bronze(spark, bronze, bronze_rows([metadata, data_message("INSERT", ROW, change_mask="0F")], now, 0))
    again = [metadata] * 499 + [data_message("INSERT", {**ROW, "emp_no": 1}, change_mask="0F")]
    append_bronze(spark, bronze, bronze_rows(again, now, 2))

    assert run_silver(spark, parser, bronze, tmp_path / "checkpoint") == {"schema_change": 500, "change": 2}
    rows, size = state_size(spark, tmp_path / "checkpoint", 0)
    repeated_rows, repeated_size = state_size(spark, tmp_path / "checkpoint", 1)
    print(f"state: metadata sent once {rows} rows, {size:,} B; 500 times {repeated_rows} rows, {repeated_size:,} B")
    assert repeated_rows <= 2 * rows and repeated_size <= 2 * size, (repeated_rows, repeated_size, rows, size)
    assert rows >= 1 and size > 1000  # the metadata itself, in each group that learned it


# --- the pipeline ----------------------------------------------------------------------------------
def silver_checkpoint(storage: Path) -> Path:
    [folder] = [p for p in (storage / CHECKPOINT_DIR).iterdir() if (p / "state").is_dir()]
    return folder


def test_a_fresh_process_reads_a_held_transactions_timer(spark, tmp_path):
    """The next `run` is a new process: before any query starts there, the runner reads the
    silver query's registered timers (`runner/timers.py`) to know whether to start it. That read
    must work with no streaming query started yet in the session (it failed every second `run`
    of the embedded sample: no state store coordinator)."""
    source = tmp_path / "qrep.jsonl"
    open_ended, _ = transaction(4)
    kafka_dump(source, open_ended[:1], 0)
    conf = adhoc_conf(IBM, source, tmp_path / "storage", **RUN)  # the default timeout, a day: not due
    land_and_parse(conf, spark)
    checkpoint = silver_checkpoint(conf.storage)
    code = (
        "import sys; from pathlib import Path; from cdc_medallion.spark import get_spark; "
        "from cdc_medallion.runner.timers import timers_due; "
        "print('due:', timers_due(get_spark(), Path(sys.argv[1])))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(checkpoint)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "due: False"


@pytest.mark.slow
def test_a_timed_out_transaction_is_quarantined_in_an_update_where_nothing_new_arrives(spark, tmp_path):
    """A transaction whose final segment never comes is held with a processing-time timer at its
    timeout: the next update, with no new message at all, quarantines it (its reason names the
    transaction and how many segments it lacks), and every message is accounted for once."""
    timeout = 75  # past the time from landing to silver's parse on a busy machine
    source = tmp_path / "qrep.jsonl"
    complete, expected = transaction(1)
    open_ended, _ = transaction(2)  # 0001 of three: 0002 and the final segment never come
    kafka_dump(source, [*complete, open_ended[0]], 0)
    options = [f"incomplete_timeout_seconds={timeout}"]
    conf = adhoc_conf(IBM, source, tmp_path / "storage", **RUN, options=options)
    land_and_parse(conf, spark)

    silver = read_rows(spark, conf.storage, f"silver_{SOURCE}")
    [held] = [r for r in silver if r["kind"] == "held"]
    assert held["bronze_ref"] == "qrep/0/3"
    assert f"silver_{SOURCE}_quarantine" not in datasets(conf.storage), "timed out before its timer: raise `timeout`"
    due = held["ingest_ts"].replace(tzinfo=dt.UTC) + dt.timedelta(seconds=timeout + 1)
    time.sleep(max(0.0, (due - dt.datetime.now(dt.UTC)).total_seconds()))

    summary = run_pipeline(conf, spark=spark, quality=True)  # nothing new landed

    assert datasets(conf.storage)[f"bronze_{SOURCE}"]["rows"] == 4
    assert f"silver_{SOURCE}" in summary.updates[0].flows, "silver did not run in the update with nothing new"
    flow = summary.updates[0].flows[f"silver_{SOURCE}"]
    assert flow.batches == 1 and flow.quarantined == 1  # it ran, with nothing new, and quarantined
    [timed_out] = read_rows(spark, conf.storage, f"silver_{SOURCE}_quarantine")
    assert timed_out["bronze_ref"] == "qrep/0/3"
    assert timed_out["error"].startswith("transaction: incomplete transaction 0000:0000:0388:0002:0000:0000")
    assert "1 segment(s) missing" in timed_out["error"]
    assert {r["ID"]: (r["OWNER"], r["BALANCE"]) for r in gold_rows(spark, conf.storage, "ACCT")} == expected
    [accounting] = summary.quality.accounting
    assert accounting.balanced and accounting.outcomes == {"change": 3, "quarantined": 1}, accounting


def test_a_checkpoint_of_the_legacy_operator_keeps_its_held_messages(spark, tmp_path):
    """A silver checkpoint made with applyInPandasWithState (state layout 2) goes on with it: the
    segments it held complete their transaction in the next run, applied once."""
    source = tmp_path / "qrep.jsonl"
    late, expected = transaction(3)
    offset = kafka_dump(source, late[:2], 0)
    conf = adhoc_conf(IBM, source, tmp_path / "storage", **RUN)
    spark.conf.set(LAYOUT_CONF, "2")  # the run of the version before this one
    try:
        land_and_parse(conf, spark)
    finally:
        spark.conf.unset(LAYOUT_CONF)
    checkpoint = silver_checkpoint(conf.storage)
    (checkpoint / "cdc_medallion_state_layout").write_text("2", encoding="utf-8")  # what that version wrote
    [operator] = spark.read.format("state-metadata").load(str(checkpoint)).collect()
    assert "transformWithState" not in operator["operatorName"], operator

    kafka_dump(source, late[2:], offset)
    run_pipeline(conf, spark=spark)

    assert {r["ID"]: (r["OWNER"], r["BALANCE"]) for r in gold_rows(spark, conf.storage, "ACCT")} == expected
    silver = read_rows(spark, conf.storage, f"silver_{SOURCE}")
    assert sorted(r["bronze_ref"] for r in silver if r["kind"] == "held") == ["qrep/0/0", "qrep/0/1"]  # once each
    assert not [r for r in silver if r["kind"] == "error"]
    [operator] = spark.read.format("state-metadata").load(str(checkpoint)).collect()
    assert "transformWithState" not in operator["operatorName"], operator


@pytest.mark.slow
def test_a_kill_after_silver_wrote_a_completed_transaction_applies_it_once(spark, tmp_path):
    """Killed after silver's batch that completes a held transaction is written and before the
    checkpoint records it, the next run replays the batch from the state the batch began with:
    the transaction is in silver once and gold applies it once."""
    source = tmp_path / "qrep.jsonl"
    late, expected = transaction(4)
    offset = kafka_dump(source, late[:2], 0)
    storage = tmp_path / "storage"
    conf = adhoc_conf(IBM, source, storage, **RUN)
    land_and_parse(conf, spark)  # the two segments are held (batch 0)
    kafka_dump(source, late[2:], offset)
    command = [
        sys.executable,
        "-m",
        "cdc_medallion.cli",
        "ingest",
        "--format",
        IBM,
        "--quiet",
        "--layout",
        "kafka-dump",
    ]
    command += ["--input", str(source), "--storage", str(storage), "--key", "ACCT=ID", "--columns", f"ACCT={ACCT}"]
    kill = {"CDC_MEDALLION_KILL_WHERE": f"after batch 1 of silver_{SOURCE}", "PYSPARK_PYTHON": sys.executable}
    killed = subprocess.run(command, env={**os.environ, **kill}, capture_output=True, text=True, timeout=900)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr

    summary = run_pipeline(dataclasses.replace(conf), spark=spark, quality=True)

    silver = read_rows(spark, storage, f"silver_{SOURCE}")
    changes = [r for r in silver if r["kind"] == "change"]
    assert len(changes) == 5 and len({r["sequence"] for r in changes}) == 5  # once each
    assert {r["ID"]: (r["OWNER"], r["BALANCE"]) for r in gold_rows(spark, storage, "ACCT")} == expected
    [accounting] = summary.quality.accounting
    assert accounting.balanced and accounting.outcomes == {"change": 3}, accounting
