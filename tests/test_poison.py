"""No message stops the pipeline: names like ours, unreadable order keys, wrong JSON shapes, empty
messages, and a flow that fails while the others go on."""

from __future__ import annotations

import base64
import dataclasses
import decimal
import json

import pytest

from cdc_medallion.adhoc import adhoc_conf
from cdc_medallion.errors import ExpectationFailed
from cdc_medallion.identifiers import gold_column, source_column
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.report import report_for_storage
from tests.helpers import datasets, gold_rows, parse, read_rows


def canal(table: str, op: str, rows: list[dict], es: object = 1, types: dict | None = None, **extra) -> str:
    document = {
        "data": rows,
        "database": "shop",
        "table": table,
        "pkNames": ["id"],
        "isDdl": False,
        "type": op,
        "es": es,
        "id": 1,
        "ts": 1,
        "mysqlType": types or {c: "varchar(20)" for c in rows[0]},
        "old": None,
        **extra,
    }
    return json.dumps(document)


# --- 1. bookkeeping names ------------------------------------------------------------------------
def test_the_escape_of_source_columns_is_reversible_and_never_ours():
    ours = ["__sequence", "__START_AT", "__END_AT", "__op", "__sequence_by", "__present", "__cast_errors"]
    for name in [*ours, "_x", "___y", "id", "__", "____z"]:
        assert source_column(gold_column(name)) == name
        assert gold_column(name) not in ours


def test_source_columns_named_like_gold_bookkeeping_arrive_escaped(spark, tmp_path, capsys):
    """MySQL allows a column `__START_AT`; Canal passes it through. Gold stores it as `___START_AT`
    beside its own `__START_AT`, and creating the tables must not fail. (And `--key` naming a
    table the data does not have is a warning that names the tables it has.)"""
    feed = tmp_path / "canal.jsonl"
    types = {"id": "int", "__sequence": "varchar(9)", "__START_AT": "varchar(9)", "__op": "varchar(9)"}
    first = {"id": "1", "__sequence": "s1", "__START_AT": "a1", "__op": "o1"}
    second = {**first, "__sequence": "s2", "__START_AT": "a2"}
    feed.write_text(
        canal("t", "INSERT", [first], es=1, types=types)
        + "\n"
        + canal("t", "UPDATE", [second], es=2, types=types)
        + "\n",
        encoding="utf-8",
    )
    storage = tmp_path / "storage"
    conf = adhoc_conf(fmt="canal-json", input_path=feed, storage=storage, keys=["nosuch=id"], columns=[])
    run_pipeline(conf, spark=spark)
    warning = "table canal_json:nosuch is configured but no message names it; tables seen: canal_json:shop.t"
    assert warning in capsys.readouterr().err
    [current] = gold_rows(spark, storage, "t", 1)
    assert (current["id"], current["___sequence"], current["___START_AT"], current["___op"]) == (1, "s2", "a2", "o1")
    assert current["__sequence"].startswith("000000000000002:")  # ours: the change's order
    history = sorted(gold_rows(spark, storage, "t", 2), key=lambda r: r["__START_AT"])
    assert [r["___START_AT"] for r in history] == ["a1", "a2"]
    assert [r["__END_AT"] is None for r in history] == [False, True]


# --- 3. order keys that cannot be read ---------------------------------------------------------------
UNREADABLE_ORDER = [
    ("canal-json", canal("t", "INSERT", [{"id": "1"}], es="soon"), "es"),
    (
        "maxwell-json",
        json.dumps({"database": "d", "table": "t", "type": "insert", "ts": 1, "xid": "x1", "data": {"id": 1}}),
        "xid",
    ),
    (
        "shareplex-json",
        json.dumps({"meta": {"op": "ins", "table": "O.T", "scn": "12a"}, "data": {"ID": "1"}}),
        "meta.scn",
    ),
    ("ogg-json", json.dumps({"table": "S.T", "op_type": "I", "pos": "later", "after": {"ID": 1}}), "pos"),
    (
        "debezium-json",
        json.dumps({"payload": {"op": "c", "after": {"id": 1}, "source": {"table": "t", "lsn": "0/16B3748"}}}),
        "source.lsn",
    ),
    (
        "aws-dms-json",
        json.dumps(
            {
                "data": {"id": 1},
                "metadata": {
                    "record-type": "data",
                    "operation": "insert",
                    "schema-name": "s",
                    "table-name": "t",
                    "timestamp": "2020-01-01T00:00:00.000000Z",
                    "transaction-record-id": "first",
                },
            }
        ),
        "metadata.transaction-record-id",
    ),
]


