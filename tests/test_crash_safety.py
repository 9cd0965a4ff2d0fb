"""Crash safety on a live stream, as the user meets it: `cdc-medallion ingest` on a Debezium
stream with malformed lines, SIGKILLed at a random commit point (bronze, silver or gold) in
every run while new messages keep arriving. After a final clean run, gold equals the ground
truth, bronze holds every line exactly once and the malformed lines are quarantined once each.
The same drill on a few hundred thousand messages is `python -m bench.crash` (outside CI)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cdc_medallion.generator.drill import check, kill_drill
from cdc_medallion.generator.history import generate_history
from tests.helpers import gold_rows, ingest, read_rows

HISTORY = generate_history(tables=1, transactions=600, seed=23)  # one table: the drill is about commits, not keys


@pytest.mark.slow
def test_ingest_killed_at_random_commit_points(spark, tmp_path):
    # Two killed runs keep CI short (each starts a JVM); `make crash-drill` kills at least 20 times.
    # Seed 13 kills the first run in silver and the second in bronze, with work left to replay.
    result = kill_drill(HISTORY, tmp_path, pieces=2, seed=13, batch_size=300, max_point=18)  # 18 per run here

    assert len(result.kills) >= 2, result.kills
    assert len(set(result.stages())) >= 2, result.stages()
    assert result.garbage >= 1
    problems = check(spark, HISTORY, result)
    assert not problems, "\n".join(problems[:20])


@pytest.mark.slow
def test_a_kill_between_a_quarantine_write_and_its_dataset_write_quarantines_once(spark, tmp_path):
    """Silver commits a batch's quarantined rows, then its valid rows. Killed in between, the
    next run (after more lines arrived) commits the valid rows and quarantines nothing twice."""
    feed = tmp_path / "feed.jsonl"
    good = '{"op":"c","ts_ms":1,"source":{"table":"t","lsn":%d},"before":null,"after":{"id":%d,"v":"x"}}'
    feed.write_text("\n".join([good % (10, 1), "garbage one", good % (20, 2)]) + "\n", encoding="utf-8")
    storage = tmp_path / "storage"
    command = [sys.executable, "-m", "cdc_medallion.cli", "ingest", "--format", "debezium-json", "--quiet"]
    command += ["--input", str(feed), "--storage", str(storage), "--key", "t=id"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    killed = subprocess.run(
        command,
        env={**env, "CDC_MEDALLION_KILL_WHERE": "after append to silver_debezium_json_quarantine"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert "silver_debezium_json_quarantine" in killed.stdout
    with feed.open("a", encoding="utf-8") as handle:
        handle.write("\n".join([good % (30, 3), "garbage two"]) + "\n")
    ingest(spark, "debezium-json", feed, storage, keys={"t": "id"})  # the next run, in this process

    quarantined = sorted(r["raw_message"] for r in read_rows(spark, storage, "silver_debezium_json_quarantine"))
    assert quarantined == ["garbage one", "garbage two"]
    changes = [r for r in read_rows(spark, storage, "silver_debezium_json") if r["kind"] == "change"]
    assert sorted(r["after"]["id"] for r in changes) == ["1", "2", "3"]
    assert {r["id"] for r in gold_rows(spark, storage, "t")} == {1, 2, 3}


@pytest.mark.slow
def test_a_kill_after_bronzes_commit_logs_its_rows_once(spark, tmp_path):
    """Bronze's count is its commit's. Killed after that commit and before the checkpoint's,
    the next run skips the batch's write and logs what the commit wrote: the event log's rows
    equal bronze's, so the quality report's `row_count_matches_event_log` holds."""
    from cdc_medallion.quality.checks import logged
    from cdc_medallion.storage.delta_store import DeltaStore

    feed = tmp_path / "feed.jsonl"
    good = '{"op":"c","ts_ms":1,"source":{"table":"t","lsn":%d},"before":null,"after":{"id":%d,"v":"x"}}'
    feed.write_text("\n".join([good % (10, 1), good % (20, 2), "garbage"]) + "\n", encoding="utf-8")
    storage = tmp_path / "storage"
    command = [sys.executable, "-m", "cdc_medallion.cli", "ingest", "--format", "debezium-json", "--quiet"]
    command += ["--input", str(feed), "--storage", str(storage), "--key", "t=id"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "CDC_MEDALLION_KILL_WHERE": "after append to bronze_"}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr

    ingest(spark, "debezium-json", feed, storage, keys={"t": "id"})  # the next run replays the batch

    store = DeltaStore(storage, spark)
    assert store.count("bronze_debezium_json") == 3
    assert logged(store).rows["bronze_debezium_json"][0] == 3
    assert {r["id"] for r in gold_rows(spark, storage, "t")} == {1, 2}
