"""DTS Avro: records written with fastavro against the shipped official schema, decoded back.

Parser-level tests cover every union value type and every operation; two end-to-end runs cover
the Kafka-dump layout (shop.items) and the one-message-per-file layout (typed gold rows).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import os
from pathlib import Path

import pytest

from cdc_medallion.errors import ConfigError
from cdc_medallion.formats import get_format
from cdc_medallion.formats.dts_avro import SCHEMA_FILE
from cdc_medallion.storage.delta_store import DeltaStore
from tests import dts_avro_builder as b
from tests.conftest import shared_path
from tests.helpers import datasets, gold_name, gold_rows, ingest, parse, read_rows

FAMILY = "dts-avro"
ITEMS = [("id", 3), ("name", 253), ("price", 246)]


def item(op: str, record_id: int, before=None, after=None, offset: int = 0) -> bytes:
    return b.encode(
        b.record(
            op,
            "shop.items",
            record_id=record_id,
            position=f"{1000 + offset}@7",
            fields=ITEMS,
            before=before,
            after=after,
        )
    )


def row(item_id: int, name: str, price: str) -> list:
    return [b.integer(item_id, 4), b.character(name), b.decimal(price, 8, 2)]


def test_shipped_schema_is_the_official_one():
    official = shared_path("fixtures", "dts-avro", "aliyun_aliyun-dts-subscribe-sdk-java__Record.SCHEMA.json")
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == json.loads(official.read_text(encoding="utf-8"))


# --- every value type -------------------------------------------------------------------------
EXPECTED_ALL_TYPES = {
    "id": ("1", "bigint"),
    "small": ("-7", "bigint"),
    "name": ("Zoë", "string"),
    "latin": ("café", "string"),
    "raw": (base64.b64encode(b"\x00\xffab").decode(), "binary"),
    "price": ("12345.67", "decimal(10,2)"),
    "ratio": ("0.1", "double"),
    "created": ("2023-11-14 22:13:20.123456", "timestamp"),
    "updated": ("2024-02-29 13:45:30.250000", "timestamp"),
    "birthday": ("1990-07-14", "date"),
    "alarm": ("-838:59:59", "string"),
    "vintage": ("2023", "int"),
    "zoned": ("2024-01-01 00:00:00", "timestamp"),
    "photo": (base64.b64encode(b"\x89PNG\r\n").decode(), "binary"),
    "doc": ('{"a": [1, 2]}', "string"),
    "place": (base64.b64encode(bytes.fromhex("0101000000000000000000F03F0000000000000040")).decode(), "binary"),
    "shape": ("POINT(1 2)", "string"),
    "note": (None, None),  # EmptyObject NULL; VAR_STRING may be text or binary: no type from the code
    "nothing": (None, None),  # Avro null
}


def test_every_value_type_becomes_typed_text():
    raw = b.encode(
        b.record(
            "INSERT",
            "shop.everything",
            record_id=10,
            position="72469@78",
            fields=b.ALL_TYPES_FIELDS,
            after=b.all_types_row(1),
        )
    )
    [event] = parse(FAMILY, raw)
    assert (event["kind"], event["op"], event["source_db"], event["source_table"]) == (
        "change",
        "INSERT",
        "shop",
        "everything",
    )
    assert event["after"] == {c: text for c, (text, _) in EXPECTED_ALL_TYPES.items()}
    expected_types = {c: t for c, (_, t) in EXPECTED_ALL_TYPES.items() if t}
    assert event["column_types"] == expected_types
    assert event["source_types"]["price"] == "NEWDECIMAL(246)" and event["source_types"]["alarm"] == "TIME2(19)"
    assert event["key_columns"] == ["id"]
    assert event["event_ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert event["sequence"].startswith("0000000078:00000000000000072469:00000000000000000010|")


def test_empty_object_none_is_an_absent_column_and_null_values_type_from_mysql_codes():
    fields = [("id", 8), ("at", 12), ("body", 252)]
    after = [b.integer(1), None, b.empty("NONE")]
    [event] = parse(
        FAMILY, b.encode(b.record("UPDATE", "d.t", record_id=1, position="1@1", fields=fields, after=after))
    )
    assert event["after"] == {"id": "1", "at": None}  # body: not captured (e.g. an unlogged LOB)
    assert event["column_types"] == {"id": "bigint", "at": "timestamp"}
    assert event["flags"] is None and event["before"] is None


@pytest.mark.parametrize(
    ("value", "text", "spark"),
    [
        (b.integer(2**63), str(2**63), "decimal(38,0)"),
        (b.decimal("1.5", 0, 1), "1.5", "string"),  # no precision: any number of digits, exact text
        (b.floating(float("nan")), "NaN", "double"),
        (b.character("中文", "gbk"), "中文", "string"),
        (
            b.timestamp_with_zone("Asia/Shanghai", year=2024, month=6, day=1, hour=8, minute=0, second=0),
            "2024-06-01 00:00:00",
            "timestamp",
        ),
        (
            b.timestamp_with_zone("GMT-05:30", year=2024, month=6, day=1, hour=0, minute=0, second=0),
            "2024-06-01 05:30:00",
            "timestamp",
        ),
        (b.datetime(year=0, month=0, day=0, hour=0, minute=0, second=0), "0000-00-00 00:00:00", "timestamp"),
    ],
)
def test_edge_values(value, text, spark):
    raw = b.encode(b.record("INSERT", "d.t", record_id=1, position="1@1", fields=[("v", 0)], after=[value]))
    [event] = parse(FAMILY, raw)
    assert (event["after"]["v"], event["column_types"]["v"]) == (text, spark)


def test_fraction_unit_option():
    raw = b.encode(
        b.record("INSERT", "d.t", record_id=1, position="1@1", fields=[("v", 7)], after=[b.timestamp(0, 250)])
    )
    assert parse(FAMILY, raw)[0]["after"]["v"] == "1970-01-01 00:00:00.000250"
    assert parse(FAMILY, raw, options={"fraction_unit": "millis"})[0]["after"]["v"] == "1970-01-01 00:00:00.250000"
    with pytest.raises(ConfigError, match=r"key 'options\.fraction_unit': must be one of micros, millis, got 'nanos'"):
        get_format(FAMILY)("s", {"fraction_unit": "nanos"})


def test_values_that_cannot_be_read_are_quarantined_with_the_column():
    cases = [
        (b.raw_character(b"\xff\xfe", "utf8mb4"), "afterImages.v: bytes are not utf8mb4 text"),
        (b.raw_character(b"x", "klingon"), "afterImages.v: cannot read Character"),
        (b.integer("12a"), "afterImages.v: cannot read Integer"),
        (b.timestamp_with_zone("Mars/Olympus", year=2024, month=1, day=1, hour=0), "afterImages.v: cannot read"),
    ]
    for value, reason in cases:
        raw = b.encode(b.record("INSERT", "d.t", record_id=1, position="1@1", fields=[("v", 0)], after=[value]))
        [event] = parse(FAMILY, raw)
        assert event["kind"] == "error" and event["error"].startswith(reason), event["error"]


# --- every operation ---------------------------------------------------------------------------
def test_update_and_delete_images():
    [update] = parse(FAMILY, item("UPDATE", 3, before=row(1, "pen", "1.00"), after=row(1, "pen", "1.50")))
    assert update["before"]["price"] == "1.00" and update["after"]["price"] == "1.50"
    assert update["changed_columns"] == ["price"]
    [delete] = parse(FAMILY, item("DELETE", 4, before=row(2, "ink", "3.00")))
    assert delete["after"] is None and delete["before"] == {"id": "2", "name": "ink", "price": "3.00"}


def test_ddl_transactions_heartbeats_and_other_operations():
    ddl = b.record(
        "DDL", "shop", record_id=1, position="67008@78", after="create table t1(a bigint primary key)", keys=None
    )
    [schema] = parse(FAMILY, b.encode(ddl))
    assert (schema["kind"], schema["op"], schema["source_db"], schema["detail"]) == (
        "schema_change",
        "DDL",
        "shop",
        "create table t1(a bigint primary key)",
    )
    for operation, kind in [
        ("BEGIN", "transaction"),
        ("COMMIT", "transaction"),
        ("ROLLBACK", "transaction"),
        ("HEARTBEAT", "heartbeat"),
        ("CHECKPOINT", "message"),
        ("INIT", "message"),
        ("NOOP", "message"),
    ]:
        raw = b.encode(b.record(operation, None, record_id=5, position="1@1", keys=None, txid="5.3.1234"))
        [event] = parse(FAMILY, raw)
        assert (event["kind"], event["op"], event["tx_id"]) == (kind, operation, "5.3.1234")
        assert event["event_ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    [begin] = parse(FAMILY, b.encode(b.record("BEGIN", None, record_id=5, position="1@1", keys=None)))
    assert begin["tx_id"] is None and begin["tx_last"] is False  # MySQL sources write txid 0


def test_order_is_binlog_file_then_offset_then_record_id():
    sequences = [
        parse(FAMILY, b.encode(b.record("HEARTBEAT", None, record_id=i, position=p, keys=None)), line=9 - n)[0][
            "sequence"
        ]
        for n, (i, p) in enumerate([(1, "99999@7"), (2, "5@8"), (3, "5@8"), (4, "100@8")])
    ]
    assert sorted(sequences) == sequences


def test_keys_from_pk_uk_info():
    unique = b.record(
        "INSERT",
        "d.t",
        record_id=1,
        position="1@1",
        fields=[("code", 253)],
        after=[b.character("a")],
        keys=None,
        tags={"pk_uk_info": '{"uk_code": ["code"]}'},
    )
    assert parse(FAMILY, b.encode(unique))[0]["key_columns"] == ["code"]
    broken = {**unique, "tags": {"pk_uk_info": "PRIMARY(id)"}}
    [event] = parse(FAMILY, b.encode(broken))
    assert event["key_columns"] is None and event["flags"] == ["pk_uk_info_unreadable"]


def test_invalid_avro_is_quarantined_with_the_reason():
    valid = item("INSERT", 1, after=row(1, "pen", "1.00"))
    for raw, reason in [
        (b"this is not avro", "value: not a DTS Avro Record"),
        (valid[:-4], "value: not a DTS Avro Record: EOFError"),
        (b"", "value: empty message"),
    ]:
        [event] = parse(FAMILY, raw)
        assert event["kind"] == "error" and event["error"].startswith(reason), event["error"]
    mismatch = b.record("INSERT", "d.t", record_id=1, position="1@1", fields=[("a", 3), ("b", 3)], after=[b.integer(1)])
    assert parse(FAMILY, b.encode(mismatch))[0]["error"] == "afterImages: 1 values for 2 fields"
    no_table = b.record("INSERT", "d", record_id=1, position="1@1", fields=[("a", 3)], after=[b.integer(1)])
    assert parse(FAMILY, b.encode(no_table))[0]["error"] == "objectName: INSERT needs db.table, got 'd'"


def test_trailing_born_timestamp_of_newer_producers_is_accepted():
    valid = item("INSERT", 1, after=row(1, "pen", "1.00"))
    born = bytes([0xB0, 0xC8, 0xCB, 0xA5, 0x0C])  # a zig-zag long, as a trailing bornTimestamp field
    [event] = parse(FAMILY, valid + born)
    assert event["kind"] == "change" and event["flags"] is None
    [odd] = parse(FAMILY, valid + b"\x80\x80")
    assert odd["kind"] == "change" and odd["flags"] == ["trailing_bytes:2"]


# --- end to end --------------------------------------------------------------------------------
def test_kafka_dump_of_shop_items_leaves_the_one_remaining_row(spark, storage, tmp_path):
    values = [
        item("INSERT", 1, after=row(1, "pen", "1.00"), offset=0),
        item("INSERT", 2, after=row(2, "ink", "3.00"), offset=1),
        item("UPDATE", 3, before=row(1, "pen", "1.00"), after=row(1, "pen", "1.50"), offset=2),
        item("DELETE", 4, before=row(2, "ink", "3.00"), offset=3),
    ]
    source = tmp_path / "items.jsonl"
    source.write_text(b.kafka_dump(values, topic="dts_shop"), encoding="utf-8")
    ingest(spark, FAMILY, source, storage, layout="kafka-dump")  # pk_uk_info keys the table
    current = [(r["id"], r["name"], r["price"]) for r in gold_rows(spark, storage, "items", 1)]
    assert current == [(1, "pen", decimal.Decimal("1.50"))]
    history = sorted(gold_rows(spark, storage, "items", 2), key=lambda r: (r["id"], r["__START_AT"]))
    assert [(r["id"], str(r["price"]), r["__END_AT"] is None) for r in history] == [
        (1, "1.00", False),
        (1, "1.50", True),
        (2, "3.00", False),
    ]
    assert read_rows(spark, storage, "silver_dts_avro")[0]["bronze_ref"].startswith("dts_shop/0/")


def test_files_layout_round_trips_every_value_type_into_typed_gold(spark, storage, tmp_path):
    records = [
        b.record("BEGIN", None, record_id=1, position="10@1", keys=None),
        b.record(
            "INSERT",
            "shop.everything",
            record_id=2,
            position="20@1",
            fields=b.ALL_TYPES_FIELDS,
            after=b.all_types_row(1),
        ),
        b.record(
            "INSERT",
            "shop.everything",
            record_id=3,
            position="30@1",
            fields=b.ALL_TYPES_FIELDS,
            after=b.all_types_row(2, note=b.character("hi")),
        ),
        b.record("COMMIT", None, record_id=4, position="40@1", keys=None),
        b.record(
            "UPDATE",
            "shop.everything",
            record_id=5,
            position="50@1",
            fields=b.ALL_TYPES_FIELDS,
            before=b.all_types_row(2, note=b.character("hi")),
            after=b.all_types_row(2, name="Zoe", note=b.empty("NONE")),
        ),
        b.record("DDL", "shop", record_id=6, position="60@1", after="ALTER TABLE everything ADD x INT", keys=None),
        b.record("HEARTBEAT", None, record_id=7, position="70@1", keys=None),
    ]
    folder = tmp_path / "dts"
    folder.mkdir()
    for index, value in enumerate(records):
        (folder / f"{index:03d}.avro").write_bytes(b.encode(value))
    (folder / "999.avro").write_bytes(b"\x00garbage")
    ingest(spark, FAMILY, folder, storage, layout="files")

    rows = {r["id"]: r for r in gold_rows(spark, storage, "everything", 1)}
    first, second = rows[1], rows[2]
    assert first["name"] == "Zoë" and second["name"] == "Zoe"
    assert second["note"] == "hi"  # NONE in the update: the previous value stays
    assert first["small"] == -7 and first["latin"] == "café" and bytes(first["raw"]) == b"\x00\xffab"
    assert first["price"] == decimal.Decimal("12345.67") and first["ratio"] == 0.1
    assert first["created"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert first["updated"] == dt.datetime(2024, 2, 29, 13, 45, 30, 250000)
    assert first["birthday"] == dt.date(1990, 7, 14) and first["alarm"] == "-838:59:59" and first["vintage"] == 2023
    assert first["zoned"] == dt.datetime(2024, 1, 1, 0, 0)
    assert bytes(first["photo"]) == b"\x89PNG\r\n" and bytes(first["place"])[:1] == b"\x01"
    assert first["doc"] == '{"a": [1, 2]}' and first["shape"] == "POINT(1 2)" and first["nothing"] is None
    schema = DeltaStore(storage, spark).schema(gold_name(storage, "everything", 1))
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    assert {c: types[c] for c in ("id", "price", "ratio", "created", "birthday", "vintage", "photo", "alarm")} == {
        "id": "bigint",
        "price": "decimal(10,2)",
        "ratio": "double",
        "created": "timestamp",
        "birthday": "date",
        "vintage": "int",
        "photo": "binary",
        "alarm": "string",
    }
    tables = datasets(storage)
    assert tables["bronze_dts_avro"]["rows"] == 8
    assert tables["silver_schema_changes"]["rows"] == 1 and tables["silver_heartbeats"]["rows"] == 1
    [quarantined] = read_rows(spark, storage, "silver_dts_avro_quarantine")
    assert quarantined["error"].startswith("value: not a DTS Avro Record") and quarantined["bronze_ref"].endswith(
        "999.avro:0"
    )
    kinds = sorted(r["kind"] for r in read_rows(spark, storage, "silver_dts_avro"))
    assert kinds == ["change", "change", "change", "heartbeat", "schema_change", "transaction", "transaction"]


# --- the embedded samples of `make run` (DTS Avro, SharePlex, Canal: the DTS family) ------------
def test_embedded_samples(spark, tmp_path):
    """The three conf fragments run together, as `make run` runs them, give the designed gold."""
    from cdc_medallion.config import load_conf
    from cdc_medallion.pipeline import run_pipeline

    repo = Path(__file__).resolve().parent.parent
    fragments = [repo / "conf" / "sources" / f"{f}.yml" for f in ("dts-avro", "shareplex-json", "canal-json")]
    conf_file = tmp_path / "samples.yml"
    conf_file.write_text(
        "pipeline:\n  name: dts_family_samples\n  storage: storage\n"
        f"  transformations: {repo / 'transformations'}\n  expectations: {repo / 'expectations'}\n"
        "include:\n" + "".join(f"  - {os.path.relpath(f, tmp_path)}\n" for f in fragments),
        encoding="utf-8",
    )
    storage = tmp_path / "storage"
    run_pipeline(load_conf(conf_file), spark=spark)

    items = {r["item_id"]: r for r in gold_rows(spark, storage, "stock_items", 1)}
    assert sorted(items) == [1, 2, 3, 4, 6]
    assert items[1]["price"] == decimal.Decimal("11.90") and bytes(items[1]["label_png"]) == b"\x89PNG"
    assert items[3]["title"] == "Note pad, squared" and items[3]["label_png"] is None
    suppliers = {r["supplier_id"]: r for r in gold_rows(spark, storage, "suppliers", 1)}
    assert sorted(suppliers) == [1, 2] and suppliers[1]["country"] == "Côte d'Ivoire"
    assert suppliers[2]["name"] == "Nordic Ink & Paper AB" and suppliers[1]["since"] == dt.date(2015, 3, 1)

    accounts = {r["account_id"]: r for r in gold_rows(spark, storage, "accounts", 1)}
    assert sorted(accounts) == [1, 3, 4] and accounts[1]["tier"] == "enterprise"
    assert accounts[3]["balance"] == decimal.Decimal("97000.50")
    contacts = {int(r["contact_id"]): r for r in gold_rows(spark, storage, "contacts", 1)}
    assert sorted(contacts) == [9000000000000000001, 9000000000000000002, 9000000000000000005]
    assert contacts[9000000000000000002]["email"] == "wile.e.coyote@acme.example"

    employees = {int(r["EMPLOYEE_ID"]): r for r in gold_rows(spark, storage, "EMPLOYEES", 1)}
    assert sorted(employees) == [100, 101, 103, 104, 105, 106]
    assert employees[103]["SALARY"] == decimal.Decimal("9900.00") and employees[103]["LAST_NAME"] == "Hunold"
    assert employees[104]["MANAGER_ID"] == 103 and employees[101]["DEPARTMENT_ID"] == 10
    assert (employees[106]["FIRST_NAME"], employees[106]["LAST_NAME"]) == ("David", "Austin-Lee")
    assert employees[100]["HIRE_DATE"] == dt.date(2003, 6, 17)
    departments = {int(r["DEPARTMENT_ID"]): r["LOCATION"] for r in gold_rows(spark, storage, "DEPARTMENTS", 1)}
    assert departments == {10: "Oslo", 20: "Stavanger", 30: "Trondheim"}

    tables = datasets(storage)
    assert [tables[f"silver_{s}_quarantine"]["rows"] for s in ("dts_warehouse", "sp_hr", "canal_crm")] == [1, 1, 2]
    assert tables["silver_heartbeats"]["rows"] == 2 and tables["silver_schema_changes"]["rows"] == 3 + 1 + 3
    assert [r["TITLE"] for r in gold_rows(spark, storage, "PROJECTS", 1)] == ["Data platform"]  # truncated first
