"""The `cdc-medallion` command as users run it (subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.catalog import dataset_status, gold_dataset
from cdc_medallion.cli import main
from cdc_medallion.config import load_conf
from cdc_medallion.lines import lines_of
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.storage.delta_rs import read_table
from tests.conftest import REPO, shared_path

# One worker builds this module's shared storage once (make test runs pytest-xdist).
pytestmark = pytest.mark.xdist_group("cli")

ENV = {**os.environ, "PYSPARK_PYTHON": sys.executable}


def cli(*args: str, check: bool = True, python: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = ENV if python is None else {**ENV, "PYSPARK_PYTHON": str(python)}
    result = subprocess.run(
        [sys.executable, "-m", "cdc_medallion.cli", *args], env=env, capture_output=True, text=True, timeout=600
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


#: A Python that notes each Python process Spark starts (the module it runs) in a file beside it.
RECORDING_PYTHON = """#!/bin/sh
echo "$*" >> "$0.started"
exec {python} "$@"
"""


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    """The first run of the module's storage. Its bronze query starts no Python process of its
    own: the landing is planned in the driver and streamed by Spark's own file source (a Python
    streaming source starts a planner process, `python_streaming_source_runner`, per query)."""
    root = tmp_path_factory.mktemp("cli")
    storage = root / "storage"
    recording_python = root / "recording-python"
    recording_python.write_text(RECORDING_PYTHON.format(python=sys.executable))
    recording_python.chmod(0o755)
    fixture = shared_path("fixtures", "debezium-json", "apache_flink__debezium-postgres-data-schema-exclude.txt")
    result = cli(
        "ingest",
        "--format",
        "debezium-json",
        "--input",
        str(fixture),
        "--storage",
        str(storage),
        "--key",
        "products=id",
        python=recording_python,
    )
    assert f"Tables are in {storage}" in result.stdout
    assert "bronze_debezium_json" in result.stderr  # progress lines
    started = (root / "recording-python.started").read_text()
    assert "pyspark.daemon" in started  # the Python workers (of silver's parse, and of the landing's reads)
    assert "python_streaming_source_runner" not in started, started
    return storage


def test_status_json(ingested):
    entries = json.loads(cli("status", "--storage", str(ingested), "--json").stdout)
    by_name = {e["name"]: e for e in entries}
    assert by_name["bronze_debezium_json"] == {
        "name": "bronze_debezium_json",
        "layer": "bronze",
        "rows": 16,
        "path": str(ingested / "bronze_debezium_json"),
    }
    assert by_name["gold_products"]["scd_type"] == 1 and by_name["gold_products"]["source_table"] == "products"
    assert by_name["gold_products_history"]["scd_type"] == 2
    assert {e["layer"] for e in entries} >= {"bronze", "silver", "gold", "system"}


def in_process(capsys, *args: str) -> str:
    """The CLI's `main` in this process, on the suite's Spark session: the commands whose process
    boundary the tests above already cover, without a JVM start each."""
    assert main(list(args)) == 0, capsys.readouterr().err[-3000:]
    return capsys.readouterr().out


def test_show_json(spark, ingested, capsys):
    rows = json.loads(in_process(capsys, "show", "gold_products", "--storage", str(ingested), "--limit", "3", "--json"))
    assert len(rows) == 3 and {"id", "name", "description", "weight"} <= set(rows[0])
    assert [r["id"] for r in rows] == [101, 102, 103]


def test_ingest_again_is_incremental(spark, ingested, capsys):
    before = json.loads(cli("status", "--storage", str(ingested), "--json").stdout)
    fixture = shared_path("fixtures", "debezium-json", "apache_flink__debezium-postgres-data-schema-exclude.txt")
    in_process(
        capsys,
        "ingest",
        "--format",
        "debezium-json",
        "--input",
        str(fixture),
        "--storage",
        str(ingested),
        "--key",
        "products=id",
        "--quiet",
    )
    after = json.loads(cli("status", "--storage", str(ingested), "--json").stdout)
    strip = lambda entries: {e["name"]: e["rows"] for e in entries if e["layer"] != "system"}  # noqa: E731
    assert strip(after) == strip(before)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "--conf", "/nonexistent/conf.yml"), "/nonexistent/conf.yml: configuration file not found"),
        (("ingest", "--format", "nope", "--input", ".", "--storage", "/tmp/x"), "--format 'nope': unknown format"),
        (("ingest", "--format", "debezium-json", "--input", "/nonexistent", "--storage", "/tmp/x"), "no such file"),
        (
            ("ingest", "--format", "debezium-json", "--input", ".", "--storage", "/tmp/x", "--key", "products"),
            "--key 'products': expected TABLE=...",
        ),
        (("status", "--storage", "/nonexistent/storage"), "does not exist: run the pipeline first"),
    ],
)
def test_errors_are_one_clear_line(args, message):
    result = cli(*args, check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_malformed_spark_setting_is_refused_before_spark_starts(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text("{}\n", encoding="utf-8")
    command = ["ingest", "--format", "debezium-json", "--input", str(data), "--storage", str(tmp_path / "storage")]
    result = subprocess.run(
        [sys.executable, "-m", "cdc_medallion.cli", *command],
        env={**ENV, "CDC_MEDALLION_SPARK_CONF": "spark.sql.shuffle.partitions=2 memory=8g"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2
    assert "CDC_MEDALLION_SPARK_CONF: 'memory=8g' is not spark.<key>=<value>" in result.stderr
    assert not (tmp_path / "storage" / "bronze_debezium_json").exists()


def test_spark_settings_from_the_environment_reach_the_session(spark):
    """CDC_MEDALLION_SPARK_CONF is read when the session is built: the suite's own session was
    built with the settings tests/conftest.py puts there (whole-stage codegen off, which is on by
    default), so it shows them without a JVM started for this alone."""
    settings = dict(setting.split("=", 1) for setting in os.environ["CDC_MEDALLION_SPARK_CONF"].split())
    assert settings.get("spark.sql.codegen.wholeStage") == "false"
    for key, value in settings.items():
        assert spark.conf.get(key) == value, key


CHANGE = '{"op":"%s","ts_ms":%d,"source":{"table":"t","lsn":%d},"before":null,"after":{"id":%d,"v":"%s"}}\n'
CONTINUOUS_CONF = """pipeline:
  name: continuous
  storage: storage
  transformations: {repo}/transformations
  expectations: {repo}/expectations
