"""Qlik Replicate JSON: the spec's mask semantics, the shared fixtures, mask validity, end to end."""

from __future__ import annotations

import datetime as dt
import doctest
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdc_medallion.config import load_conf
from cdc_medallion.errors import ConfigError
from cdc_medallion.formats import get_format, masks
from cdc_medallion.formats.masks import MaskError, decode_mask
from cdc_medallion.lines import lines_of
from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.parsing.execute import parse
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.rules import load_rules
from tests.conftest import REPO, shared_path
from tests.helpers import datasets, gold_rows, ingest, load_expected, message, read_rows

FIXTURES = "qlik-replicate-json"
METADATA = "jcustenborder_attunity-json-converter__Metadata.json"
DATA = "jcustenborder_attunity-json-converter__Data.json"
UPDATE = "michelin_kafka-connect-transforms-qlik-replicate__README-update-example.json"
DELETE = "michelin_kafka-connect-transforms-qlik-replicate__README-delete-example.json"
SCHEMA_ID = "8FB9D3C10EA4B25751DF9CC8318F0A02"  # employees.salaries: emp_no, salary, from_date, to_date


def fixture(name: str) -> str:
    return shared_path("fixtures", FIXTURES, name).read_text(encoding="utf-8")


def run(*values: str, context: list[dict[str, Any]] | None = None, **options: Any) -> list[dict[str, Any]]:
    """The events of a batch of messages (a stateful format sees them together)."""
    parser = get_format("qlik-json")("test", options or None)
    return parser.parse_messages([message(v, line=i) for i, v in enumerate(values)], context or [])


def data_message(
    operation: str,
    data: dict[str, Any] | None,
    before: dict[str, Any] | None = None,
    change_mask: str | None = None,
    column_mask: str | None = None,
    sequence: str = "20180413201358280000000000000000019",
    **headers: Any,
) -> str:
    """A wrapped data message for the fixture's salaries table (its messageSchemaId)."""
    return json.dumps(
        {
            "magic": "atMSG",
            "type": "DT",
            "headers": None,
            "messageSchemaId": SCHEMA_ID,
            "messageSchema": None,
            "message": {
                "data": data,
                "beforeData": before,
                "headers": {
                    "operation": operation,
                    "changeSequence": sequence,
                    "timestamp": "2018-04-13T20:13:58.280",
                    "streamPosition": "mysql-bin.000004:1234",
                    "transactionId": "00000000000000A1",
                    "changeMask": change_mask,
                    "columnMask": column_mask,
                    "externalSchemaId": None,
                    **headers,
                },
            },
        }
    )


ROW = {"emp_no": 14472, "salary": 49592, "from_date": "1993-11-25", "to_date": "1994-11-25"}


def changes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "change"]


# --- the spec: masks ---------------------------------------------------------------------------
def test_seed_mask_example_0b_is_ordinals_1_2_and_4():
    """ "If UPDATE mask is 0B hexadecimal, which is 1011 binary – ... ordinals 1, 2 and 4 were changed."""
    assert decode_mask("0B").ordinals == (1, 2, 4)
    assert decode_mask("0b").ordinals == (1, 2, 4)
    assert not decode_mask("0B").odd_length


def test_seed_mask_example_in_an_update_names_the_columns_of_those_ordinals():
    new = {**ROW, "salary": 50000, "to_date": "1995-11-25", "emp_no": 14473}
    [update] = changes(run(fixture(METADATA), data_message("UPDATE", new, ROW, change_mask="0B", column_mask="0F")))
    assert update["changed_columns"] == ["emp_no", "salary", "to_date"]  # ordinals 1, 2, 4
    assert update["present_columns"] == ["emp_no", "salary", "from_date", "to_date"]
    assert update["flags"] is None  # the mask agrees with the before/after difference


def test_masks_are_little_endian_by_byte():
    # 10 columns occupy bits 0..9: the first two digits are byte 0, the next two byte 1.
    assert decode_mask("FF03").ordinals == tuple(range(1, 11))
    assert decode_mask("0001").ordinals == (9,)
    assert decode_mask("0100").ordinals == (1,)
    assert decode_mask("").ordinals == ()


