"""AWS DMS JSON: messages as DMS writes them to Kafka, end to end and in detail.

There is no shared fixture for this format; the messages follow the AWS DMS documentation for
Kafka/Kinesis targets (data and control records, BeforeImageSettings) and the `BI_` before-image
columns Apache Paimon's `aws-dms-json` parser reads.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from cdc_medallion.errors import ConfigError
from cdc_medallion.formats import get_format
from tests.helpers import datasets, gold_rows, ingest, parse, read_rows

FAMILY = "aws-dms-json"


def dms(
    operation: str, data: dict | None, record_type: str = "data", stamp: str = "2024-05-01T10:00:00.000001Z", **more
):
    metadata = {
        "timestamp": stamp,
        "record-type": record_type,
        "operation": operation,
        "partition-key-type": "primary-key",
        "schema-name": "sales",
        "table-name": "orders",
        "transaction-id": 42,
        **more.pop("metadata", {}),
    }
    return json.dumps({"data": data, "metadata": metadata, **more})


def test_full_load_then_changes_end_to_end(spark, storage, tmp_path):
    messages = [
        dms("load", {"order_id": 1, "status": "new", "total": 10.5}, stamp="2024-05-01T10:00:05Z"),
        dms("load", {"order_id": 2, "status": "new", "total": 20}, stamp="2024-05-01T10:00:05Z"),
        # changes cached during the full load: committed before the load rows were read
        dms("update", {"order_id": 2, "status": "paid", "total": 20}, stamp="2024-05-01T10:00:01Z"),
        dms("insert", {"order_id": 3, "status": "new", "total": 5}, stamp="2024-05-01T10:00:06Z"),
        dms("delete", {"order_id": 1, "status": "new", "total": 10.5}, stamp="2024-05-01T10:00:07Z"),
        dms("create-table", None, record_type="control"),
        '{"data": {"order_id": 9}}',
    ]
    source = tmp_path / "dms.jsonl"
    source.write_text("\n".join(messages) + "\n", encoding="utf-8")
    ingest(spark, FAMILY, source, storage, keys={"orders": "order_id"})
    current = {r["order_id"]: (r["status"], r["total"]) for r in gold_rows(spark, storage, "orders", 1)}
    assert current == {2: ("paid", 20.0), 3: ("new", 5.0)}  # landing order: the update follows the load
    [quarantined] = read_rows(spark, storage, "silver_aws_dms_json_quarantine")
    assert quarantined["error"] == "metadata: missing or not an object: not an AWS DMS message"
    assert datasets(storage)["silver_schema_changes"]["rows"] == 1


def test_operations_and_names():
    load, insert, delete = (
        parse(FAMILY, dms(op, {"order_id": 1, "note": None}))[0] for op in ("load", "insert", "delete")
    )
    assert [load["op"], insert["op"], delete["op"]] == ["SNAPSHOT", "INSERT", "DELETE"]
    assert (insert["source_schema"], insert["source_table"], insert["tx_id"]) == ("sales", "orders", "42")
    assert insert["event_ts"] == dt.datetime(2024, 5, 1, 10, 0, 0, 1, tzinfo=dt.UTC)
    assert insert["column_types"] == {"order_id": "bigint"} and insert["source_types"] == {"order_id": "json"}
    assert delete["before"] == {"order_id": "1", "note": None} and delete["after"] is None
    assert insert["flags"] == ["nulls_may_be_omitted"] and delete["flags"] is None
    assert parse(FAMILY, dms("insert", {"order_id": 1}), options={"include_null_and_empty": "true"})[0]["flags"] is None


def test_update_before_image_from_before_image_settings_or_bi_columns():
    after = {"order_id": 1, "status": "paid"}
    [settings] = parse(FAMILY, dms("update", after, **{"before-image": {"order_id": 1, "status": "new"}}))
    assert settings["before"] == {"order_id": "1", "status": "new"} and settings["changed_columns"] == ["status"]
    [columns] = parse(FAMILY, dms("update", {**after, "BI_order_id": 1, "BI_status": "new"}))
    assert columns["after"] == {"order_id": "1", "status": "paid"}
    assert columns["before"] == {"order_id": "1", "status": "new"}
    [named] = parse(FAMILY, dms("update", after, img={"order_id": 1}), options={"before_image_field": "img"})
    assert named["before"] == {"order_id": "1"} and named["changed_columns"] is None  # pk-only before image
    [none] = parse(FAMILY, dms("update", after))
    assert none["before"] is None and "before_image_missing" in none["flags"]


def test_control_records():
    [create] = parse(FAMILY, dms("create-table", None, record_type="control"))
    assert (create["kind"], create["source_table"], create["flags"]) == (
        "schema_change",
        "orders",
        ["dms:create-table"],
    )
    assert json.loads(create["detail"]) == {"operation": "create-table", "data": None}
    [truncate] = parse(FAMILY, dms("truncate-table", None, record_type="control"))
    assert (truncate["kind"], truncate["op"]) == ("change", "TRUNCATE")


def test_order_by_option():
    early = parse(FAMILY, dms("insert", {"order_id": 1}, stamp="2024-05-01T10:00:01Z"), line=2)[0]["sequence"]
    late = parse(FAMILY, dms("insert", {"order_id": 1}, stamp="2024-05-01T10:00:09Z"), line=1)[0]["sequence"]
    assert late < early  # landing position by default
    options = {"order_by": "timestamp"}
    early = parse(FAMILY, dms("insert", {"order_id": 1}, stamp="2024-05-01T10:00:01Z"), line=2, options=options)
    late = parse(FAMILY, dms("insert", {"order_id": 1}, stamp="2024-05-01T10:00:09Z"), line=1, options=options)
    assert early[0]["sequence"] < late[0]["sequence"]
    with pytest.raises(ConfigError, match=r"key 'options\.order_by': must be one of position, timestamp, got 'lsn'"):
        get_format(FAMILY)("s", {"order_by": "lsn"})


def test_errors_name_what_is_wrong():
    assert "unknown operation type 'merge'" in parse(FAMILY, dms("merge", {"order_id": 1}))[0]["error"]
    assert parse(FAMILY, dms("insert", None))[0]["error"] == "data: insert without `data`"
    bad = parse(FAMILY, dms("insert", {"order_id": 1}, record_type="heartbeat"))[0]["error"]
    assert bad == "metadata.record-type: expected data or control, got 'heartbeat'"
    assert [e["kind"] for e in parse(FAMILY, None)] == ["tombstone"]
    assert parse(FAMILY, "")[0]["error"] == "value: empty message: expected a JSON object"