sources:
  - name: feed
    format: debezium-json
    input:
      path: feed.jsonl
tables:
  - source: feed
    table: t
    keys: [id]
"""


def gold_now(storage: Path) -> dict[int, str]:
    """SCD1 gold of table `t` as it is committed now, read without a JVM beside the run."""
    name = gold_dataset(dataset_status(storage), "t", 1) if storage.is_dir() else None
    return {} if name is None else {r["id"]: r["v"] for r in python_rows(read_table(storage / name))}


def wait_for(what: Callable[[], bool], process: subprocess.Popen, log: Path, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert process.poll() is None, f"the run ended early: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"not within {seconds}s: {log.read_text()[-3000:]}"
        time.sleep(2)


def test_run_continuous_applies_messages_as_they_arrive_until_ctrl_c(spark, tmp_path):
    """`run --continuous` keeps every flow running: lines appended while it runs reach gold, each
    once. Ctrl-C (SIGINT to the whole process group, as a terminal sends it) stops it cleanly even
    in the middle of a batch: here it comes half a second into gold's third batch (fault
    injection). That batch is no failure, and the next run applies it, each line still once."""
    feed = tmp_path / "feed.jsonl"
    feed.write_text(CHANGE % ("c", 1, 10, 1, "a") + CHANGE % ("c", 2, 20, 2, "b"), encoding="utf-8")
    conf = tmp_path / "conf.yml"
    conf.write_text(CONTINUOUS_CONF.format(repo=REPO), encoding="utf-8")
    command = [sys.executable, "-m", "cdc_medallion.cli", "run", "--conf", str(conf), "--continuous"]
    log, storage = tmp_path / "run.log", tmp_path / "storage"
    ctrl_c = {
        "CDC_MEDALLION_KILL_WHERE": "before batch 2 of shared__silver_feed",
        "CDC_MEDALLION_KILL_SIGNAL": "INT",
        "CDC_MEDALLION_KILL_DELAY_MS": "500",
    }
    with log.open("w") as out:
        process = subprocess.Popen(
            command, env={**ENV, **ctrl_c}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for(lambda: gold_now(storage) == {1: "a", 2: "b"}, process, log)
        with feed.open("a", encoding="utf-8") as handle:
            handle.write(CHANGE % ("u", 3, 30, 1, "c") + CHANGE % ("c", 4, 40, 3, "d"))
        wait_for(lambda: gold_now(storage) == {1: "c", 2: "b", 3: "d"}, process, log)
        with feed.open("a", encoding="utf-8") as handle:
            handle.write(CHANGE % ("u", 5, 50, 2, "e"))
        process.wait(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    err = log.read_text()
    assert "[fault injection] SIGINT to the process group" in err, err[-3000:]
    assert "stopping" in err and "FAILED" not in err and process.returncode == 0, err[-3000:]
    run_pipeline(load_conf(conf), spark=spark)  # the next run, in this process as any run
    assert gold_now(storage) == {1: "c", 2: "e", 3: "d"}
    bronze = python_rows(read_table(storage / "bronze_feed"))
    assert sorted(bytes(r["value"]) for r in bronze) == sorted(lines_of(feed.read_bytes()))