def test_odd_length_masks_read_as_left_padded_and_non_hex_masks_fail():
    assert decode_mask("1") == masks.Mask((1,), odd_length=True)
    assert decode_mask("B01").ordinals == (1, 2, 4, 9)  # '0B01'
    with pytest.raises(MaskError, match="not hexadecimal"):
        decode_mask("0G")


def test_masks_module_doctests():
    assert doctest.testmod(masks).failed == 0


# --- the shared fixtures -------------------------------------------------------------------------
def test_fixture_metadata_message_is_a_schema_change_with_order_types_and_key():
    assert "PK = emp_no, from_date" in load_expected(shared_path("fixtures", FIXTURES, METADATA))["pairing"]
    [event] = run(fixture(METADATA))
    assert (event["kind"], event["op"]) == ("schema_change", "METADATA")
    assert (event["source_schema"], event["source_table"]) == ("employees", "salaries")
    assert event["key_columns"] == ["emp_no", "from_date"]
    assert event["present_columns"] == ["emp_no", "salary", "from_date", "to_date"]  # by ordinal
    assert event["column_types"] == {"emp_no": "int", "salary": "int", "from_date": "date", "to_date": "date"}
    assert event["source_types"] == {"emp_no": "INT4", "salary": "INT4", "from_date": "DATE", "to_date": "DATE"}
    assert event["event_ts"] == dt.datetime(2018, 4, 13, 20, 13, 58, 289000, tzinfo=dt.UTC)
    detail = json.loads(event["detail"])  # everything needed to rebuild the table's structure later
    assert detail["schemaId"] == SCHEMA_ID
    assert detail["lineage"]["tableVersion"] == 1
    assert detail["tableStructure"]["tableColumns"]["from_date"]["primaryKeyPosition"] == 2


def test_fixture_data_message_is_a_full_load_row_of_salaries():
    events = run(fixture(METADATA), fixture(DATA))
    [row] = changes(events)
    assert (row["op"], row["source_schema"], row["source_table"]) == ("SNAPSHOT", "employees", "salaries")
    assert row["key_columns"] == ["emp_no", "from_date"]
    assert row["after"] == {"emp_no": "14472", "salary": "49592", "from_date": "1993-11-25", "to_date": "1994-11-25"}
    assert row["before"] is None
    assert row["changed_columns"] is None and row["present_columns"] is None  # REFRESH carries no masks
    assert row["sequence"] == "0" * 35 + "|test.jsonl/000000000001"  # full load sorts before any CDC change
    assert row["event_ts"] is None and row["tx_id"] is None  # empty strings in the headers
    assert row["flags"] is None


def test_data_before_its_metadata_in_one_batch_still_finds_it_by_schema_id():
    events = run(fixture(DATA), fixture(METADATA))
    assert [e["kind"] for e in events] == ["change", "schema_change"]
    assert events[0]["key_columns"] == ["emp_no", "from_date"]


def test_data_without_its_metadata_is_held_and_resolved_by_a_later_run():
    [held] = run(fixture(DATA))
    assert held["kind"] == "held"
    assert held["detail"] == f"waiting for the metadata message of messageSchemaId {SCHEMA_ID}"
    # next run: the metadata came earlier and reaches the parser as context (a schema_change event)
    [metadata] = run(fixture(METADATA))
    [row] = run(fixture(DATA), context=[metadata])
    assert row["kind"] == "change" and row["key_columns"] == ["emp_no", "from_date"]
    assert row["column_types"]["from_date"] == "date"


def test_without_waiting_a_data_message_uses_the_topic_and_inferred_types():
    [error] = run(fixture(DATA), wait_for_metadata="false")
    assert error["kind"] == "error" and "cannot name the table" in error["error"]
    parser = get_format("qlik-json")("test", {"wait_for_metadata": False})
    [row] = parser.parse_messages([message(fixture(DATA), topic="employees.salaries")], [])
    assert (row["source_schema"], row["source_table"]) == ("employees", "salaries")
    assert row["key_columns"] is None  # from conf then
    assert row["column_types"] == {"emp_no": "bigint", "salary": "bigint", "from_date": "string", "to_date": "string"}
    assert row["flags"] == ["metadata_missing"]


