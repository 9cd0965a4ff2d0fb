"""The native (JVM) parse against the Python parser, message by message.

Every message goes through both: `DebeziumJson` with `native_parse` (Spark SQL for the messages it
takes, Python for the rest) and without (Python alone). Their silver events must be the same, on
the vendor's examples, the shared fixtures, a generated history under delivery chaos, and
variants made to fall outside what the native parse takes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from cdc_medallion.formats import get_format
from cdc_medallion.formats.debezium_native import CHECKS, failed_checks, native_events
from cdc_medallion.generator.chaos import malform, redeliver
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.output import generate
from cdc_medallion.lines import lines_of
from cdc_medallion.model import BRONZE_SCHEMA
from tests.conftest import shared_path
from tests.test_debezium_json import repaired, seed_examples

FLOAT_TYPES = ("double", "float")


def bronze_rows(records: list[dict[str, Any]]) -> list[tuple]:
    """Kafka-dump records (topic, partition, offset, key, value) as bronze rows."""
    encode = lambda text: None if text is None else text.encode("utf-8", "surrogatepass")  # noqa: E731
    rows = []
    for offset, record in enumerate(records):
        rows.append(
            (
                encode(record.get("key")),
                record["value"] if isinstance(record.get("value"), bytes) else encode(record.get("value")),
                record.get("topic", "server1.inventory.customers"),
                0,
                offset,
                None,
                None,
                "test",
                None,
                None,
                None,
                None,
            )
        )
    return rows


def generated_records(folder: Path) -> list[dict[str, Any]]:
    """A generated Debezium history, redelivered, with garbage messages among it."""
    history = generate_history(tables=3, transactions=60, seed=11)
    [rendered] = generate(history, ["debezium-json"], folder)
    lines = lines_of(rendered.path.read_text(encoding="utf-8"))
    rnd = random.Random(5)
    lines, _ = malform(redeliver(lines, rnd), rnd, rate=0.03)
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        records.append(record if isinstance(record, dict) and "value" in record else {"value": line})
    return records


def fixture_records() -> list[dict[str, Any]]:
    records = [{"value": example} for example in seed_examples()]
    records += [{"value": repaired(example)} for example in seed_examples()]
    for folder in ("debezium-json", "kafka-connect-json"):
        for path in sorted(shared_path("fixtures", folder).glob("*.txt")):
            records += [{"value": line} for line in lines_of(path.read_text(encoding="utf-8"))]
    return records


def envelope_insert() -> dict[str, Any]:
    """A real schema-envelope insert from the fixtures, to bend."""
    return next(r for r in fixture_records() if r["value"].startswith('{"schema":{') and '"op":"c"' in r["value"])


def variants(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One real message bent in the ways the native parse must hand to Python (or read alike)."""
    value = record["value"]
    document = json.loads(value)
    after = document["payload"]["after"]
    column = next(iter(after))
    bent: list[Any] = [
        value + " x",  # trailing text
        value + "}",  # a closing brace too many
        value + "," + value,  # two messages in one
        "\ufeff" + value,  # a byte-order mark
        value.replace('"payload"', '"payload" ', 1),  # JSON whitespace only
        json.dumps({**document, "schema": None}),  # schemaless
        json.dumps({"payload": document["payload"], "schema": document["schema"]}),  # other key order
        json.dumps({**document, "payload": None}),  # a null payload
        json.dumps({**document, "payload": {**document["payload"], "op": "m"}}),
        json.dumps({**document, "payload": {**document["payload"], "op": 5}}),
        json.dumps({**document, "payload": {**document["payload"], "after": "x"}}),
        json.dumps({**document, "payload": {**document["payload"], "after": {**after, "extra": 1}}}),
        json.dumps({**document, "payload": {**document["payload"], "after": {**after, column: 1.50}}}),
        json.dumps({**document, "payload": {**document["payload"], "after": {**after, column: {"a": [1]}}}}),
        json.dumps(
            {**document, "payload": {**document["payload"], "after": {**after, column: "__debezium_unavailable_value"}}}
        ),
        json.dumps(
            {**document, "payload": {**document["payload"], "source": {**document["payload"]["source"], "table": 5}}}
        ),
        json.dumps(
            {
                **document,
                "payload": {**document["payload"], "source": {**document["payload"]["source"], "table": "a.b"}},
            }
        ),
        json.dumps(
            {**document, "payload": {**document["payload"], "source": {**document["payload"]["source"], "lsn": "12x"}}}
        ),
        json.dumps(
            {**document, "payload": {**document["payload"], "source": {**document["payload"]["source"], "lsn": "0042"}}}
        ),
        json.dumps(
            {**document, "payload": {**document["payload"], "source": {**document["payload"]["source"], "txId": -3}}}
        ),
        json.dumps({**document, "payload": {**document["payload"], "ts_ms": 99999999999999999}}),
        value.replace(f'"{column}":', f'"{column}": 1, "{column}":', 1) if f'"{column}":' in value else value,
        b"\xff" + value.encode(),  # not UTF-8
        "",
        None,
    ]
    return [{**record, "value": v} for v in bent]


