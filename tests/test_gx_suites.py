"""The Great Expectations suites on small frames with known defects: real Spark computes the
frames, real GX (pandas datasource) validates them and builds Data Docs. One GX run serves the
module."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.quality import suites
from cdc_medallion.quality.suites import run_suites

# One worker builds this module's shared storage once (make test runs pytest-xdist).
pytestmark = pytest.mark.xdist_group("gx_suites")


def events(spark, rows: list[dict]):
    full = [{name: row.get(name) for name in EVENT_SCHEMA.fieldNames()} for row in rows]
    return spark.createDataFrame(full, EVENT_SCHEMA)


@pytest.fixture(scope="module")
def checked(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gx")
    now = dt.datetime(2026, 1, 1)
    silver = events(
        spark,
        [
            {"kind": "change", "op": "INSERT", "bronze_ref": "f:0", "source_table": "t", "sequence": "1"},
            {"kind": "change", "op": "UPSERT", "bronze_ref": "f:1", "source_table": "t", "sequence": "2"},
            {"kind": "heartbeat", "op": None, "bronze_ref": "f:2", "event_ts": now},
            {"kind": "mystery", "op": None, "bronze_ref": None},
        ],
    )
    # SCD1: key 1 twice, one NULL key
    current = spark.createDataFrame([(1, "a"), (1, "b"), (None, "c"), (3, "d")], "id int, v string")
    # SCD2: key 1 fine (closed then open); key 3 overlaps (two open versions); key 4 was deleted
    # from SCD1 but still has an open version; key 5 ends before it starts.
    history = spark.createDataFrame(
        [
            (1, "s1", "s2"),
            (1, "s2", None),
            (3, "s1", None),
            (3, "s2", None),
            (4, "s1", None),
            (5, "s3", "s2"),
        ],
        "id int, __START_AT string, __END_AT string",
    )
    current_for_history = spark.createDataFrame([(1,), (3,), (5,)], "id int")
    bronze = spark.createDataFrame(
        [
            (b"k", b"same", "t", 0, 1, None, 0),
            (b"k", b"same", "t", 0, 2, None, 1),  # redelivered
            (None, None, "t", 0, 3, None, 2),  # tombstones are never duplicates
            (None, None, "t", 0, 4, None, 3),
        ],
        "key binary, value binary, topic string, partition int, offset long, _file string, _line long",
    )
    inputs = [
        suites.silver_suite("silver_src", silver, logged=5),
        suites.scd1_suite("gold_t", current, ("id",)),
        *suites.scd2_suites("gold_t_history", history, current_for_history, ("id",)),
        suites.bronze_suite("bronze_src", bronze, logged=4),
    ]
    run_suites(inputs, folder, run_name="first-run")
    checks, docs = run_suites(inputs, folder, run_name="second-run")  # the usual case: suites exist already
    return {(c.dataset, c.name): c for c in checks}, docs


def outcome(checked, dataset: str, name: str) -> tuple[bool, int | None]:
    check = checked[0][(dataset, name)]
    return check.success, check.failed


def test_silver_suite_flags_unknown_kinds_ops_and_counts(checked):
    assert outcome(checked, "silver_src", "kind_known") == (False, 1)
    assert outcome(checked, "silver_src", "op_known") == (False, 1)  # UPSERT; only changes are looked at
    assert outcome(checked, "silver_src", "op_present") == (True, 0)
    assert outcome(checked, "silver_src", "bronze_ref_present") == (False, 1)
    count = checked[0][("silver_src", "row_count_matches_event_log")]
    assert not count.success and count.observed == "4" and count.expected == "5"


def test_scd1_suite_no_null_and_unique_keys(checked):
    assert outcome(checked, "gold_t", "key_id_not_null") == (False, 1)
    assert outcome(checked, "gold_t", "key_unique") == (False, 2)


def test_scd2_suite_intervals_and_open_versions(checked):
    assert outcome(checked, "gold_t_history", "intervals_do_not_overlap") == (False, 1)  # key 3's first version
    assert outcome(checked, "gold_t_history", "ends_after_start") == (False, 1)  # key 5
    assert outcome(checked, "gold_t_history__keys", "one_open_version_per_live_key") == (False, 2)  # keys 3 and 5
    assert outcome(checked, "gold_t_history__keys", "no_open_version_for_deleted_key") == (False, 1)  # key 4


def test_bronze_suite_counts_redelivered_messages_as_a_warning(checked):
    redelivered = checked[0][("bronze_src", "not_redelivered")]
    assert (redelivered.success, redelivered.failed, redelivered.severity) == (False, 2, "warn")
    assert outcome(checked, "bronze_src", "landed_once") == (True, 0)
    assert outcome(checked, "bronze_src", "row_count_matches_event_log") == (True, None)


def test_data_docs_are_built_locally(checked):
    _, docs = checked
    assert docs.is_file()
    pages = {p.name for p in docs.parent.rglob("*.html")}
    assert {"silver_src.html", "gold_t_history__keys.html"} <= pages
    text = docs.read_text(encoding="utf-8")
    assert "silver_src" in text and "gold_t" in text
    runs = docs.parent / "validations" / "silver_src"
    assert sorted(p.name for p in runs.iterdir()) == ["first-run", "second-run"]


def test_old_validation_results_are_pruned(tmp_path):
    uncommitted = tmp_path / "uncommitted"
    for i in range(4):
        run = uncommitted / "validations" / "silver_src" / f"run{i}"
        run.mkdir(parents=True)
        (uncommitted / "data_docs" / "local_site" / "validations" / "silver_src" / f"run{i}").mkdir(parents=True)
        os.utime(run, (1_000_000 + i, 1_000_000 + i))
    suites.prune_results(uncommitted, keep=2)
    assert sorted(p.name for p in (uncommitted / "validations" / "silver_src").iterdir()) == ["run2", "run3"]
    docs = uncommitted / "data_docs" / "local_site" / "validations" / "silver_src"
    assert sorted(p.name for p in docs.iterdir()) == ["run2", "run3"]
