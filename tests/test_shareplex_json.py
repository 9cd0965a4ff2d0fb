"""SharePlex JSON: the DTS document's examples, partial update images end to end, the details."""

from __future__ import annotations

import datetime as dt
import json

from tests.cdc_fixture_checks import one_line, seed_examples
from tests.helpers import datasets, gold_rows, ingest, parse, read_rows

FAMILY = "shareplex-json"


def examples() -> list[str]:
    return seed_examples()[:3]


# --- the seed's examples ----------------------------------------------------------------------
def test_seed_insert_example():
    [event] = parse(FAMILY, examples()[0])
    assert (event["kind"], event["op"], event["source_schema"], event["source_table"]) == (
        "change",
        "INSERT",
        "CL_BIZ1",
        "MIO_LOG",
    )
    assert event["after"] == {"MIO_LOG_ID": "32539737"} and event["before"] is None
    assert (event["tx_id"], event["tx_seq"], event["tx_last"]) == ("7.0.411499", 1, False)
    assert event["event_ts"] == dt.datetime(2017, 6, 16, 14, 24, 34, tzinfo=dt.UTC)
    assert event["sequence"].startswith(f"{14589063118712:030d}:{1:010d}|")
    assert event["flags"] is None


def test_seed_update_and_delete_examples_as_printed_are_quarantined_with_the_reason():
    update, delete = examples()[1:]
    for example, reason in ((update, "Expecting ','"), (delete, "Expecting property name")):
        [event] = parse(FAMILY, example)
        assert event["kind"] == "error" and event["error"].startswith("value: not valid JSON"), event
        assert reason in event["error"]
        assert event["raw_message"] == example


def test_seed_update_example_means_only_the_changed_column():
    """Without its `….` placeholder: `data` has the one changed column, `key` the before values."""
    repaired = examples()[1].replace('"CL_BIZ1.MIO_LOG"\n….', '"CL_BIZ1.MIO_LOG"')
    [event] = parse(FAMILY, repaired)
    assert event["op"] == "UPDATE" and event["changed_columns"] == ["CNTR_NO"]
    assert event["before"]["CNTR_NO"] == "1171201606syui26"
    assert event["after"] == {
        "MIO_LOG_ID": "32537893",
        "PLNMIO_REC_ID": "31557806",
        "POL_CODE": None,
        "CNTR_TYPE": None,
        "CNTR_NO": "1171201606",
    }
    assert event["flags"] == ["scn_missing"]


def test_seed_delete_example_means_the_before_image():
    """Without its trailing comma it parses, but names no table: quarantined unless conf names one."""
    repaired = examples()[2].replace('"op": "del",\n}', '"op": "del"\n}')
    [event] = parse(FAMILY, repaired)
    assert event["error"] == "meta.table: missing or empty table name: None"
    [event] = parse(FAMILY, repaired, options={"table": "CL_BIZ1.MIO_LOG"})
    assert event["op"] == "DELETE" and event["after"] is None
    assert event["before"]["MIO_LOG_ID"] == "32539739" and event["before"]["CG_NO"] is None


# --- end to end: partial images keep the columns they do not carry ------------------------------
def meta(op: str, scn: int, seq: int = 1, size: int = 1, table: str = "HR.EMP", **more) -> dict:
    return {
        "time": "2024-03-01T10:00:00",
        "userid": 84,
        "op": op,
        "scn": str(scn),
        "rowid": f"AAAR{scn}",
        "trans": f"1.2.{scn}",
        "seq": seq,
        "size": size,
        "table": table,
        "idx": f"{seq}/{size}",
        **more,
    }