def events_by_message(spark, records: list[dict[str, Any]], native: bool) -> dict[str, list[dict[str, Any]]]:
    bronze = spark.createDataFrame(bronze_rows(records), BRONZE_SCHEMA)
    parser = get_format("debezium-json")("test", {"native_parse": native})
    by_message: dict[str, list[dict[str, Any]]] = {}
    for row in parser.parse(bronze).collect():
        by_message.setdefault(row["bronze_ref"], []).append(row.asDict(recursive=True))
    return by_message


def same_value(column_type: str | None, ours: Any, theirs: Any) -> bool:
    """Value-exact: a float column's `1.5` and `1.50` are the same double."""
    if ours == theirs:
        return True
    if column_type in FLOAT_TYPES and ours is not None and theirs is not None:
        return float(ours) == float(theirs)
    return False


def differences(native: dict[str, list[dict]], python: dict[str, list[dict]]) -> list[str]:
    found = []
    for ref in sorted(set(native) | set(python)):
        ours, theirs = native.get(ref, []), python.get(ref, [])
        if len(ours) != len(theirs):
            found.append(f"{ref}: {len(ours)} events natively, {len(theirs)} in Python")
            continue
        for one, other in zip(ours, theirs, strict=True):
            types = other.get("column_types") or {}
            for field in other:
                if field in ("before", "after") and one[field] is not None and other[field] is not None:
                    columns_match = list(one[field]) == list(other[field])
                    values_match = all(
                        same_value(types.get(c), one[field].get(c), other[field][c]) for c in other[field]
                    )
                    if columns_match and values_match:
                        continue
                if one[field] != other[field]:
                    found.append(f"{ref}: {field} is {one[field]!r} natively, {other[field]!r} in Python")
    return found


def test_native_and_python_parses_agree_on_the_examples_fixtures_and_bent_messages(spark):
    records = fixture_records() + variants(envelope_insert())
    assert differences(events_by_message(spark, records, True), events_by_message(spark, records, False)) == []


def test_native_and_python_parses_agree_on_a_generated_history_under_chaos(spark, tmp_path):
    records = generated_records(tmp_path / "generated")
    native = events_by_message(spark, records, True)
    assert differences(native, events_by_message(spark, records, False)) == []
    # Most of it was parsed in the JVM, so the agreement above is the native parse's.
    parser = get_format("debezium-json")("test", {"native_parse": True})
    bronze = spark.createDataFrame(bronze_rows(records), BRONZE_SCHEMA)
    taken = native_events(parser, bronze).filter(F.col("_native").isNotNull()).count()
    assert taken >= 0.9 * len(records), f"only {taken} of {len(records)} messages parsed natively"