def test_unknown_option_values_fail_clearly():
    with pytest.raises(ConfigError, match="wait_for_metadata"):
        get_format("qlik-json")("test", {"wait_for_metadata": "perhaps"})


def test_michelin_update_example_bare_message():
    """README: the update's new state is {"id": 1, "email": "foo@bar.com"}. Its masks ("1") are
    illustrative: odd length, and they name only `id` although `email` changed — flagged, applied."""
    [update] = run(fixture(UPDATE), table="customers")
    assert (update["op"], update["source_table"]) == ("UPDATE", "customers")
    assert update["after"] == {"id": "1", "email": "foo@bar.com"}
    assert update["before"] == {"id": "1", "email": "john@doe.com"}
    assert update["changed_columns"] == ["id"]  # bit 0 of '01'
    assert update["present_columns"] == ["id"]
    assert update["flags"] == [
        "metadata_missing",
        "mask_odd_length",
        "column_mask_misses_value",
        "change_mask_disagrees_with_images",
    ]
    assert (update["tx_id"], update["tx_seq"], update["tx_last"]) == ("1", 1, True)
    assert update["sequence"] == "100".zfill(35) + "|test.jsonl/000000000000"
    assert update["event_ts"] == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)  # `timestamp: 1000` (ms)


def test_michelin_delete_example_bare_message():
    """README: a delete of {"id": 1, "email": "john@doe.com"}; its changeMask has only the key bit."""
    [delete] = run(fixture(DELETE), table="customers")
    assert (delete["op"], delete["after"]) == ("DELETE", None)
    assert delete["before"] == {"id": "1", "email": "john@doe.com"}
    # "only primary-key (or unique index) columns have the associated bits set": the key, without metadata
    assert delete["key_columns"] == ["id"]
    assert "key_from_delete_mask" in delete["flags"]
    assert delete["tx_id"] == "1"


# --- mask validity facts -------------------------------------------------------------------------
def flags_of(*values: str) -> list[str]:
    *_, last = changes(run(fixture(METADATA), *values))
    return last["flags"] or []


def test_insert_mask_must_name_every_non_lob_column():
    assert flags_of(data_message("INSERT", ROW, change_mask="0F", column_mask="0F")) == []
    assert flags_of(data_message("INSERT", ROW, change_mask="07", column_mask="0F")) == ["insert_mask_incomplete"]


def test_delete_mask_must_be_exactly_the_key():
    assert flags_of(data_message("DELETE", None, ROW, change_mask="05", column_mask="0F")) == []
    assert flags_of(data_message("DELETE", None, ROW, change_mask="01", column_mask="0F")) == ["delete_mask_not_key"]


def test_update_mask_must_agree_with_the_images():
    new = {**ROW, "salary": 1}
    assert flags_of(data_message("UPDATE", new, ROW, change_mask="02", column_mask="0F")) == []
    assert flags_of(data_message("UPDATE", new, ROW, change_mask="08", column_mask="0F")) == [
        "change_mask_disagrees_with_images"
    ]
    [event] = changes(run(fixture(METADATA), data_message("UPDATE", new, ROW, change_mask="08", column_mask="0F")))
    assert json.loads(event["detail"]) == {
        "mask_problems": ["changeMask of UPDATE names ['to_date'], data and beforeData differ in ['salary']"]
    }


def test_no_bit_beyond_the_column_count_and_hex_only():
    assert flags_of(data_message("INSERT", ROW, change_mask="1F", column_mask="0F")) == ["mask_bit_beyond_columns"]
    assert flags_of(data_message("INSERT", ROW, change_mask="0F", column_mask="0F00")) == []
    assert flags_of(data_message("INSERT", ROW, change_mask="0F", column_mask="0F01")) == ["mask_bit_beyond_columns"]
    assert flags_of(data_message("INSERT", ROW, change_mask="F", column_mask="0F")) == ["mask_odd_length"]
    bad = changes(run(fixture(METADATA), data_message("INSERT", ROW, change_mask="0X", column_mask="0F")))[0]
    assert bad["flags"] == ["mask_not_hex"] and bad["changed_columns"] is None  # quarantined by its rule


