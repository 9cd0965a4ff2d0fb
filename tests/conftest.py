"""Shared fixtures: one Spark session for the whole suite (a cold start costs more than a test), real Delta tables."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

# Hypothesis profiles, the one place property tests get their seed and budget from; a test sets
# only what is its own (a health check its examples trip, a larger count when its examples are
# cheap), and inherits the rest from the loaded profile (a bare `settings(...)` does), so the
# value-decoder properties (tests/test_exact_values.py), the fuzz tests and the SCD model tests
# alike run derandomized in CI. `HYPOTHESIS_PROFILE` chooses one; "ci" is the default, so
# `make test` and CI run it:
# - "ci": derandomized, so every run tries the same examples (a red CI run is red again on a
#   laptop, and a green one does not turn red by luck); 10 examples for a test that names no
#   count: the SCD model tests, whose every example is a few Spark jobs per batch over up to 60
#   keys (tests/test_auto_cdc_model.py: 10 are enough to find the bugs planted there, in its
#   docstring); no deadline (a Spark job's time is the machine's load, not the code's); the
#   failing example's blob printed, to replay it with `@reproduce_failure`. No example
#   database: a derandomized run needs none.
# - "dev": fresh random examples each run, 50 for a test that names no count, failures kept in an
#   example database under ~/.cache (never in the tree) and tried first the next time: for
#   exploring, `HYPOTHESIS_PROFILE=dev .venv/bin/python -m pytest -n 0 tests/test_auto_cdc_model.py`.
settings.register_profile("ci", derandomize=True, max_examples=10, deadline=None, print_blob=True)
settings.register_profile(
    "dev",
    max_examples=50,
    deadline=None,
    print_blob=True,
    database=DirectoryBasedExampleDatabase(Path.home() / ".cache" / "cdc-medallion" / "hypothesis"),
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Test batches are a few rows, where compiling each query's generated code costs more than
# running it, so the suite runs interpreted. The engine's work is the same.
# The suite creates thousands of small tables in one JVM: Delta keeps each table's log and its
# cached state until 10,000 are open; 64 keep the driver's memory flat.
os.environ.setdefault(
    "CDC_MEDALLION_SPARK_CONF",
    "spark.sql.codegen.wholeStage=false spark.sql.codegen.factoryMode=NO_CODEGEN"
    " spark.databricks.delta.delta.log.cacheSize=64",
)

# Each test's pipeline is a few hundred messages through a few dozen short Spark jobs, in a JVM that
# lives for the suite or, for the tests that kill or start processes, for one run: the JIT's
# optimizing tier (C2) spends more CPU compiling Spark than its code saves there. Subprocesses
# inherit it.
# Without C2 the code cache defaults to 48 MiB, which a suite's worth of Spark fills: the JIT then
# stops ("CodeCache is full. Compiler has been disabled") and the rest runs interpreted.
os.environ.setdefault("CDC_MEDALLION_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m")

# Test batches are a few rows: two shuffle partitions (one per core) instead of four halve the
# tasks of every shuffle.
os.environ.setdefault("CDC_MEDALLION_SHUFFLE_PARTITIONS", "2")

# pytest-xdist runs tests in workers whose `__main__` has neither `__spec__` nor `__file__`, which
# pyspark.sql.connect (imported by Great Expectations) takes for a doctest run and exits on.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = "<pytest-xdist worker>"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest work first: tests sharing a group's fixture (one worker runs a group), then
    tests marked slow, then the rest, each in its file's order. pytest-xdist hands out work in
    this order, so a long test never starts last while the other workers sit idle."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("xdist_group") is not None:
            return 0
        return 1 if item.get_closest_marker("slow") is not None else 2

    items.sort(key=rank)  # stable: each file keeps its order


@pytest.fixture(scope="session")
def spark():
    from cdc_medallion.spark import get_spark

    return get_spark("cdc-medallion-tests")


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / "storage"


def shared_path(*parts: str) -> Path:
    """A file under ../shared; tests that need it skip, printing why, when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared must sit beside the repository)")
    return path


@pytest.fixture(scope="session")
def kafka_broker():
    """One Kafka broker per test process, started by the first test that asks for it (so a run
    without Kafka tests never starts one) and stopped at the end. Every test that uses it is in an
    `xdist_group`: with `--dist loadgroup` a group runs on one worker, which starts one broker for
    it. The broker tests share `kafka`; each capture test (PostgreSQL, MariaDB) and the Spark
    Connect test have a group of their own, so they run side by side on their own brokers instead
    of one after another (topics never collide across them)."""
    from cdc_medallion.services.kafka_broker import KafkaBroker

    broker = KafkaBroker(partitions=3)
    broker.start()
    yield broker
    broker.close()