def test_a_message_the_native_parse_does_not_take_names_the_check_it_failed_first(spark):
    record = envelope_insert()
    document = json.loads(record["value"])
    payload, source = document["payload"], document["payload"]["source"]
    bent = {
        "envelope": record["value"] + " x",
        "after": json.dumps({**document, "payload": {**payload, "after": {"extra": "1"}}}),
        "table": json.dumps({**document, "payload": {**payload, "source": {**source, "table": "a.b"}}}),
        "numbers": json.dumps({**document, "payload": {**payload, "source": {**source, "lsn": "12x"}}}),
    }
    parser = get_format("debezium-json")("test", {"native_parse": True})
    records = [{"value": value} for value in bent.values()] + [record]
    bronze = spark.createDataFrame(bronze_rows(records), BRONZE_SCHEMA)
    verdicts = [row.asDict() for row in failed_checks(parser, bronze.orderBy("offset")).collect()]
    for check, verdict in zip(bent, verdicts, strict=False):
        failed = [name for name in CHECKS if not verdict[name]]
        assert failed[:1] == [check], failed  # the first one named: the others follow from it
    assert all(verdicts[-1][name] for name in CHECKS if name != "tombstone")


def test_a_pipeline_with_the_native_parse_gives_the_fixture_s_expected_gold(spark, storage):
    """End to end, through the streaming runner: the Flink fixture's changelog, parsed natively."""
    from tests.helpers import changelog_state, gold_rows, ingest, load_expected, read_rows

    path = shared_path("fixtures", "debezium-json", "apache_flink__debezium-postgres-data-schema-include.txt")
    state, versions = changelog_state(
        load_expected(path)["expected_rows"], ["id", "name", "description", "weight"], "id"
    )
    ingest(spark, "debezium-json", path, storage, keys={"products": "id"}, options={"native_parse": "true"})
    current = {
        str(r["id"]): [r["name"], r["description"], r["weight"]] for r in gold_rows(spark, storage, "products", 1)
    }
    assert {k: v[:2] for k, v in current.items()} == {k: v[1:3] for k, v in state.items()}
    assert all(current[k][2] == float(v[3]) for k, v in state.items())
    assert len(gold_rows(spark, storage, "products", 2)) == versions
    silver = read_rows(spark, storage, "silver_debezium_json")
    assert len(silver) == 16 and {r["kind"] for r in silver} == {"change"}


@pytest.mark.parametrize("partial_results", ["true", "false"])
def test_the_native_parse_is_as_strict_whatever_the_json_partial_results_setting(spark, partial_results):
    """A member of the wrong JSON type sends its message to Python under either setting of
    `spark.sql.json.enablePartialResults` (on Spark Connect a query function may set none, so the
    parse cannot choose it): `from_json`'s corrupt-record column marks the message either way."""
    record = envelope_insert()
    document = json.loads(record["value"])
    payload = document["payload"]
    wrong_types = [
        {**payload, "after": "x"},
        {**payload, "source": [1]},
        {**payload, "before": [1], "op": "u"},
        {**payload, "source": {**payload["source"], "lsn": {"a": 1}}},
    ]
    records = [{"value": json.dumps({**document, "payload": bent})} for bent in wrong_types]
    records += variants(record)
    key = "spark.sql.json.enablePartialResults"
    before = spark.conf.get(key, None)
    spark.conf.set(key, partial_results)
    try:
        parser = get_format("debezium-json")("test", {"native_parse": True})
        bronze = spark.createDataFrame(bronze_rows(records), BRONZE_SCHEMA)
        taken = [row["_native"] is not None for row in native_events(parser, bronze).orderBy("offset").collect()]
        assert taken[: len(wrong_types)] == [False] * len(wrong_types)
        assert differences(events_by_message(spark, records, True), events_by_message(spark, records, False)) == []
    finally:
        spark.conf.unset(key) if before is None else spark.conf.set(key, before)