def test_column_mask_absent_means_not_replicated_not_null():
    """Oracle without full supplemental logging: salary (ordinal 2) could not be replicated."""
    new = {**ROW, "salary": None, "to_date": "1999-01-01"}
    [event] = changes(run(fixture(METADATA), data_message("UPDATE", new, {**ROW, "salary": None}, "08", "0D")))
    assert "salary" not in event["after"] and "salary" not in event["before"]  # absent: gold keeps it
    assert event["after"]["to_date"] == "1999-01-01"
    assert event["present_columns"] == ["emp_no", "from_date", "to_date"]
    assert event["flags"] is None
    # a value whose column-mask bit is clear is evidence the column was replicated: kept, flagged
    [kept] = changes(run(fixture(METADATA), data_message("INSERT", ROW, change_mask="0F", column_mask="0D")))
    assert kept["after"]["salary"] == "49592"
    assert kept["flags"] == ["column_mask_misses_value"]


def test_images_list_their_columns_in_the_tables_order_whatever_the_json_order():
    """Silver shows a row as the table has it: by ordinal, a column the metadata lacks last."""
    backwards = dict(reversed(list(ROW.items())))
    extra = {"note": "x", **backwards}
    events = changes(
        run(
            fixture(METADATA),
            data_message("INSERT", backwards, change_mask="0F"),
            data_message("INSERT", backwards, change_mask="0F", sequence="20180413201358280000000000000000020"),
            data_message("UPDATE", extra, backwards, sequence="20180413201358280000000000000000021"),
        )
    )
    in_order = ["emp_no", "salary", "from_date", "to_date"]
    assert [list(e["after"]) for e in events] == [in_order, in_order, [*in_order, "note"]]
    assert list(events[2]["before"]) == in_order
    assert events[2]["flags"] == ["column_not_in_metadata"]


def test_external_schema_id_changes_are_schema_changes():
    first = data_message("INSERT", ROW, change_mask="0F", column_mask="0F", externalSchemaId="7")
    same = data_message("UPDATE", {**ROW, "salary": 2}, ROW, "02", "0F", "20180413201358280000000000000000020")
    same = same.replace('"externalSchemaId": null', '"externalSchemaId": "7"')
    changed = same.replace('"externalSchemaId": "7"', '"externalSchemaId": "8"')
    events = run(fixture(METADATA), first, same, changed)
    marks = [(e["kind"], e["op"]) for e in events]
    assert marks == [
        ("schema_change", "METADATA"),
        ("schema_change", "EXTERNAL_SCHEMA_ID"),
        ("change", "INSERT"),
        ("change", "UPDATE"),
        ("schema_change", "EXTERNAL_SCHEMA_ID"),
        ("change", "UPDATE"),
    ]
    detail = json.loads(events[4]["detail"])
    assert (detail["externalSchemaId"], detail["messageSchemaId"]) == ("8", SCHEMA_ID)
    assert events[4]["bronze_ref"] == events[5]["bronze_ref"] == "test.jsonl:3"
    # a later run knows the ids from the earlier events: no new schema change for an id seen before
    again = run(changed, same, context=[e for e in events if e["kind"] == "schema_change"])
    assert [e["kind"] for e in again] == ["change", "change"]
    # a new version of the table starts anew: its first id is a schema change
    next_version = [fixture(METADATA).replace(SCHEMA_ID, "NEXT"), changed.replace(SCHEMA_ID, "NEXT")]
    [_, mark, _] = run(*next_version, context=[e for e in events if e["kind"] == "schema_change"])
    assert (mark["op"], json.loads(mark["detail"])["messageSchemaId"]) == ("EXTERNAL_SCHEMA_ID", "NEXT")


