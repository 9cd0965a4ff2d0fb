"""Oracle GoldenGate JSON: the Flink / SeaTunnel fixtures end to end, then the format's details."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from cdc_medallion.lines import lines_of
from tests.cdc_fixture_checks import (
    assert_gold_matches_changelog,
    assert_gold_matches_table,
    assert_same_fixture,
    check_inline_cases,
)
from tests.conftest import shared_path
from tests.helpers import datasets, gold_rows, ingest, load_expected, parse

FAMILY = "ogg-json"


def fixture_lines() -> list[str]:
    return lines_of(shared_path("fixtures", FAMILY, "apache_flink__ogg-data.txt").read_text(encoding="utf-8"))


def test_flink_fixture_gold_matches_expected_changelog(spark, storage):
    path = shared_path("fixtures", FAMILY, "apache_flink__ogg-data.txt")
    ingest(spark, FAMILY, path, storage, keys={"TBL_TEST": "id"})
    assert_gold_matches_changelog(spark, storage, "TBL_TEST", load_expected(path)["expected_rows"])
    assert "silver_ogg_json_quarantine" not in datasets(storage)  # nothing quarantined
    # the message carrying an unrelated Debezium `source` object is an ordinary insert
    assert {r["id"] for r in gold_rows(spark, storage, "TBL_TEST", 1)} >= {110}


def test_seatunnel_filter_table_fixture_is_flinks():
    assert_same_fixture(
        shared_path("fixtures", FAMILY, "apache_flink__ogg-data.txt"),
        shared_path("fixtures", FAMILY, "apache_seatunnel__ogg-data-filter-table.txt"),
    )


def test_seatunnel_e2e_fixture_matches_the_sink_table(spark, storage):
    path = shared_path("fixtures", FAMILY, "apache_seatunnel__e2e__ogg_data.txt")
    ingest(spark, FAMILY, path, storage)  # primary_keys keys the table
    expected = load_expected(path)["expected"]["postgres_table_rows_order_by_id"]
    assert_gold_matches_table(spark, storage, "OGG_TEST", expected)


@pytest.mark.parametrize("origin", ["apache_flink", "apache_seatunnel"])
def test_inline_cases(origin):
    assert check_inline_cases(FAMILY, FAMILY, origin) >= 2


# --- details ----------------------------------------------------------------------------------
def test_insert_names_schema_table_key_and_commit_time():
    [event] = parse(FAMILY, fixture_lines()[0])
    assert (event["source_schema"], event["source_table"], event["key_columns"]) == ("OGG", "TBL_TEST", ["id"])
    assert event["after"]["weight"] == "3.140000104904175"
    assert event["column_types"] == {"id": "bigint", "name": "string", "description": "string", "weight": "double"}
    assert event["event_ts"] == dt.datetime(2020, 5, 13, 15, 40, 6, tzinfo=dt.UTC)
    assert event["sequence"].startswith("000000000000000000000000000143|")


def test_order_is_the_trail_position_not_op_ts():
    """pos 157 was committed (op_ts) before pos 156 in the fixture; the trail order wins."""
    lines = fixture_lines()
    [p156] = parse(FAMILY, lines[13], line=13)
    [p157] = parse(FAMILY, lines[14], line=14)
    assert p157["event_ts"] < p156["event_ts"]
    assert p156["sequence"] < p157["sequence"]


def test_update_and_delete_images():
    lines = fixture_lines()
    [update] = parse(FAMILY, lines[9])
    assert update["op"] == "UPDATE" and update["changed_columns"] == ["description"]
    [delete] = parse(FAMILY, lines[15])
    assert delete["op"] == "DELETE" and delete["after"] is None and delete["before"]["id"] == "111"


def test_compressed_update_and_missing_images():
    compressed = {"table": "S.T", "op_type": "U", "pos": "1", "after": {"id": 1, "qty": 2}}
    [update] = parse(FAMILY, json.dumps(compressed))
    assert update["after"] == {"id": "1", "qty": "2"} and update["flags"] == ["before_image_missing"]
    [delete] = parse(FAMILY, json.dumps({"table": "S.T", "op_type": "D", "pos": "2"}))
    assert delete["kind"] == "error" and "COMPRESSDELETES" in delete["error"]
    [truncate] = parse(FAMILY, json.dumps({"table": "S.T", "op_type": "T", "pos": "3"}))
    assert (truncate["op"], truncate["source_table"]) == ("TRUNCATE", "T")
    assert parse(FAMILY, '{"op_type":"U"}')[0]["error"] == "after: UPDATE without an 'after' image"
    assert parse(FAMILY, "{}")[0]["error"] == "op_type: missing: not a GoldenGate JSON message"
