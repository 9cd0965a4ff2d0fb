"""The `cdc-medallion` command as users run it (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_medallion.cli import main
from tests.conftest import shared_path

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


#: A Python that starts Spark's planner of a streaming Python source (our file landing) late
#: the first time: Spark waits a fixed 10 s for it to connect back, as on a loaded machine.
SLOW_FIRST_PLANNER = """#!/bin/sh
case "$*" in *python_streaming_source_runner*) mkdir "$0.started" 2>/dev/null && sleep 12;; esac
exec {python} "$@"
"""


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    """The first run of the module's storage, whose bronze query fails once to start its
    planner (SLOW_FIRST_PLANNER) and is started again from its checkpoint."""
    root = tmp_path_factory.mktemp("cli")
    storage = root / "storage"
    slow_python = root / "slow-python"
    slow_python.write_text(SLOW_FIRST_PLANNER.format(python=sys.executable))
    slow_python.chmod(0o755)
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
        python=slow_python,
    )
    assert f"Tables are in {storage}" in result.stdout
    assert "bronze_debezium_json" in result.stderr  # progress lines
    assert (root / "slow-python.started").is_dir(), "the planner never started through slow-python"
    assert "bronze_debezium_json" in result.stderr  # progress lines
    assert "Python worker failed to connect back. SQLSTATE: XXKST); starting it again" in result.stderr
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