def test_binary_values_arrive_as_hex_and_become_base64():
    metadata = json.loads(fixture(METADATA))
    metadata["message"]["tableStructure"]["tableColumns"]["to_date"]["type"] = "BYTES"
    [event] = changes(run(json.dumps(metadata), data_message("INSERT", {**ROW, "to_date": "89504E47"}, None, "0F")))
    assert event["after"]["to_date"] == "iVBORw=="
    assert event["column_types"]["to_date"] == "binary"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("not json", "value: not valid JSON"),
        ('{"magic": "xxMSG", "type": "DT", "message": {}}', "magic: expected 'atMSG'"),
        ('{"magic": "atMSG", "type": "XX", "message": {}}', "type: unknown message type 'XX'"),
        ('{"something": "else"}', "neither a Qlik data message"),
        ('{"magic": "atMSG", "type": "MD", "message": {"lineage": {"table": "t"}}}', "tableColumns: missing"),
    ],
)
def test_malformed_messages_are_quarantined_with_the_reason(value, error):
    [event] = run(value)
    assert event["kind"] == "error" and error in event["error"], event["error"]


def test_unknown_operation_and_unordered_changes_are_quarantined():
    [unknown] = [e for e in run(fixture(METADATA), data_message("UPSERT", ROW)) if e["kind"] == "error"]
    assert "headers.operation: unknown operation 'UPSERT'" in unknown["error"]
    [unordered] = [e for e in run(fixture(METADATA), data_message("INSERT", ROW, sequence="")) if e["kind"] == "error"]
    assert "headers.changeSequence: missing on a INSERT" in unordered["error"]


# --- expectations --------------------------------------------------------------------------------
def test_expectation_rules_load_against_the_event_schema(spark):
    rules = {r.name: r for r in load_rules(REPO / "expectations", "silver", "qlik-json", EVENT_SCHEMA)}
    assert rules["mask_is_hex"].action.value == "quarantine"
    for name in ("mask_even_length", "mask_bits_within_columns", "insert_mask_complete", "delete_mask_is_key"):
        assert rules[name].action.value == "warn"
    assert {"update_mask_matches_images", "column_mask_covers_data", "message_parsed"} <= set(rules)


# --- end to end ----------------------------------------------------------------------------------
def test_ingest_metadata_then_data_gives_gold_salaries(spark, storage, tmp_path):
    folder = tmp_path / "qlik"
    folder.mkdir()
    shutil.copyfile(shared_path("fixtures", FIXTURES, METADATA), folder / "1-metadata.json")
    shutil.copyfile(shared_path("fixtures", FIXTURES, DATA), folder / "2-data.json")
    summary = ingest(spark, "qlik-json", folder, storage, layout="files")
    [table] = [t for t in summary.discovery.tables if t.table == "salaries"]
    assert table.keys == ("emp_no", "from_date")
    assert list(table.columns) == ["emp_no", "salary", "from_date", "to_date"]
    [row] = gold_rows(spark, storage, "salaries", 1)
    assert {k: row[k] for k in table.columns} == {
        "emp_no": 14472,
        "salary": 49592,
        "from_date": dt.date(1993, 11, 25),
        "to_date": dt.date(1994, 11, 25),
    }
    [schema_change] = read_rows(spark, storage, "silver_schema_changes")
    assert schema_change["source_table"] == "salaries"


def test_embedded_sample_end_to_end(spark, storage):
    """The `make run` sample (conf/sources/qlik.yml): full load, CDC, a new column, masks."""
    conf = load_conf(REPO / "conf" / "local.yml")
    conf = replace(
        conf,
        storage=storage,
        sources=tuple(s for s in conf.sources if s.name == "hr"),
        tables=tuple(t for t in conf.tables if t.source == "hr"),
    )
    run_pipeline(conf, spark=spark)
    employees = {r["emp_no"]: r for r in gold_rows(spark, storage, "employees", 1)}
    assert sorted(employees) == [2, 3, 4]  # 1 deleted
    assert str(employees[2]["salary"]) == "67000.00"
    assert (employees[3]["first_name"], employees[3]["last_name"]) == ("Partho", "Bamford")  # not replicated: kept
    assert employees[4]["email"] == "chirstian.koblick@example.com"  # column added by metadata version 2
    assert employees[2]["hired"] == dt.date(1985, 11, 21)
    dept = {(r["emp_no"], r["dept_no"]): r for r in gold_rows(spark, storage, "dept_emp", 1)}
    assert sorted(dept) == [(1, "d005"), (2, "d007"), (4, "d004")]
    assert dept[(2, "d007")]["to_date"] == dt.date(2024, 1, 5)  # odd-length mask: flagged, applied
    assert dept[(4, "d004")]["to_date"] == dt.date(9999, 1, 1)  # its non-hex-mask update was quarantined
    [quarantined] = read_rows(spark, storage, "silver_hr_quarantine")
    assert quarantined["failed_expectations"] == ["mask_is_hex"]
    kinds = [r["op"] for r in read_rows(spark, storage, "silver_schema_changes")]
    assert sorted(kinds) == ["EXTERNAL_SCHEMA_ID"] * 3 + ["METADATA"] * 3
    assert datasets(storage)["bronze_hr"]["rows"] == 16