@pytest.mark.parametrize(("fmt", "message", "field"), UNREADABLE_ORDER, ids=[c[0] for c in UNREADABLE_ORDER])
def test_an_order_key_present_but_unreadable_is_quarantined_naming_it(fmt, message, field):
    options = {"order_by": "timestamp"} if fmt == "aws-dms-json" else None  # else it orders by landing
    [event] = parse(fmt, message, options=options)
    assert event["kind"] == "error", event
    assert event["error"].startswith(f"{field}: present but not a whole number"), event["error"]


def test_an_absent_order_key_is_still_applied_and_flagged():
    """Absent is not unreadable: SharePlex without an scn orders by time and says so."""
    [event] = parse("shareplex-json", json.dumps({"meta": {"op": "ins", "table": "O.T"}, "data": {"ID": "1"}}))
    assert event["kind"] == "change" and event["flags"] == ["scn_missing"]


# --- 4. wrong JSON shapes ------------------------------------------------------------------------------
def test_canal_data_given_as_an_object_is_quarantined():
    document = json.loads(canal("t", "INSERT", [{"id": "1"}]))
    document["data"] = {"id": "1"}
    [event] = parse("canal-json", json.dumps(document))
    assert event["kind"] == "error"
    assert event["error"] == "data: expected an array of rows, got an object"


# --- 5. legal values that must arrive ------------------------------------------------------------------
def test_decimals_wider_than_spark_stay_exact_and_fixed_is_decimal():
    wide = "1234567890123456789012345678901234567.123"  # DECIMAL(40,3): more digits than Spark's 38
    types = {"id": "int", "d": "decimal(40,3)", "f": "fixed(10,2)"}
    [event] = parse("canal-json", canal("t", "INSERT", [{"id": "1", "d": wide, "f": "12.50"}], types=types))
    assert (event["column_types"]["d"], event["after"]["d"]) == ("string", wide)
    assert (event["column_types"]["f"], event["source_types"]["f"]) == ("decimal(10,2)", "fixed(10,2)")


def test_enum_and_set_reach_gold_as_labels_from_the_type_definition():
    """The binlog stores an ENUM's index and a SET's bitmask; a writer that passes them on gets
    the labels from `mysqlType`. Labels stay labels, even labels that are digits."""
    types = {"id": "int", "e": "enum('small','it''s big')", "s": "set('a','b','c')", "d": "enum('1','2')"}
    rows = [
        {"id": "1", "e": "2", "s": "5", "d": "2"},
        {"id": "2", "e": "small", "s": "a,c", "d": "1"},
        {"id": "3", "e": "0", "s": "0", "d": "1"},
    ]
    events = parse("canal-json", canal("t", "INSERT", rows, types=types))
    assert [(e["after"]["e"], e["after"]["s"], e["after"]["d"]) for e in events] == [
        ("it's big", "a,c", "2"),
        ("small", "a,c", "1"),
        ("", "", "1"),
    ]
    [bad] = parse("canal-json", canal("t", "INSERT", [{"id": "4", "e": "3"}], types=types))
    assert bad["kind"] == "error" and bad["error"].startswith("data[0].e: ENUM index 3 is outside the 2 labels")


