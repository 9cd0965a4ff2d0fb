"""The local pipeline end to end on the embedded sample: ground truth, reruns, full refresh,
a run killed between commits, out-of-order and duplicated input, late events."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_medallion.adhoc import adhoc_conf
from cdc_medallion.config import load_conf
from cdc_medallion.generator.drill import INTERPRETED
from cdc_medallion.lines import lines_of
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.samples import expected_state
from tests.conftest import REPO
from tests.helpers import datasets, gold_rows, ingest, read_rows

# One worker runs the tests of the shared sample run, so it is built once (make test runs
# pytest-xdist); the other tests go to any worker.
shares_the_sample_run = pytest.mark.xdist_group("pipeline")

SAMPLE = REPO / "samples" / "debezium" / "shop.jsonl"
KEYS = {"customers": ("id",), "orders": ("order_id",), "order_lines": ("order_id", "line_no")}


def write_conf(tmp_path: Path, storage: Path, sample: Path = SAMPLE) -> Path:
    conf = tmp_path / "pipeline.yml"
    conf.write_text(
        f"""
pipeline:
  name: test_pipeline
  storage: {storage}
  transformations: {REPO / "transformations"}
  expectations: {REPO / "expectations"}
sources:
  - name: shop
    format: debezium-json
    input: {{path: {sample}, layout: kafka-dump}}
tables:
  - {{source: shop, table: customers, keys: [id]}}
  - {{source: shop, table: orders, keys: [order_id], track_history_except: [placed_at]}}
  - {{source: shop, table: order_lines, keys: [order_id, line_no]}}