def test_sample_file_is_what_the_conf_reads():
    conf = load_conf(REPO / "conf" / "local.yml")
    [source] = [s for s in conf.sources if s.name == "hr"]
    assert source.format == "qlik-json" and source.input is not None
    assert source.input.path == (REPO / "samples" / "qlik" / "hr.jsonl").resolve()
    assert Path(source.input.path).is_file()


# --- on every core -------------------------------------------------------------------------------
def test_a_batch_is_parsed_on_every_core_and_each_data_message_finds_its_metadata(spark, tmp_path):
    """Data messages are split over the groups of the stateful operator (by position, or by table
    version and externalSchemaId) and every group sees every metadata message, so the groups'
    parses give the events of one whole pass: a data message ahead of its metadata, a metadata
    message repeated (flagged once), one whose metadata never comes (held once), each external
    id's first sight."""
    from cdc_medallion.adhoc import adhoc_conf
    from cdc_medallion.formats.base import messages_of
    from cdc_medallion.generator.history import generate_history
    from cdc_medallion.generator.renderers import render
    from cdc_medallion.model import BRONZE_SCHEMA
    from cdc_medallion.parsing.stateful import COPY, GROUP, STATE_LAYOUT, _grouped
    from cdc_medallion.sources.files import FileLanding

    rendered = render(generate_history(tables=3, transactions=40, seed=5), "qlik-json", tmp_path / "input")
    lines = lines_of(rendered.path.read_text(encoding="utf-8"))
    first_metadata = json.loads(lines[0])["value"]
    late_metadata = json.loads(fixture(METADATA))
    late_metadata["messageSchemaId"] = late_metadata["message"]["schemaId"] = "LATER"
    late_metadata["message"]["lineage"]["table"] = "salaries_later"
    ahead = data_message("INSERT", ROW, change_mask="0F").replace(SCHEMA_ID, "LATER")
    never = data_message("INSERT", ROW, change_mask="0F").replace(SCHEMA_ID, "NEVER")
    marked = [  # two ids, each seen twice: a schema change for the first sight of each
        data_message("INSERT", {**ROW, "emp_no": n}, change_mask="0F", externalSchemaId=i).replace(SCHEMA_ID, "LATER")
        for n, i in ((1, "7"), (2, "8"), (3, "7"), (4, "8"))
    ]
    extra = [ahead, json.dumps(late_metadata), first_metadata, never, *marked]
    with rendered.path.open("a", encoding="utf-8") as out:
        for offset, value in enumerate(extra):
            out.write(json.dumps({"topic": "extra", "partition": 0, "offset": offset, "key": None, "value": value}))
            out.write("\n")
    conf = adhoc_conf(rendered.format, rendered.path, tmp_path / "s", [], [], layout=rendered.layout)
    landed = FileLanding(conf.sources[0], max_messages=100_000).next_batch().to_arrow()
    parser = get_format("qlik-json")("test")
    bronze = spark.createDataFrame(landed, schema=BRONZE_SCHEMA)

    fed = _grouped(parser, bronze, STATE_LAYOUT)
    assert fed.columns == [*bronze.columns, GROUP, COPY]
    # the envelope is parsed once per message, not once per field the split reads (over a
    # repartition: Spark would compute a projection of local rows while it plans it)
    plan = _grouped(parser, bronze.repartition(1), STATE_LAYOUT)._jdf.queryExecution().executedPlan()
    assert plan.toString().count("from_json(") == 1
    own_groups = {r[GROUP] for r in fed.filter(~fed[COPY]).select(GROUP).collect()}
    assert len(own_groups) >= 3  # the metadata's group and at least two buckets of data messages
    metadata_messages = sum(1 for line in [*lines, *[json.dumps({"value": v}) for v in extra]] if '\\"MD\\"' in line)
    assert fed.filter(fed[COPY]).count() == metadata_messages * 16  # each in every other group

    def outcome(event: dict[str, Any]) -> tuple:
        after = event["after"]
        after = sorted(after.items() if isinstance(after, dict) else after) if after is not None else None
        flags = tuple(event["flags"] or ())
        return (event["bronze_ref"], event["kind"], event["op"], event["sequence"], event["detail"], flags, str(after))

    split = sorted(outcome(row.asDict()) for row in parse(parser, bronze).collect())
    messages = [m for batch in landed.to_batches() for m in messages_of(batch)]
    whole = sorted(outcome(e) for e in parser.parse_all(messages, []).to_pylist())
    assert split == whole
    assert [o[1] for o in split if o[0] == "extra/0/0"] == ["change"]  # found its metadata, which came after it
    assert [o[5] for o in split if o[0] == "extra/0/2"] == [("metadata_repeated",)]
    assert [o[1] for o in split if o[0] == "extra/0/3"] == ["held"]
    assert [o[0] for o in split if o[2] == "EXTERNAL_SCHEMA_ID"] == ["extra/0/4", "extra/0/5"]
    assert not [o for o in split if o[1] == "error"]


