"""Alibaba DataWorks JSON: every example of the vendor document, then end to end."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdc_medallion.config import load_conf
from cdc_medallion.formats import get_format
from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.rules import load_rules
from tests.conftest import REPO, shared_path
from tests.helpers import datasets, gold_rows, ingest, message, read_rows

SEED = "dataworks-kafka-message-format.txt"
ROW_ID = "#alibaba_rds_row_id#"
ALL_OPS = (
    "INSERT/UPDATE_BEFOR/UPDATE_AFTER/DELETE/TRANSACTION_BEGIN/TRANSACTION_END/CREATE/ALTER/ERASE/QUERY/"
    "TRUNCATE/RENAME/CINDEX/DINDEX/GTID/XACOMMIT/XAROLLBACK/MHEARTBEAT..."
)


def seed_examples() -> list[str]:
    """The document's JSON blocks, as printed: each starts with a line `{` and ends at its brace."""
    blocks, lines, depth = [], None, 0
    for line in shared_path("seeds", SEED).read_text(encoding="utf-8").splitlines(keepends=True):
        if lines is None:
            if line.strip() == "{":
                lines, depth = [line], 1
            continue
        lines.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0:
            blocks.append("".join(lines))
            lines = None
    return blocks


def examples() -> dict[str, str]:
    template, heartbeat, insert, before, after, one_message, delete = seed_examples()
    return {
        "template": template,
        "heartbeat": heartbeat,
        "insert": insert,
        "update_before": before,
        "update_after": after,
        "one_message_update": one_message,
        "delete": delete,
    }


def without_comments(template: str) -> str:
    """The template annotates fields with `// ...` comments (not JSON); the only edit."""
    return re.sub(r"//[^\n]*", "", template)


def run(*values: str) -> list[dict[str, Any]]:
    parser = get_format("dataworks-json")("test")
    return parser.parse_messages([message(v, line=i) for i, v in enumerate(values)], [])


def one(value: str) -> dict[str, Any]:
    [event] = run(value)
    return event


SEED_ROW = {"name": "name11", "job": "job11", "sex": "man", ROW_ID: "15"}
SEED_TYPES = {"name": "string", "job": "string", "sex": "string", ROW_ID: "bigint"}


# --- the vendor document's examples -------------------------------------------------------------
def test_the_document_has_seven_examples():
    assert len(seed_examples()) == 7
    for name, example in examples().items():
        if name != "template":
            json.loads(example)  # all but the annotated template are valid JSON as printed


def test_template_as_printed_is_quarantined_and_its_op_list_is_not_an_op():
    template = examples()["template"]
    error = one(template)
    assert error["kind"] == "error" and error["error"].startswith("value: not valid JSON")
    assert error["raw_message"] == template
    listed = one(without_comments(template))
    assert listed["kind"] == "error"
    assert listed["error"].startswith(f"payload.op: unknown operation '{ALL_OPS}'")


def test_template_fields_mean_what_the_document_says():
    """With a real op: types (LONG, STRING, BYTES = base64, DATE = epoch ms), Oracle's rowid, scn,
    the source block, the primary key, eventTime in milliseconds."""
    template = without_comments(examples()["template"]).replace(ALL_OPS, "UPDATE_AFTER")
    placeholder = one(template)  # its sequenceId is the placeholder "XXX": no order key, no change
    assert placeholder["kind"] == "error"
    assert placeholder["error"].startswith("payload.sequenceId: present but not a whole number ('XXX')")
    event = one(template.replace('"sequenceId":"XXX"', '"sequenceId":"1620457642589000000"'))
    assert (event["kind"], event["op"]) == ("change", "UPDATE")  # one message with before and after
    assert (event["source_db"], event["source_schema"], event["source_table"]) == (
        "myDatabase",
        "mySchema",
        "tableName",
    )
    assert event["column_types"] == {
        "id": "bigint",
        "name": "string",
        "binData": "binary",
        "ts": "timestamp",
        "rowid": "string",
    }
    assert event["source_types"]["ts"] == "DATE"
    assert event["before"]["id"] == "111" and event["after"]["id"] == "222"
    assert event["after"]["ts"] == "2020-05-24 10:14:29"  # 1590315269000 ms
    assert event["after"]["rowid"] == "AAIUMPAAFAACxExAAE"
    assert event["changed_columns"] == ["id", "name"]
    assert event["key_columns"] == ["pkName1", "pkName2"]  # as given, although not among the columns
    assert json.loads(event["detail"]) == {"scn": "xxxx"}
    assert event["event_ts"] == dt.datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=dt.UTC)  # eventTime 1
    assert event["sequence"] == "1620457642589000000".zfill(30) + "|test.jsonl/000000000000"
    # placeholders are facts, counted by expectations: a non-base64 BYTES value, keys not in the row
    assert event["flags"] == ["bytes_not_base64", "key_column_missing"]