""",
        encoding="utf-8",
    )
    return conf


def assert_gold_is_ground_truth(spark, storage: Path) -> None:
    truth = expected_state()
    for table, keys in KEYS.items():
        rows = gold_rows(spark, storage, table, 1)
        got = {tuple(r[k] for k in keys): {c: v for c, v in r.items() if not c.startswith("__")} for r in rows}
        assert set(got) == set(truth[table]), table
        for identity, expected in truth[table].items():
            row = got[identity]
            for column, value in expected.items():
                if isinstance(value, str) and column == "total":
                    value = decimal.Decimal(value)
                assert row[column] == value, (table, identity, column, row[column], value)


def row_counts(storage: Path) -> dict[str, int]:
    return {name: d["rows"] for name, d in datasets(storage).items() if d["layer"] != "system"}


@pytest.fixture(scope="module")
def sample_run(spark, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("sample")
    storage = tmp_path / "storage"
    conf = load_conf(write_conf(tmp_path, storage))
    summary = run_pipeline(conf, spark=spark)
    return conf, storage, summary


@shares_the_sample_run
def test_sample_gold_equals_ground_truth(spark, sample_run):
    _, storage, _ = sample_run
    assert_gold_is_ground_truth(spark, storage)
    counts = datasets(storage)
    assert counts["bronze_shop"]["rows"] == len(lines_of(SAMPLE.read_bytes()))
    for table in KEYS:
        assert counts[f"gold_{table}"]["layer"] == "gold"
        assert counts[f"gold_{table}"]["scd_type"] == 1 and counts[f"gold_{table}_history"]["scd_type"] == 2


@shares_the_sample_run
def test_sample_typed_columns(spark, sample_run):
    _, storage, _ = sample_run
    [order] = [r for r in gold_rows(spark, storage, "orders") if r["order_id"] == 1001]
    assert isinstance(order["total"], decimal.Decimal) and isinstance(order["placed_at"], dt.datetime)
    [anne] = [r for r in gold_rows(spark, storage, "customers") if r["id"] == 1] or [None]
    if anne is not None:
        assert anne["born"] == dt.date(1971, 2, 2)


@shares_the_sample_run
def test_malformed_messages_are_quarantined_with_reasons(spark, sample_run):
    _, storage, _ = sample_run
    rows = read_rows(spark, storage, "silver_shop_quarantine")
    reasons = sorted(r["error"].split(":")[0] for r in rows)
    assert reasons == ["payload.op", "value", "value", "value"]
    refs = sorted(r["bronze_ref"] for r in rows)
    assert sum(ref.startswith("shop.inventory.customers/0/") for ref in refs) == 3
    assert sum(ref.startswith(f"{SAMPLE}:") for ref in refs) == 1  # not a Kafka record: file:line
    assert all("message_parsed" in r["failed_expectations"] for r in rows)
    silver = read_rows(spark, storage, "silver_shop")
    kinds = {k: sum(1 for r in silver if r["kind"] == k) for k in {r["kind"] for r in silver}}
    assert kinds["tombstone"] == sum(1 for r in silver if r["kind"] == "change" and r["op"] == "DELETE")
    # every bronze message is in exactly one place
    assert len(silver) + len(rows) == datasets(storage)["bronze_shop"]["rows"]


@shares_the_sample_run
def test_history_versions_follow_updates(spark, sample_run):
    _, storage, _ = sample_run
    history = gold_rows(spark, storage, "orders", 2)
    open_versions = [r for r in history if r["__END_AT"] is None]
    assert len(open_versions) == len(expected_state()["orders"])
    by_order: dict[int, list[dict]] = {}
    for row in history:
        by_order.setdefault(row["order_id"], []).append(row)
    for versions in by_order.values():
        versions.sort(key=lambda r: r["__START_AT"])
        for earlier, later in itertools.pairwise(versions):
            assert earlier["__END_AT"] == later["__START_AT"]
            assert earlier["status"] != later["status"]  # a version per tracked change


@shares_the_sample_run
def test_event_log_records_expectations(spark, sample_run):
    _, storage, _ = sample_run
    events = read_rows(spark, storage, "event_log")
    progress = [json.loads(e["details"])["flow_progress"] for e in events if e["event_type"] == "flow_progress"]
    silver = [
        p
        for p, e in zip(progress, [e for e in events if e["event_type"] == "flow_progress"], strict=True)
        if e["origin"]["dataset_name"] == "silver_shop"
    ]
    [quality] = [p["data_quality"] for p in silver]
    by_name = {x["name"]: x for x in quality["expectations"]}
    assert by_name["message_parsed"]["failed_records"] == 4
    assert by_name["message_parsed"]["passed_records"] + 4 == datasets(storage)["bronze_shop"]["rows"]
    assert quality["quarantined_records"] == 4
    assert {e["event_type"] for e in events} >= {"create_update", "flow_progress", "update_progress"}


@shares_the_sample_run
def test_rerun_changes_nothing_and_full_refresh_rebuilds(spark, sample_run):
    conf, storage, _ = sample_run
    before = row_counts(storage)
    run_pipeline(conf, spark=spark)
    assert row_counts(storage) == before
    run_pipeline(conf, spark=spark, full_refresh=True)
    assert row_counts(storage) == before
    assert_gold_is_ground_truth(spark, storage)


@pytest.mark.slow
def test_killed_between_commits_then_rerun(spark, tmp_path):
    """`run` SIGKILLed in gold, after a table's write and before its query's checkpoint commit,
    then run again (tests/test_crash_safety.py kills `ingest` at random points in every layer)."""
    storage = tmp_path / "storage"
    conf = write_conf(tmp_path, storage)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "CDC_MEDALLION_SPARK_CONF": INTERPRETED}
    # Quality checks come after the commits and are not what a kill tests.
    command = [sys.executable, "-m", "cdc_medallion.cli", "run", "--conf", str(conf), "--quiet", "--no-quality"]
    where = {"CDC_MEDALLION_KILL_WHERE": "after append to gold_", "CDC_MEDALLION_KILL_DELAY_MS": "300"}
    result = subprocess.run(command, env={**env, **where}, capture_output=True, text=True, timeout=600)
    assert result.returncode == -9, (result.stdout[-2000:], result.stderr[-2000:])
    assert "[fault injection] SIGKILL" in result.stdout and "(after append to gold_" in result.stdout
    run_pipeline(load_conf(conf), spark=spark)  # the next run: in this process, as any run
    assert_gold_is_ground_truth(spark, storage)
    counts = datasets(storage)
    assert counts["bronze_shop"]["rows"] == len(lines_of(SAMPLE.read_bytes()))
    assert counts["silver_shop_quarantine"]["rows"] == 4
    assert counts["silver_shop"]["rows"] + 4 == counts["bronze_shop"]["rows"]


# --- ordering --------------------------------------------------------------------------------
def pg(op: str, lsn: int, before: dict | None, after: dict | None, table: str = "items") -> str:
    source = {"connector": "postgresql", "db": "db", "schema": "public", "table": table, "lsn": lsn, "ts_ms": lsn}
    return json.dumps({"before": before, "after": after, "source": source, "op": op, "ts_ms": lsn})


def test_out_of_order_duplicated_and_late_events(spark, storage, tmp_path):
    source = tmp_path / "items.jsonl"
    first = [
        pg("c", 10, None, {"id": 1, "v": "a"}),
        pg("u", 30, {"id": 1, "v": "b"}, {"id": 1, "v": "c"}),
        pg("u", 20, {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),  # out of order within the batch
        pg("c", 5, None, {"id": 2, "v": "x"}),
        pg("d", 50, {"id": 2, "v": "y"}, None),
    ]
    source.write_text("\n".join(first) + "\n", encoding="utf-8")
    ingest(spark, "debezium-json", source, storage, keys={"items": "id"})
    with source.open("a", encoding="utf-8") as handle:  # a later run: redelivery and late events
        handle.write(first[1] + "\n")  # duplicate of lsn 30
        handle.write(pg("u", 40, {"id": 2, "v": "x"}, {"id": 2, "v": "y"}) + "\n")  # late, before the delete
        handle.write(pg("u", 25, {"id": 1, "v": "b"}, {"id": 1, "v": "b2"}) + "\n")  # late, inside history
    ingest(spark, "debezium-json", source, storage, keys={"items": "id"})

    assert {r["id"]: r["v"] for r in gold_rows(spark, storage, "items", 1)} == {1: "c"}  # 2 stays deleted
    history = sorted(gold_rows(spark, storage, "items", 2), key=lambda r: (r["id"], r["__START_AT"]))
    one = [(r["v"], r["__START_AT"][:24], (r["__END_AT"] or "")[:24]) for r in history if r["id"] == 1]
    assert one == [
        ("a", "lsn:00000000000000000010", "lsn:00000000000000000020"),
        ("b", "lsn:00000000000000000020", "lsn:00000000000000000025"),
        ("b2", "lsn:00000000000000000025", "lsn:00000000000000000030"),
        ("c", "lsn:00000000000000000030", ""),
    ]
    two = [(r["v"], r["__START_AT"][:24], (r["__END_AT"] or "")[:24]) for r in history if r["id"] == 2]
    assert two == [
        ("x", "lsn:00000000000000000005", "lsn:00000000000000000040"),
        ("y", "lsn:00000000000000000040", "lsn:00000000000000000050"),
    ]


def test_a_value_that_does_not_convert_is_quarantined_naming_column_value_and_type(spark, tmp_path):
    """The typed change feed: text converts to each column's type. A change with a value that does
    not is quarantined by `values_cast` (gold.yml) with the column, the value and the type; gold
    never holds a NULL the source did not have. A rule file can lower the rule to warn: the change
    is then applied with NULL there, and the event log still counts it."""
    source = tmp_path / "items.jsonl"
    rows = [
        pg("c", 10, None, {"id": 1, "v": "7", "flag": "yes", "blob": "aGk="}),
        pg("c", 11, None, {"id": 2, "v": "abc", "flag": "nope", "blob": "!!"}),
        pg("c", 12, None, {"id": 3, "v": "8", "flag": "no", "blob": None}),
    ]
    source.write_text("\n".join(rows) + "\n", encoding="utf-8")
    columns = {"items": "id:int,v:int,flag:boolean,blob:binary"}
    storage = tmp_path / "quarantined"
    ingest(spark, "debezium-json", source, storage, keys={"items": "id"}, columns=columns)

    got = {r["id"]: (r["v"], r["flag"], r["blob"]) for r in gold_rows(spark, storage, "items", 1)}
    assert got == {1: (7, True, bytearray(b"hi")), 3: (8, False, None)}
    [name] = [n for n, d in datasets(storage).items() if d["layer"] == "quarantine" and n.startswith("changes_")]
    [held_back] = read_rows(spark, storage, name)
    assert held_back["failed_expectations"] == ["values_cast"]
    assert held_back["__cast_errors"] == ["v: abc is not int", "flag: nope is not boolean", "blob: !! is not binary"]
    assert held_back["__bronze_ref"] == f"{source}:1"  # the second line (lines count from 0)
    assert expectation_counts(spark, storage, "gold_items")["values_cast"] == (2, 1)

    rules = tmp_path / "rules"
    rules.mkdir()
    lowered = (REPO / "expectations" / "gold.yml").read_text(encoding="utf-8")
    (rules / "gold.yml").write_text(lowered.replace("action: quarantine", "action: warn", 1), encoding="utf-8")
    storage = tmp_path / "warned"
    conf = dataclasses.replace(
        adhoc_conf(
            fmt="debezium-json",
            input_path=source,
            storage=storage,
            keys=["items=id"],
            columns=[f"items={columns['items']}"],
        ),
        expectations=rules,
    )
    run_pipeline(conf, spark=spark)
    got = {r["id"]: (r["v"], r["flag"], r["blob"]) for r in gold_rows(spark, storage, "items", 1)}
    assert got == {1: (7, True, bytearray(b"hi")), 2: (None, None, None), 3: (8, False, None)}
    assert expectation_counts(spark, storage, "gold_items")["values_cast"] == (2, 1)


def expectation_counts(spark, storage: Path, dataset: str) -> dict[str, tuple[int, int]]:
    [quality] = [
        json.loads(e["details"])["flow_progress"]["data_quality"]
        for e in read_rows(spark, storage, "event_log")
        if e["event_type"] == "flow_progress" and e["origin"]["dataset_name"] == dataset
    ]
    return {x["name"]: (x["passed_records"], x["failed_records"]) for x in quality["expectations"]}


@shares_the_sample_run
def test_same_input_in_different_batchings_gives_identical_gold(spark, sample_run, tmp_path):
    """The sample in several files and micro-batches gives the gold of the shared one-batch run."""
    conf, storage, _ = sample_run
    lines = lines_of(SAMPLE.read_text(encoding="utf-8"))
    pieces = tmp_path / "pieces"
    pieces.mkdir()
    for index in range(0, len(lines), 97):  # several files
        (pieces / f"part-{index:05d}.jsonl").write_text("\n".join(lines[index : index + 97]) + "\n", encoding="utf-8")
    [source] = conf.sources
    cut = dataclasses.replace(
        conf,
        storage=tmp_path / "b",
        sources=(source.model_copy(update={"input": source.input.model_copy(update={"path": pieces})}),),
        max_messages_per_batch=100,
    )
    summary = run_pipeline(cut, spark=spark)
    assert summary.updates[0].flows["bronze_shop"].batches == 3  # 292 messages, 100 per batch
    for table in KEYS:
        for scd in (1, 2):
            assert comparable(gold_rows(spark, storage, table, scd)) == comparable(
                gold_rows(spark, tmp_path / "b", table, scd)
            )


def comparable(rows: list[dict]) -> list[str]:
    """Rows without the sequence columns (landing positions differ between the two layouts)."""
    hidden = ("__START_AT", "__END_AT", "__sequence")
    return sorted(json.dumps({k: str(v) for k, v in r.items() if k not in hidden}, sort_keys=True) for r in rows)


def test_an_update_that_changes_the_key_moves_the_row(spark, storage, tmp_path):
    source = tmp_path / "moves.jsonl"
    lines = [pg("c", 10, None, {"id": 1, "v": "a"}), pg("u", 20, {"id": 1, "v": "a"}, {"id": 7, "v": "a"})]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ingest(spark, "debezium-json", source, storage, keys={"items": "id"})
    assert {r["id"]: r["v"] for r in gold_rows(spark, storage, "items", 1)} == {7: "a"}
    history = {
        (r["id"], r["__START_AT"][:24], (r["__END_AT"] or "")[:24]) for r in gold_rows(spark, storage, "items", 2)
    }
    assert history == {
        (1, "lsn:00000000000000000010", "lsn:00000000000000000020"),
        (7, "lsn:00000000000000000020", ""),
    }