def test_a_checkpoint_from_before_the_split_keeps_parsing_in_one_group(spark, storage, tmp_path):
    """A silver checkpoint made when Qlik was parsed in one group (layout 1, no layout written
    down) holds its catalog and held messages in that group's state: the next runs must go on in
    one group, or a data message whose metadata came in an earlier run finds none."""
    from cdc_medallion.names import CHECKPOINT_DIR
    from cdc_medallion.parsing.stateful import LAYOUT_CONF, STATE_LAYOUT

    folder = tmp_path / "qlik"
    folder.mkdir()
    later = json.loads(fixture(METADATA))
    later["messageSchemaId"] = later["message"]["schemaId"] = "LATER"
    later["message"]["lineage"]["table"] = "salaries_later"
    waiting = data_message("INSERT", {**ROW, "emp_no": 7}, change_mask="0F").replace(SCHEMA_ID, "LATER")
    first = [fixture(METADATA), data_message("INSERT", ROW, change_mask="0F"), waiting]

    def lines(values: list[str]) -> str:
        return "".join(json.dumps(json.loads(v)) + "\n" for v in values)

    (folder / "1.jsonl").write_text(lines(first), encoding="utf-8")
    spark.conf.set(LAYOUT_CONF, "1")  # the run of a version that parsed Qlik in one group
    try:
        ingest(spark, "qlik-json", folder, storage, layout="json-lines")
    finally:
        spark.conf.unset(LAYOUT_CONF)
    [silver_checkpoint] = [p for p in (storage / CHECKPOINT_DIR).iterdir() if (p / "state").is_dir()]
    assert (silver_checkpoint / "cdc_medallion_state_layout").read_text() == str(STATE_LAYOUT)  # a new one's
    (silver_checkpoint / "cdc_medallion_state_layout").unlink()  # that version wrote none

    # Split, the update would go by its position (2.jsonl:0) to a bucket other than group 0, where
    # the old state and its catalog are: there it would wait for metadata that came long ago.
    update = data_message("UPDATE", {**ROW, "salary": 50000}, ROW, "02", "0F", "20180413201358280000000000000000020")
    second = [update, json.dumps(later)]
    (folder / "2.jsonl").write_text(lines(second), encoding="utf-8")
    ingest(spark, "qlik-json", folder, storage, layout="json-lines")

    assert (silver_checkpoint / "cdc_medallion_state_layout").read_text() == "1"
    [row] = gold_rows(spark, storage, "salaries", 1)
    assert row["salary"] == 50000  # its metadata came in the first run
    [late] = gold_rows(spark, storage, "salaries_later", 1)
    assert late["emp_no"] == 7  # held in the first run, completed in the second
    assert not [r for r in read_rows(spark, storage, "silver_qlik_json") if r["kind"] == "error"]