def test_heartbeat_is_not_a_change_and_measures_lag():
    heartbeat = one(examples()["heartbeat"])
    assert (heartbeat["kind"], heartbeat["op"]) == ("heartbeat", "MHEARTBEAT")
    assert heartbeat["event_ts"] == dt.datetime(2021, 5, 8, 7, 7, 39, tzinfo=dt.UTC)  # eventTime 1620457659000
    assert heartbeat.get("source_table") is None and heartbeat.get("after") is None
    landed = replace(message(examples()["heartbeat"]), ingest_ts=dt.datetime(2021, 5, 8, 7, 7, 41, 500000, dt.UTC))
    [measured] = get_format("dataworks-json")("test").parse_messages([landed], [])
    assert json.loads(measured["detail"])["lag_seconds"] == 2.5


def test_insert_into_a_table_without_primary_key_is_keyed_by_the_row_id():
    insert = one(examples()["insert"])
    assert (insert["kind"], insert["op"]) == ("change", "INSERT")
    assert (insert["source_db"], insert["source_table"]) == ("pkset_test", "pkset_test_no_pk")
    assert insert["key_columns"] == [ROW_ID]  # primaryKey is null
    assert insert["after"] == SEED_ROW and insert["before"] is None
    assert insert["column_types"] == SEED_TYPES
    assert insert["source_types"] == {"name": "STRING", "job": "STRING", "sex": "STRING", ROW_ID: "LONG"}
    assert insert["sequence"] == "1620457642589000000".zfill(30) + "|test.jsonl/000000000000"
    assert insert["event_ts"] == dt.datetime(2021, 5, 8, 7, 11, 36, tzinfo=dt.UTC)
    assert insert["flags"] is None


def test_two_message_update_is_paired_into_one_update():
    before, after = examples()["update_before"], examples()["update_after"]
    [update] = run(before, after)
    assert (update["kind"], update["op"]) == ("change", "UPDATE")
    assert update["before"] == SEED_ROW
    assert update["after"] == {**SEED_ROW, "sex": "woman"}
    assert update["changed_columns"] == ["sex"]
    assert update["bronze_ref"] == "test.jsonl:1" and update["related_refs"] == ["test.jsonl:0"]
    assert update["sequence"].startswith("1620457642589000001".zfill(30) + "|")
    assert update["key_columns"] == [ROW_ID]


def test_update_befor_without_its_after_is_held_and_after_alone_is_an_upsert():
    [held] = run(examples()["update_before"])
    assert held["kind"] == "held" and held["source_table"] == "pkset_test_no_pk"
    assert "UPDATE_AFTER has not arrived" in held["detail"]
    [alone] = run(examples()["update_after"])
    assert alone["op"] == "UPDATE" and alone["before"] is None
    assert alone["flags"] == ["update_before_missing"]


def test_update_before_spelling_is_accepted_too():
    before = examples()["update_before"].replace('"UPDATE_BEFOR"', '"UPDATE_BEFORE"')
    [update] = run(before, examples()["update_after"])
    assert update["op"] == "UPDATE" and update["before"]["sex"] == "man"


def test_one_message_update_carries_both_images():
    update = one(examples()["one_message_update"])
    assert (update["op"], update["related_refs"]) == ("UPDATE", None)
    assert update["before"] == SEED_ROW and update["after"] == {**SEED_ROW, "sex": "woman"}
    assert update["changed_columns"] == ["sex"] and update["flags"] is None


