"""Maxwell JSON: the Flink / SeaTunnel fixtures end to end, then the format's details."""

from __future__ import annotations

import json

from cdc_medallion.lines import lines_of
from tests.cdc_fixture_checks import (
    assert_gold_matches_changelog,
    assert_gold_matches_table,
    assert_same_fixture,
    check_inline_cases,
)
from tests.conftest import shared_path
from tests.helpers import datasets, ingest, load_expected, parse

FAMILY = "maxwell-json"


def test_flink_fixture_gold_matches_expected_changelog(spark, storage):
    path = shared_path("fixtures", FAMILY, "apache_flink__maxwell-data.txt")
    ingest(spark, FAMILY, path, storage, keys={"product": "id"})
    assert_gold_matches_changelog(spark, storage, "product", load_expected(path)["expected_rows"])
    assert datasets(storage)["bronze_maxwell_json"]["rows"] == 20
    assert "silver_maxwell_json_quarantine" not in datasets(storage)  # nothing quarantined


def test_seatunnel_filter_table_fixture_is_flinks():
    assert_same_fixture(
        shared_path("fixtures", FAMILY, "apache_flink__maxwell-data.txt"),
        shared_path("fixtures", FAMILY, "apache_seatunnel__maxwell-data-filter-table.txt"),
    )


def test_seatunnel_e2e_fixture_matches_the_sink_table(spark, storage):
    """No primary_key_columns in these messages: the key comes from conf, as SeaTunnel's sink has it."""
    path = shared_path("fixtures", FAMILY, "apache_seatunnel__e2e__maxwell_data.txt")
    ingest(spark, FAMILY, path, storage, keys={"products": "id"})
    expected = load_expected(path)["expected"]["postgres_table_rows_order_by_id"]
    assert_gold_matches_table(spark, storage, "products", expected)


def test_inline_cases():
    assert check_inline_cases(FAMILY, FAMILY, "apache_flink", options={"table": "products"}) == 3


# --- details ----------------------------------------------------------------------------------
def lines() -> list[str]:
    return lines_of(shared_path("fixtures", FAMILY, "apache_flink__maxwell-data.txt").read_text(encoding="utf-8"))


def test_update_before_image_is_data_with_old_values():
    [event] = parse(FAMILY, lines()[9])
    assert event["op"] == "UPDATE" and event["key_columns"] == ["id"]
    assert event["before"]["description"] == "16oz carpenter's hammer"
    assert event["after"]["description"] == "18oz carpenter hammer"
    assert event["changed_columns"] == ["description"]
    assert event["column_types"] == {"id": "bigint", "name": "string", "description": "string", "weight": "double"}
    assert (event["tx_id"], event["tx_last"]) == ("7152", True)


def test_transaction_order_puts_the_commit_row_last():
    events = [parse(FAMILY, line, line=i)[0] for i, line in enumerate(lines()[:9])]
    assert [e["tx_seq"] for e in events] == [0, 1, 2, 3, 4, 5, 6, 7, None]
    assert events[-1]["tx_last"] is True
    assert sorted(e["sequence"] for e in events) == [e["sequence"] for e in events]
    # the same rows landed in reverse order still sort by xoffset, commit last
    reverse = [parse(FAMILY, line, line=100 - i)[0]["sequence"] for i, line in enumerate(lines()[:9])]
    assert sorted(reverse) == reverse


def test_delete_and_bootstrap_and_ddl():
    [delete] = parse(FAMILY, lines()[15])
    assert delete["op"] == "DELETE" and delete["before"]["id"] == "111" and delete["after"] is None
    bootstrap = {"database": "test", "table": "product", "type": "bootstrap-insert", "ts": 1, "data": {"id": 1}}
    [snapshot] = parse(FAMILY, json.dumps(bootstrap))
    assert snapshot["op"] == "SNAPSHOT"
    [start] = parse(FAMILY, json.dumps({"database": "test", "table": "product", "type": "bootstrap-start", "ts": 1}))
    assert (start["kind"], start["op"]) == ("message", "BOOTSTRAP-START")
    ddl = {"type": "table-alter", "database": "test", "table": "product", "sql": "ALTER TABLE product ADD x INT"}
    [schema] = parse(FAMILY, json.dumps(ddl))
    assert (schema["kind"], schema["detail"], schema["flags"]) == (
        "schema_change",
        "ALTER TABLE product ADD x INT",
        ["table-alter"],
    )


def test_key_from_the_kafka_key_maxwell_writes():
    raw = '{"database":"test","table":"product","type":"insert","ts":1,"data":{"id":7,"sku":"a"}}'
    [event] = parse(FAMILY, raw, key='{"database":"test","table":"product","pk.id":7}')
    assert event["key_columns"] == ["id"]


def test_errors_name_what_is_wrong():
    assert parse(FAMILY, '{"database":"d","table":"t"}')[0]["error"] == "type: missing: not a Maxwell message"
    assert "unknown operation type 'upsert'" in parse(FAMILY, '{"type":"upsert","table":"t","data":{}}')[0]["error"]
    assert parse(FAMILY, '{"type":"insert","table":"t"}')[0]["error"] == "data: insert without a `data` row"
    assert parse(FAMILY, '{"type":"insert","data":{"id":1}}')[0]["error"].startswith("table: missing")
    assert [e["kind"] for e in parse(FAMILY, None)] == ["tombstone"]