def test_column_names_legal_in_the_source_arrive_in_gold(spark, tmp_path):
    """MySQL allows `first name`, `a;b`, `a.b`, `größe (cm)`; Canal passes them through. Gold
    keeps them as they are (Delta column mapping), the current state and the history alike, also
    when such a column first appears in a later run. (A backtick is the one character kept out:
    Delta's change data feed fails a MERGE into a table with such a column.)"""
    feed = tmp_path / "canal.jsonl"
    types = {"id": "int", "first name": "varchar(9)", "a;b": "int", "a.b": "varchar(9)"}
    row = {"id": "1", "first name": "Ada", "a;b": "7", "a.b": "dot"}
    feed.write_text(canal("t", "INSERT", [row], es=1, types=types) + "\n", encoding="utf-8")
    storage = tmp_path / "storage"
    conf = adhoc_conf(fmt="canal-json", input_path=feed, storage=storage, keys=[], columns=[])
    run_pipeline(conf, spark=spark)
    later = {**row, "first name": "Grace", "größe (cm)": "180"}
    with feed.open("a", encoding="utf-8") as handle:
        handle.write(canal("t", "UPDATE", [later], es=2, types={**types, "größe (cm)": "int"}) + "\n")
    run_pipeline(conf, spark=spark)
    [current] = gold_rows(spark, storage, "t", 1)
    assert {k: v for k, v in current.items() if not k.startswith("__")} == {
        "id": 1,
        "first name": "Grace",
        "a;b": 7,
        "a.b": "dot",
        "größe (cm)": 180,
    }
    history = sorted(gold_rows(spark, storage, "t", 2), key=lambda r: r["__START_AT"])
    assert [(r["first name"], r["größe (cm)"]) for r in history] == [("Ada", None), ("Grace", 180)]
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{storage / 'gold_t'}`").first()["properties"]
    assert properties["delta.columnMapping.mode"] == "name"


# --- 8. empty messages ---------------------------------------------------------------------------------
JSON_FORMATS = ["aws-dms-json", "canal-json", "debezium-json", "maxwell-json", "ogg-json", "shareplex-json"]


@pytest.mark.parametrize("fmt", [*JSON_FORMATS, "dts-avro", "ibm-qrep-delimited", "qlik-json", "dataworks-json"])
def test_an_empty_message_is_quarantined_in_every_format(fmt):
    for empty in ("", "  \n") if fmt != "dts-avro" else ("",):  # Avro is binary: blanks are bytes
        [event] = parse(fmt, empty)
        assert event["kind"] == "error" and "empty message" in event["error"], (fmt, event)


@pytest.mark.parametrize("fmt", [*JSON_FORMATS, "dts-avro", "ibm-qrep-delimited", "qlik-json", "dataworks-json"])
def test_a_null_value_is_a_tombstone(fmt):
    assert [e["kind"] for e in parse(fmt, None)] == ["tombstone"]


# --- 9. a failing flow does not stop the others --------------------------------------------------------
def test_a_failing_flow_stops_neither_the_other_tables_nor_later_runs(spark, tmp_path):
    """Four tables; an `expect_or_fail` rule fails the one with a delete. The three others reach
    gold in the same run, the run ends with one line naming the failed flow (exit 3), the event
    log records it, and the next run brings the others' new changes in as well."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "gold.yml").write_text(
        "rules:\n  - name: no_deletes\n    constraint: \"__op <> 'DELETE'\"\n    action: fail\n", encoding="utf-8"
    )
    feed = tmp_path / "canal.jsonl"
    lines = [canal(t, "INSERT", [{"id": "1", "v": "a"}], es=1) for t in ("a", "b", "c", "d")]
    lines.append(canal("d", "DELETE", [{"id": "1", "v": "a"}], es=2))
    feed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    storage = tmp_path / "storage"
    conf = dataclasses.replace(
        adhoc_conf(fmt="canal-json", input_path=feed, storage=storage, keys=[], columns=[]), expectations=rules
    )
    with pytest.raises(ExpectationFailed, match="no_deletes"):
        run_pipeline(conf, spark=spark)
    for table in ("a", "b", "c"):
        assert [(r["id"], r["v"]) for r in gold_rows(spark, storage, table, 1)] == [("1", "a")]
    failed = [
        e
        for e in read_rows(spark, storage, "event_log")
        if e["event_type"] == "flow_progress" and e["level"] == "ERROR"
    ]
    assert {e["origin"]["flow_name"] for e in failed} == {"gold_d", "gold_d_history"}
    assert all(json.loads(e["details"])["flow_progress"]["status"] == "FAILED" for e in failed)
    index = report_for_storage(storage, tmp_path / "report", spark=spark).read_text(encoding="utf-8")
    assert '<td class="failed-flows bad">gold_d, gold_d_history</td>' in index  # the report names them

    with feed.open("a", encoding="utf-8") as handle:
        handle.write(canal("a", "UPDATE", [{"id": "1", "v": "b"}], es=3) + "\n")
    with pytest.raises(ExpectationFailed):
        run_pipeline(conf, spark=spark)
    assert [(r["id"], r["v"]) for r in gold_rows(spark, storage, "a", 1)] == [("1", "b")]


# --- 2. types widen -------------------------------------------------------------------------------------
def test_columns_widen_across_runs_and_keep_every_value(spark, tmp_path):
    """`ALTER TABLE t MODIFY v BIGINT` (and FLOAT -> DOUBLE, DECIMAL(10,2) -> DECIMAL(20,4)) between
    two runs: the new values use the wider range, and gold keeps old and new in the wider type."""
    feed = tmp_path / "canal.jsonl"
    narrow = {"id": "int", "v": "int", "f": "float", "d": "decimal(10,2)"}
    wide = {"id": "int", "v": "bigint", "f": "double", "d": "decimal(20,4)"}
    feed.write_text(
        canal("t", "INSERT", [{"id": "1", "v": "7", "f": "1.5", "d": "12345678.91"}], es=1, types=narrow) + "\n",
        encoding="utf-8",
    )
    storage = tmp_path / "storage"
    conf = adhoc_conf(fmt="canal-json", input_path=feed, storage=storage, keys=[], columns=[])
    run_pipeline(conf, spark=spark)
    ddl = {"data": None, "database": "shop", "table": "t", "isDdl": True, "type": "ALTER", "es": 2, "id": 2}
    ddl["sql"] = "ALTER TABLE t MODIFY v BIGINT, MODIFY f DOUBLE, MODIFY d DECIMAL(20,4)"
    big = {"id": "2", "v": "3000000000", "f": "1.0E300", "d": "1234567890123456.1234"}
    with feed.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(ddl) + "\n" + canal("t", "INSERT", [big], es=3, types=wide) + "\n")
    run_pipeline(conf, spark=spark)
    for scd in (1, 2):
        rows = {r["id"]: (r["v"], r["f"], str(r["d"])) for r in gold_rows(spark, storage, "t", scd)}
        assert rows == {1: (7, 1.5, "12345678.9100"), 2: (3000000000, 1.0e300, "1234567890123456.1234")}
    types = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(str(storage / "gold_t")).schema}
    assert (types["v"], types["f"], types["d"]) == ("bigint", "double", "decimal(20,4)")


def test_one_table_mixing_int32_and_int64_is_bigint_not_text(spark, tmp_path):
    feed = tmp_path / "canal.jsonl"
    lines = [
        canal("t", "INSERT", [{"id": "1", "v": "7"}], es=1, types={"id": "int", "v": "int"}),
        canal("t", "INSERT", [{"id": "2", "v": "3000000000"}], es=2, types={"id": "int", "v": "bigint"}),
    ]
    feed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    storage = tmp_path / "storage"
    run_pipeline(adhoc_conf(fmt="canal-json", input_path=feed, storage=storage, keys=[], columns=[]), spark=spark)
    assert sorted((r["id"], r["v"]) for r in gold_rows(spark, storage, "t", 1)) == [(1, 7), (2, 3000000000)]


# --- isolation over runs ----------------------------------------------------------------------------
def test_a_poison_table_never_blocks_the_others_over_three_runs(spark, tmp_path):
    """Each run brings valid changes to three tables and poison to a fourth: a value past its
    declared type, then an unreadable order key, then a column widened past int32. The valid
    changes reach gold in the run that brings them; each poison message is quarantined once, with
    its reason, and never fed again; no run fails."""
    feed = tmp_path / "canal.jsonl"
    storage = tmp_path / "storage"
    feed.touch()
    conf = adhoc_conf(fmt="canal-json", input_path=feed, storage=storage, keys=[], columns=[])
    int_types = {"id": "int", "v": "int"}
    poison = [
        canal("bad", "INSERT", [{"id": "1", "v": "not a number"}], es=1, types=int_types),
        canal("bad", "INSERT", [{"id": "2", "v": "5"}], es="later", types=int_types),
        canal("bad", "INSERT", [{"id": "3", "v": "3000000000"}], es=3, types={"id": "int", "v": "bigint"}),
    ]
    for run, bad in enumerate(poison, start=1):
        lines = [canal(t, "INSERT" if run == 1 else "UPDATE", [{"id": "1", "v": f"{t}{run}"}], es=run) for t in "abc"]
        with feed.open("a", encoding="utf-8") as handle:
            handle.write("\n".join([bad, *lines]) + "\n")
        run_pipeline(conf, spark=spark)
        for table in "abc":
            assert [(r["id"], r["v"]) for r in gold_rows(spark, storage, table, 1)] == [("1", f"{table}{run}")]
    reasons = sorted(
        row["__cast_errors"][0] if "__cast_errors" in row else row["error"]
        for name, status in datasets(storage).items()
        if status["layer"] == "quarantine"
        for row in read_rows(spark, storage, name)
    )
    assert reasons == [
        "es: present but not a whole number ('later'): the change cannot be ordered",
        "v: not a number is not int",
    ]
    assert sorted((r["id"], r["v"]) for r in gold_rows(spark, storage, "bad", 1)) == [(3, 3000000000)]


def debezium(lsn: int, row: dict, types: dict[str, dict]) -> str:
    """A Debezium envelope with its schema (PostgreSQL connector): `types` gives each column's
    Connect schema, as `ALTER TABLE ... TYPE` changes it."""
    columns = [{"field": name, "optional": name != "id", **schema} for name, schema in types.items()]
    row_schema = {"type": "struct", "fields": columns, "optional": True, "name": "db.public.t.Value"}
    schema = {
        "type": "struct",
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            {"type": "string", "field": "op"},
        ],
    }
    source = {"connector": "postgresql", "db": "db", "schema": "public", "table": "t", "lsn": lsn}
    return json.dumps({"schema": schema, "payload": {"op": "c", "before": None, "after": row, "source": source}})


def connect_decimal(value: str, scale: int) -> str:
    """Kafka Connect Decimal: the unscaled value as big-endian two's complement, base64."""
    unscaled = int(decimal.Decimal(value).scaleb(scale))
    return base64.b64encode(unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)).decode()


def test_debezium_columns_widen_across_runs_with_the_schema(spark, tmp_path):
    """`ALTER TABLE t ALTER v TYPE bigint` (and real -> double precision, numeric(10,2) ->
    numeric(20,4)) between runs, seen only in the messages' schemas: gold widens each column and
    keeps every value, old and new."""

    def decimal_schema(precision: int, scale: int) -> dict:
        parameters = {"scale": str(scale), "connect.decimal.precision": str(precision)}
        return {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": parameters}

    narrow = {"id": {"type": "int32"}, "v": {"type": "int32"}, "f": {"type": "float"}, "d": decimal_schema(10, 2)}
    wide = {"id": {"type": "int32"}, "v": {"type": "int64"}, "f": {"type": "double"}, "d": decimal_schema(20, 4)}
    feed = tmp_path / "debezium.jsonl"
    first = {"id": 1, "v": 7, "f": 1.5, "d": connect_decimal("12345678.91", 2)}
    feed.write_text(debezium(10, first, narrow) + "\n", encoding="utf-8")
    storage = tmp_path / "storage"
    conf = adhoc_conf(fmt="debezium-json", input_path=feed, storage=storage, keys=["t=id"], columns=[])
    run_pipeline(conf, spark=spark)
    second = {"id": 2, "v": 3_000_000_000, "f": 1.0e300, "d": connect_decimal("1234567890123456.1234", 4)}
    with feed.open("a", encoding="utf-8") as handle:
        handle.write(debezium(20, second, wide) + "\n")
    run_pipeline(conf, spark=spark)
    for scd in (1, 2):
        rows = {r["id"]: (r["v"], r["f"], str(r["d"])) for r in gold_rows(spark, storage, "t", scd)}
        assert rows == {1: (7, 1.5, "12345678.9100"), 2: (3_000_000_000, 1.0e300, "1234567890123456.1234")}
    gold = spark.read.format("delta").load(str(storage / "gold_t"))
    types = {f.name: f.dataType.simpleString() for f in gold.schema}
    assert (types["v"], types["f"], types["d"]) == ("bigint", "double", "decimal(20,4)")