def test_delete_carries_the_old_row():
    delete = one(examples()["delete"])
    assert (delete["op"], delete["after"]) == ("DELETE", None)
    assert delete["before"] == {**SEED_ROW, "sex": "woman"}
    assert delete["key_columns"] == [ROW_ID]
    assert delete["event_ts"] == dt.datetime(2021, 5, 8, 7, 17, 46, tzinfo=dt.UTC)


# --- ops the document lists without an example ---------------------------------------------------
def with_op(op: str, **payload: Any) -> str:
    document = json.loads(examples()["insert"])
    document["payload"].update(op=op, **payload)
    return json.dumps(document)


def test_transaction_markers_and_ddl_ops():
    begin, end = run(with_op("TRANSACTION_BEGIN", after=None), with_op("TRANSACTION_END", after=None))
    assert [(e["kind"], e["op"]) for e in (begin, end)] == [("transaction", "BEGIN"), ("transaction", "END")]
    for op in ("CREATE", "ALTER", "ERASE", "QUERY", "RENAME", "CINDEX", "DINDEX", "GTID", "XACOMMIT", "XAROLLBACK"):
        ddl = one(with_op(op, after=None, ddl={"text": f"{op} ...", "ddlMeta": "AAAA"}))
        assert (ddl["kind"], ddl["op"], ddl["detail"], ddl["source_table"]) == (
            "schema_change",
            op,
            f"{op} ...",
            "pkset_test_no_pk",
        )


def test_truncate_is_a_schema_change_and_empties_the_table():
    schema_change, truncate = run(with_op("TRUNCATE", after=None, ddl={"text": "TRUNCATE TABLE t"}))
    assert (schema_change["kind"], schema_change["op"]) == ("schema_change", "TRUNCATE")
    assert (truncate["kind"], truncate["op"], truncate["source_table"]) == ("change", "TRUNCATE", "pkset_test_no_pk")
    assert schema_change["bronze_ref"] == truncate["bronze_ref"]


def test_unknown_op_missing_sequence_and_unknown_event_time():
    unknown = one(with_op("UPSERT"))
    assert unknown["kind"] == "error" and "payload.op: unknown operation 'UPSERT'" in unknown["error"]
    unsequenced = one(with_op("INSERT", sequenceId=None))  # as -1: before every sequenced change
    assert unsequenced["kind"] == "change" and unsequenced["sequence"].startswith("-")
    full_load = one(with_op("INSERT", timestamp={"eventTime": -1, "systemTime": 1620457896977}))
    assert full_load["kind"] == "change" and full_load["event_ts"] is None  # -1 = unknown, not 1969


def test_key_from_primary_key_or_oracle_rowid():
    document = json.loads(without_comments(examples()["template"]).replace(ALL_OPS, "INSERT"))
    document["payload"]["sequenceId"] = "1"  # the template's "XXX" cannot order a change
    document["schema"]["primaryKey"] = ["id"]
    assert one(json.dumps(document))["key_columns"] == ["id"]
    document["schema"]["primaryKey"] = None
    assert one(json.dumps(document))["key_columns"] == ["rowid"]


def test_redelivered_halves_are_recognised_and_never_lost():
    before, after = examples()["update_before"], examples()["update_after"]
    [update] = run(before, before, after)  # the before half delivered twice
    assert update["related_refs"] == ["test.jsonl:0", "test.jsonl:1"]
    assert update["flags"] == ["duplicate_update_before"]  # counted by not_redelivered
    first, again_before, again_after = run(before, after, before, after)[:3]
    assert first["op"] == "UPDATE" and first["flags"] is None
    assert (again_before["kind"], again_before["flags"]) == ("message", ["duplicate_update_before"])
    assert again_before["bronze_ref"] == "test.jsonl:2"
    assert again_after["before"] == SEED_ROW and again_after["flags"] == ["redelivered"]  # applied again: same row


