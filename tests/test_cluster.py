"""The pipeline on a Spark cluster, not only in one driver: a standalone master and one worker
started on localhost from the pyspark package (`spark-class`), two sources of the embedded
sample run there, and every table compared with the same sources run on `local[2]`."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from cdc_medallion.config import load_conf
from cdc_medallion.pipeline import run_pipeline
from tests.conftest import REPO
from tests.helpers import datasets, read_rows, timeless

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
# Columns that say when a row was landed or written, which two runs cannot share.
RUN_TIME_COLUMNS = {"_ingest_ts", "ingest_ts", "__event_ts"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}: {log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.5)
    raise RuntimeError(f"port {port} did not open: {log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def standalone_cluster(folder: Path) -> Iterator[str]:
    """A master and one worker (2 cores, 2 GiB) on localhost; yields the master's URL."""
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_CLASS.parent.parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(folder / "worker"),
        "PYSPARK_PYTHON": sys.executable,
        # The master and the worker only schedule: the quick JIT the suite's JVMs use is enough.
        "SPARK_DAEMON_JAVA_OPTS": os.environ.get("CDC_MEDALLION_JAVA_OPTIONS", ""),
    }
    port, worker_port = _free_port(), _free_port()
    master_log, worker_log = folder / "master.log", folder / "worker.log"
    processes: list[subprocess.Popen] = []
    try:
        master = subprocess.Popen(
            [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(_free_port())],
            env=env, stdout=master_log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        processes.append(master)
        _wait_for_port(port, master, master_log)
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen(
            [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port",
             str(worker_port), "--webui-port", str(_free_port()), "--cores", "2", "--memory", "2g"],
            env=env, stdout=worker_log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        processes.append(worker)
        _wait_for_port(worker_port, worker, worker_log)
        deadline = time.monotonic() + 60  # the worker registers with the master
        while b"Successfully registered with master" not in worker_log.read_bytes():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not register: {worker_log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


# One of the sample's sources, to keep CI short: a stateful format, its parse in Python workers on
# the executors and its held messages in their state store (every format parses the same way).
SOURCES = ("qlik.yml",)


def _sample_conf(folder: Path, storage: Path) -> Path:
    """conf/local.yml with its storage moved into `folder`, with the sources of `SOURCES`."""
    conf = folder / "pipeline.yml"
    text = (REPO / "conf" / "local.yml").read_text(encoding="utf-8")
    text = text.replace("storage: ../.data/local", f"storage: {storage}")
    text = text.replace("../transformations", str(REPO / "transformations"))
    text = text.replace("../expectations", str(REPO / "expectations"))
    text = text.replace("  - sources/*.yml\n", "".join(f"  - {REPO / 'conf' / 'sources' / n}\n" for n in SOURCES))
    conf.write_text(text, encoding="utf-8")
    return conf


def _tables(spark, storage: Path) -> dict[str, list[str]]:
    """Every dataset but the event log, as sorted rows without the run-time columns."""
    found = {}
    for name, entry in datasets(storage).items():
        if entry["layer"] == "system":
            continue
        rows = read_rows(spark, storage, name)
        found[name] = sorted(
            repr(sorted((k, timeless(k, v)) for k, v in r.items() if k not in RUN_TIME_COLUMNS)) for r in rows
        )
    return found


@pytest.mark.slow
def test_the_sample_on_a_standalone_cluster_gives_the_tables_of_local(spark, tmp_path):
    if not SPARK_CLASS.is_file():  # pragma: no cover - pyspark always ships it
        pytest.skip(f"{SPARK_CLASS} is missing from the pyspark package")
    cluster_storage, local_storage = tmp_path / "cluster" / "storage", tmp_path / "local" / "storage"
    (tmp_path / "cluster").mkdir()
    (tmp_path / "local").mkdir()
    with standalone_cluster(tmp_path) as master:
        conf = _sample_conf(tmp_path / "cluster", cluster_storage)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "CDC_MEDALLION_SPARK_MASTER": master}
        run = subprocess.run(
            [sys.executable, "-m", "cdc_medallion.cli", "run", "--conf", str(conf), "--no-quality"],
            env=env, capture_output=True, text=True, timeout=1500,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-4000:]
        applications = list((tmp_path / "worker").glob("app-*"))
        assert applications, "the worker ran no application: the run did not use the cluster"
        executor_logs = [p for app in applications for p in app.glob("*/stderr")]
        assert executor_logs and any(p.stat().st_size for p in executor_logs)
    run_pipeline(load_conf(_sample_conf(tmp_path / "local", local_storage)), spark=spark)

    on_cluster, local = _tables(spark, cluster_storage), _tables(spark, local_storage)
    assert sorted(on_cluster) == sorted(local)
    assert {name for name in local if name.startswith("gold_")}  # the sample has gold tables
    for name in local:
        assert on_cluster[name] == local[name], name
    shutil.rmtree(tmp_path / "worker", ignore_errors=True)
