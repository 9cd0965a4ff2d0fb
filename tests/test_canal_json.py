"""Canal JSON: the DTS document's examples, the Flink / SeaTunnel fixtures end to end, the details."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from cdc_medallion.errors import ConfigError
from cdc_medallion.formats import get_format
from cdc_medallion.formats.canal_json import mysql_spark_type
from cdc_medallion.lines import lines_of
from tests.cdc_fixture_checks import (
    assert_gold_matches_changelog,
    assert_gold_matches_table,
    assert_same_fixture,
    check_inline_cases,
    seed_examples,
)
from tests.conftest import shared_path
from tests.helpers import datasets, gold_rows, ingest, load_expected, parse, read_rows

FAMILY = "canal-json"


# --- the seed's examples ----------------------------------------------------------------------
def test_seed_delete_before_2022_has_its_row_in_old():
    """Instances created before 2022-03-20: `data` absent, the deleted row in `old`."""
    [event] = parse(FAMILY, seed_examples()[3])
    assert (event["kind"], event["op"], event["source_db"], event["source_table"]) == (
        "change",
        "DELETE",
        "dbname",
        "tablename",
    )
    assert event["before"] == {"shipping_type": "aaa"} and event["after"] is None
    assert event["flags"] == ["delete_rows_in_old"]
    assert event["key_columns"] == ["id"]
    assert event["column_types"] == {"shipping_type": "string"}
    assert event["event_ts"] == dt.datetime(2020, 9, 15, 9, 24, 54, tzinfo=dt.UTC)
    assert event["sequence"].startswith("001600161894000:00000000000000000058|test.jsonl/")


def test_seed_delete_since_2022_has_its_row_in_data():
    [event] = parse(FAMILY, seed_examples()[4])
    assert (event["op"], event["before"], event["after"]) == (
        "DELETE",
        {"id": "500000287", "shipping_type": None},
        None,
    )
    assert event["flags"] is None
    assert event["column_types"] == {"id": "bigint", "shipping_type": "string"}
    assert event["source_types"] == {"id": "bigint", "shipping_type": "varchar"}


def test_seed_delete_convention_is_configurable_per_source():
    old_style, new_style = seed_examples()[3:5]
    [pinned] = parse(FAMILY, old_style, options={"delete_rows": "data"})
    assert pinned["kind"] == "error" and pinned["error"] == "data: DELETE without rows in `data` or `old`"
    [pinned] = parse(FAMILY, new_style, options={"delete_rows": "old"})
    assert pinned["error"] == "old: DELETE without rows in `old` (option delete_rows=old)"
    with pytest.raises(ConfigError, match=r"key 'options\.delete_rows': must be one of auto, data, old, got 'both'"):
        get_format(FAMILY)("s", {"delete_rows": "both"})


def test_seed_ddl_example_with_comments_is_quarantined_and_means_a_schema_change():
    example = seed_examples()[5]
    [event] = parse(FAMILY, example)
    assert event["kind"] == "error" and event["error"].startswith("value: not valid JSON")
    assert event["raw_message"] == example
    repaired = "\n".join(line.split(" //")[0] for line in example.splitlines())  # the only edit
    [ddl] = parse(FAMILY, repaired)
    assert (ddl["kind"], ddl["op"], ddl["detail"], ddl["source_table"]) == (
        "schema_change",
        "DDL",
        "eg:createxxx",
        "tablename",
    )


# --- the shared fixtures end to end -------------------------------------------------------------
FIXTURES = [
    ("apache_flink__canal-data.txt", "products2"),
    ("apache_flink__canal-data-with-init.txt", "products2"),
    ("apache_flink__canal-data-filter-table.txt", "product"),
]


@pytest.mark.parametrize(("name", "table"), FIXTURES)
def test_fixture_gold_matches_expected_changelog(spark, storage, name, table):
    path = shared_path("fixtures", FAMILY, name)
    ingest(spark, FAMILY, path, storage, keys={table: "id"})
    assert_gold_matches_changelog(spark, storage, table, load_expected(path)["expected_rows"])
    tables = datasets(storage)
    assert tables["bronze_canal_json"]["rows"] == len(lines_of(path.read_text(encoding="utf-8")))
    assert "silver_canal_json_quarantine" not in tables  # nothing quarantined: no table
    ddl = [r for r in read_rows(spark, storage, "silver_schema_changes") if r["source_format"] == FAMILY]
    assert ddl and all(r["detail"].startswith("CREATE TABLE") for r in ddl)
    if name.endswith("with-init.txt"):  # INIT is the full load: snapshot rows
        silver = read_rows(spark, storage, "silver_canal_json")
        assert {r["op"] for r in silver if r["sequence"].startswith("001589373515000")} == {"SNAPSHOT"}


def test_seatunnel_filter_table_fixture_is_flinks():
    assert_same_fixture(
        shared_path("fixtures", FAMILY, "apache_flink__canal-data-filter-table.txt"),
        shared_path("fixtures", FAMILY, "apache_seatunnel__canal-data-filter-table.txt"),
    )


def test_seatunnel_e2e_fixture_matches_the_sink_table(spark, storage):
    """Seven messages of one `es` and mostly one `id`: order falls to the landing position."""
    path = shared_path("fixtures", FAMILY, "apache_seatunnel__e2e__canal_data.txt")
    ingest(spark, FAMILY, path, storage)  # pkNames keys the table
    expected = load_expected(path)["expected"]["postgres_table_rows_order_by_id"]
    assert_gold_matches_table(spark, storage, "products", expected)
    history = {(r["id"], r["weight"]) for r in gold_rows(spark, storage, "products", 2)}
    assert {(1101, "3.14"), (1101, "4.56"), (1107, "5.3"), (1107, "7.88"), (1109, "22.2")} <= history
    landed = sorted(read_rows(spark, storage, "silver_schema_changes"), key=lambda r: r["sequence"])
    schema_changes = [r["detail"] for r in landed]  # in landing order: silver rows have no order of their own
    assert len(schema_changes) == 3 and schema_changes[0].startswith("CREATE DATABASE")


@pytest.mark.parametrize("origin", ["apache_flink", "apache_seatunnel"])
def test_inline_cases(origin):
    assert check_inline_cases(FAMILY, FAMILY, origin, options={"table": "products"}) >= 5


def test_missing_data_is_named():
    [event] = parse(FAMILY, '{"type":"INSERT"}', options={"table": "products"})
    assert event["error"] == "data: INSERT without rows in `data`"


# --- details ----------------------------------------------------------------------------------
def message(**fields):
    base = {"database": "db", "table": "t", "es": 1600000000000, "id": 7, "isDdl": False, "pkNames": ["id"]}
    return json.dumps({**base, **fields})


def test_multi_row_update_pairs_old_with_its_row():
    raw = message(
        type="UPDATE",
        data=[{"id": "1", "a": "x", "b": "2"}, {"id": "2", "a": "y", "b": "3"}],
        old=[{"b": "1"}, {"a": "w"}],
        mysqlType={"id": "bigint(20)", "a": "varchar(8)", "b": "int(10) unsigned"},
    )
    first, second = parse(FAMILY, raw)
    assert first["before"] == {"id": "1", "a": "x", "b": "1"} and first["changed_columns"] == ["b"]
    assert second["before"] == {"id": "2", "a": "w", "b": "3"} and second["changed_columns"] == ["a"]
    assert first["column_types"] == {"id": "bigint", "a": "string", "b": "bigint"}
    assert first["sequence"] < second["sequence"]
    assert first["sequence"].endswith("|000000") and second["sequence"].endswith("|000001")


def test_old_must_align_with_data():
    raw = message(type="UPDATE", data=[{"id": "1"}, {"id": "2"}], old=[{"id": "0"}])
    [event] = parse(FAMILY, raw)
    assert event["error"] == "old: 1 entries for 2 rows in `data`"


def test_binary_columns_arrive_as_latin1_text():
    raw = message(type="INSERT", data=[{"id": "1", "blob": "\u00ff\u0000a"}], mysqlType={"id": "int", "blob": "blob"})
    [event] = parse(FAMILY, raw)
    assert event["after"]["blob"] == "/wBh" and event["column_types"]["blob"] == "binary"
    [bad] = parse(FAMILY, message(type="INSERT", data=[{"id": "1", "blob": "€"}], mysqlType={"blob": "blob"}))
    assert bad["error"].startswith("data[0].blob: binary value is not ISO-8859-1")


def test_ddl_truncate_empties_the_table_and_other_ddl_is_a_schema_change():
    [truncate] = parse(FAMILY, message(type="TRUNCATE", isDdl=True, sql="TRUNCATE TABLE t", data=None))
    assert (truncate["kind"], truncate["op"], truncate["source_table"], truncate["detail"]) == (
        "change",
        "TRUNCATE",
        "t",
        "TRUNCATE TABLE t",
    )
    [alter] = parse(FAMILY, message(type="ALTER", isDdl=True, sql="ALTER TABLE t ADD c INT", data=None))
    assert (alter["kind"], alter["flags"]) == ("schema_change", ["canal_type:ALTER"])


def test_jdbc_types_type_columns_without_mysql_types():
    [event] = parse(
        FAMILY, message(type="INSERT", data=[{"id": "1", "at": "2020-01-01 00:00:00"}], sqlType={"id": -5, "at": 93})
    )
    assert event["column_types"] == {"id": "bigint", "at": "timestamp"}
    assert event["source_types"] == {"id": "jdbc:-5", "at": "jdbc:93"}


@pytest.mark.parametrize(
    ("mysql", "spark"),
    [
        ("INTEGER", "int"),
        ("int(11)", "int"),
        ("int(10) unsigned", "bigint"),
        ("bigint(20) unsigned zerofill", "decimal(20,0)"),
        ("tinyint(1)", "tinyint"),
        ("bit(1)", "boolean"),
        ("bit(8)", "bigint"),
        ("decimal(10,2)", "decimal(10,2)"),
        ("FLOAT", "float"),
        ("double(10,2)", "double"),
        ("VARCHAR(255)", "string"),
        ("enum('a','b')", "string"),
        ("datetime(3)", "timestamp"),
        ("date", "date"),
        ("year", "int"),
        ("mediumblob", "binary"),
        ("varbinary(16)", "binary"),
        ("json", "string"),
        ("point", "binary"),  # spatial types are their WKB bytes
        ("enum('a','b')", "string"),
    ],
)
def test_mysql_types(mysql, spark):
    assert mysql_spark_type(mysql) == spark