def test_a_second_before_half_with_other_values_quarantines_the_first():
    before = examples()["update_before"]
    other = before.replace('"sex": "man"', '"sex": "other"')
    update, error = sorted(run(before, other, examples()["update_after"]), key=lambda e: e["kind"])
    assert error["bronze_ref"] == "test.jsonl:0" and "has no UPDATE_AFTER" in error["error"]
    assert update["related_refs"] == ["test.jsonl:1"] and update["before"]["sex"] == "other"


# --- expectations --------------------------------------------------------------------------------
def test_expectation_rules_load_against_the_event_schema(spark):
    rules = {r.name: r for r in load_rules(REPO / "expectations", "silver", "dataworks-json", EVENT_SCHEMA)}
    assert rules["heartbeat_filtered"].constraint == "kind <> 'heartbeat'"
    assert all(rules[n].action.value == "warn" for n in ("heartbeat_filtered", "update_pair_complete"))


# --- end to end ----------------------------------------------------------------------------------
def append(path: Path, *values: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        for value in values:
            handle.write(json.dumps(json.loads(value), separators=(",", ":")) + "\n")


def silver_quality(spark: Any, storage: Path, dataset: str) -> list[dict[str, Any]]:
    """The data-quality blocks of the event log for one dataset, oldest first."""
    events = sorted(read_rows(spark, storage, "event_log"), key=lambda e: e["timestamp"])
    return [
        json.loads(e["details"])["flow_progress"]["data_quality"]
        for e in events
        if e["event_type"] == "flow_progress" and e["origin"]["dataset_name"] == dataset
    ]


def test_seed_stream_end_to_end_across_runs(spark, storage, tmp_path):
    """insert, heartbeat, UPDATE_BEFOR | UPDATE_AFTER, delete (next run): the pair meets across runs."""
    seed = examples()
    source = tmp_path / "dataworks.jsonl"
    append(source, seed["insert"], seed["heartbeat"], seed["update_before"])
    summary = ingest(spark, "dataworks-json", source, storage)
    [table] = [t for t in summary.discovery.tables if t.table == "pkset_test_no_pk"]
    assert table.keys == (ROW_ID,)
    [row] = gold_rows(spark, storage, "pkset_test_no_pk", 1)
    assert (row[ROW_ID], row["sex"]) == (15, "man")  # the update's before half waits
    silver = read_rows(spark, storage, "silver_dataworks_json")
    assert sorted(r["kind"] for r in silver) == ["change", "heartbeat", "held"]
    [heartbeat] = read_rows(spark, storage, "silver_heartbeats")
    assert heartbeat["event_ts"] == dt.datetime(2021, 5, 8, 7, 7, 39)
    assert heartbeat["ingest_ts"] > heartbeat["event_ts"]  # the source lag
    [quality] = silver_quality(spark, storage, "silver_dataworks_json")
    counts = {e["name"]: (e["passed_records"], e["failed_records"]) for e in quality["expectations"]}
    assert counts["heartbeat_filtered"] == (2, 1)  # counted, not a row of gold
    assert counts["update_pair_complete"] == (2, 1)

    append(source, seed["update_after"], seed["delete"])
    ingest(spark, "dataworks-json", source, storage)
    [update] = [r for r in read_rows(spark, storage, "silver_dataworks_json") if r["op"] == "UPDATE"]
    assert update["related_refs"] == [f"{source}:2"]  # the held half, paired in the next run
    assert (update["before"]["sex"], update["after"]["sex"]) == ("man", "woman")
    assert gold_rows(spark, storage, "pkset_test_no_pk", 1) == []
    history = sorted(gold_rows(spark, storage, "pkset_test_no_pk", 2), key=lambda r: r["__START_AT"])
    assert [(r[ROW_ID], r["name"], r["job"], r["sex"]) for r in history] == [
        (15, "name11", "job11", "man"),
        (15, "name11", "job11", "woman"),
    ]
    assert history[0]["__END_AT"] == history[1]["__START_AT"]
    assert history[1]["__END_AT"] is not None  # closed by the delete
    assert len(read_rows(spark, storage, "silver_heartbeats")) == 1
    assert datasets(storage).get("silver_dataworks_json_quarantine", {"rows": 0})["rows"] == 0  # nothing lost


def test_seed_one_message_update_end_to_end(spark, storage, tmp_path):
    seed = examples()
    source = tmp_path / "dataworks.jsonl"
    append(source, seed["insert"], seed["one_message_update"])
    ingest(spark, "dataworks-json", source, storage)
    [row] = gold_rows(spark, storage, "pkset_test_no_pk", 1)
    assert (row[ROW_ID], row["sex"]) == (15, "woman")
    assert len(gold_rows(spark, storage, "pkset_test_no_pk", 2)) == 2


def test_embedded_sample_end_to_end(spark, storage):
    """The `make run` sample (conf/sources/dataworks.yml)."""
    conf = load_conf(REPO / "conf" / "local.yml")
    conf = replace(
        conf,
        storage=storage,
        sources=tuple(s for s in conf.sources if s.name == "shop_sync"),
        tables=tuple(t for t in conf.tables if t.source == "shop_sync"),
    )
    summary = run_pipeline(conf, spark=spark)
    keys = {t.table: t.keys for t in summary.discovery.tables}
    assert keys == {"orders": ("order_id",), "audit_log": (ROW_ID,)}  # primaryKey, or the row id without one
    orders = {r["order_id"]: r for r in gold_rows(spark, storage, "orders", 1)}
    assert sorted(orders) == [2, 3, 4, 5]  # 1 deleted
    assert orders[2]["paid"] is True  # two-message update
    assert orders[3]["amount"] == pytest.approx(99.0)  # one-message update
    assert orders[4]["paid"] is False  # its UPDATE_BEFOR is still held
    assert orders[5]["channel"] == "web"  # a column added by ALTER
    assert orders[4]["note"] == b"leave at door"
    assert orders[2]["placed"] == dt.datetime(2024, 1, 2)
    assert [r[ROW_ID] for r in gold_rows(spark, storage, "audit_log", 1)] == [4]  # truncated, then one insert
    silver = read_rows(spark, storage, "silver_shop_sync")
    assert sum(r["kind"] == "held" for r in silver) == 1
    assert sum(r["kind"] == "transaction" for r in silver) == 2
    assert len(read_rows(spark, storage, "silver_heartbeats")) == 3
    [quarantined] = read_rows(spark, storage, "silver_shop_sync_quarantine")
    assert "unknown operation 'UPSERT'" in quarantined["error"]
    assert sorted(r["op"] for r in read_rows(spark, storage, "silver_schema_changes")) == ["ALTER", "TRUNCATE"]


def test_a_batch_is_parsed_on_every_core_and_update_halves_still_meet(spark, tmp_path):
    """The batch is split by sequenceId (`related_by`) into groups of the stateful operator: the
    two halves of each update share a group, so the groups' parses give the events of one
    whole pass."""
    from cdc_medallion.adhoc import adhoc_conf
    from cdc_medallion.formats.base import messages_of
    from cdc_medallion.generator.history import generate_history
    from cdc_medallion.generator.renderers import render
    from cdc_medallion.model import BRONZE_SCHEMA
    from cdc_medallion.sources.files import FileLanding

    rendered = render(generate_history(tables=3, transactions=60, seed=5), "dataworks-json", tmp_path / "input")
    conf = adhoc_conf(rendered.format, rendered.path, tmp_path / "s", [], [], layout=rendered.layout)
    landed = FileLanding(conf.sources[0], max_messages=100_000).next_batch().to_arrow()
    parser = get_format("dataworks-json")("test")

    events = parser.parse(spark.createDataFrame(landed, schema=BRONZE_SCHEMA))

    def outcome(event: dict[str, Any]) -> tuple:
        return (event["bronze_ref"], event["kind"], event["op"], event["sequence"], tuple(event["related_refs"] or ()))

    split = sorted(outcome(row.asDict()) for row in events.collect())
    messages = [m for batch in landed.to_batches() for m in messages_of(batch)]
    whole = sorted(outcome(e) for e in parser.parse_all(messages, []).to_pylist())
    assert split == whole
    paired = [o for o in split if o[2] == "UPDATE" and o[4]]
    assert len(paired) > 10  # two-message updates were paired, not held
    assert not [o for o in split if o[1] in ("held", "error")]