def test_partial_updates_deletes_and_truncates_end_to_end(spark, storage, tmp_path):
    messages = [
        {"meta": meta("ins", 100, 1, 2), "data": {"EMP_ID": "1", "NAME": "Ann", "CITY": "Oslo", "BONUS": None}},
        {"meta": meta("ins", 100, 2, 2), "data": {"EMP_ID": "2", "NAME": "Bob", "CITY": "Rome", "BONUS": "5"}},
        {"meta": meta("upd", 101), "data": {"CITY": "Bergen"}, "key": {"EMP_ID": "1", "CITY": "Oslo"}},
        {"meta": meta("UPDATE AFTER", 102), "data": {"EMP_ID": "2", "BONUS": "7"}},
        {"meta": meta("UPDATE BEFORE", 102), "data": {"EMP_ID": "2", "BONUS": "5"}},
        {"meta": meta("ins", 103, table="HR.DEPT"), "data": {"DEPT_ID": "10", "TITLE": "Ops"}},
        {"meta": meta("truncate", 104, table="HR.DEPT")},
        {"meta": meta("ins", 105, table="HR.DEPT"), "data": {"DEPT_ID": "20", "TITLE": "Sales"}},
        {"meta": meta("DROP COLUMN", 106, table="HR.DEPT"), "data": {"TITLE": None}},
        {"meta": meta("del", 107), "data": {"EMP_ID": "2", "NAME": "Bob", "CITY": "Rome", "BONUS": "7"}},
    ]
    lines = [json.dumps(m) for m in reversed(messages)]  # landed out of order: scn orders them
    lines.append(one_line(seed_examples()[0]))
    lines.append(seed_examples()[2].replace("\n", " "))  # malformed as printed
    source = tmp_path / "shareplex.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ingest(spark, FAMILY, source, storage, keys={"EMP": "EMP_ID", "DEPT": "DEPT_ID", "MIO_LOG": "MIO_LOG_ID"})

    [ann] = gold_rows(spark, storage, "EMP", 1)  # Bob is deleted
    assert (ann["EMP_ID"], ann["NAME"], ann["CITY"], ann["BONUS"]) == ("1", "Ann", "Bergen", None)
    history = sorted(gold_rows(spark, storage, "EMP", 2), key=lambda r: (r["EMP_ID"], r["__START_AT"]))
    assert [(r["EMP_ID"], r["CITY"], r["BONUS"]) for r in history] == [
        ("1", "Oslo", None),
        ("1", "Bergen", None),
        ("2", "Rome", "5"),
        ("2", "Rome", "7"),  # UPDATE AFTER kept NAME and CITY
    ]
    assert [r["MIO_LOG_ID"] for r in gold_rows(spark, storage, "MIO_LOG", 1)] == ["32539737"]
    [quarantined] = read_rows(spark, storage, "silver_shareplex_json_quarantine")
    assert quarantined["error"].startswith("value: not valid JSON")
    silver = read_rows(spark, storage, "silver_shareplex_json")
    assert [r["op"] for r in silver if r["kind"] == "message"] == ["UPDATE BEFORE"]
    assert [r["detail"] for r in silver if r["kind"] == "schema_change"] == ['DROP COLUMN {"TITLE":null}']
    assert [(r["op"], r["source_table"]) for r in silver if r["op"] == "TRUNCATE"] == [("TRUNCATE", "DEPT")]
    assert datasets(storage)["bronze_shareplex_json"]["rows"] == 12
    assert [r["TITLE"] for r in gold_rows(spark, storage, "DEPT", 1)] == ["Sales"]  # the truncate removed Ops


# --- details ----------------------------------------------------------------------------------
def test_rowid_option_keys_tables_without_a_primary_key():
    raw = json.dumps({"meta": meta("upd", 5), "data": {"QTY": "2"}, "key": {"QTY": "1"}})
    [event] = parse(FAMILY, raw, options={"rowid_column": "ROW_ID"})
    assert event["after"] == {"QTY": "2", "ROW_ID": "AAAR5"} and event["before"] == {"QTY": "1", "ROW_ID": "AAAR5"}
    assert event["changed_columns"] == ["QTY"] and event["column_types"]["ROW_ID"] == "string"


def test_idx_gives_the_position_in_the_transaction_when_seq_is_absent():
    message = {"meta": {"op": "ins", "table": "A.B", "scn": "9", "trans": "t", "idx": "3/3"}, "data": {"X": "1"}}
    [event] = parse(FAMILY, json.dumps(message))
    assert (event["tx_seq"], event["tx_last"]) == (3, True)


def test_errors_name_what_is_wrong():
    assert parse(FAMILY, '{"data": {}}')[0]["error"] == "meta: missing or not an object: not a SharePlex message"
    assert "unknown operation type 'merge'" in parse(FAMILY, '{"meta": {"op": "merge", "table": "A.B"}}')[0]["error"]
    assert parse(FAMILY, '{"meta": {"op": "ins", "table": "A.B"}}')[0]["error"] == "data: INSERT without `data`"
    bad_time = '{"meta": {"op": "ins", "table": "A.B", "time": "yesterday"}, "data": {"X": "1"}}'
    assert parse(FAMILY, bad_time)[0]["error"] == "meta.time: cannot read 'yesterday' as a timestamp"
