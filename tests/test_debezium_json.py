"""Debezium JSON: the vendor document's examples, then the shared fixtures end to end."""

from __future__ import annotations

import base64
import json

import pytest

from cdc_medallion.formats import get_format
from cdc_medallion.lines import lines_of
from cdc_medallion.sqltypes import UNCONSTRAINED_DECIMAL
from tests.conftest import shared_path
from tests.helpers import changelog_state, datasets, gold_rows, ingest, load_expected, message, parse, read_rows

SEED = "debezium-postgres-json.txt"


def seed_examples() -> list[str]:
    lines = shared_path("seeds", SEED).read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.startswith("{") and '"payload"' in line]


def repaired(example: str) -> str:
    """The seed's examples as printed are not valid JSON: a `{ ... }` schema placeholder, a
    trailing comma, doubled escapes in `sequence`, and a missing comma before `"schema"` /
    `"message"`, and a missing closing brace. These are the only edits."""
    if example.count("{") > example.count("}"):
        example += "}" * (example.count("{") - example.count("}"))
    return (
        example.replace('\\\\"', '\\"')
        .replace('"schema": { ... }', '"schema": null')
        .replace('"payload": {"id": "1"},}', '"payload": {"id": "1"}}')
        .replace('"]""schema"', '"]","schema"')
        .replace('1559033904961"message"', '1559033904961,"message"')
    )


def test_seed_examples_as_printed_are_quarantined_with_a_reason():
    examples = seed_examples()
    # the envelope template, key, create, update, truncate, message, message (typo), delete
    assert len(examples) == 8
    for example in examples:
        events = parse("debezium-json", example)
        assert [e["kind"] for e in events] == ["error"], example[:80]
        assert events[0]["error"].startswith("value: not valid JSON"), events[0]["error"]
        assert events[0]["raw_message"] == example
        assert events[0]["bronze_ref"] == "test.jsonl:0"


def test_seed_key_example_documents_the_primary_key():
    key_example = repaired(seed_examples()[1])
    [event] = parse("debezium-json", key_example)
    assert event["kind"] == "key"
    assert event["source_table"] == "customers"
    assert event["key_columns"] == ["id"]


def test_seed_create_example_is_a_typed_insert():
    [event] = parse("debezium-json", repaired(seed_examples()[2]))
    assert event["kind"] == "change" and event["op"] == "INSERT"
    assert (event["source_db"], event["source_schema"], event["source_table"]) == ("postgres", "public", "customers")
    assert event["after"] == {"id": "1", "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
    assert event["before"] is None
    assert event["column_types"] == {"id": "int", "first_name": "string", "last_name": "string", "email": "string"}
    assert event["tx_id"] == "555"
    assert event["sequence"].startswith("lsn:00000000000024023128|")


def test_seed_update_without_replica_identity_full_still_applies():
    [event] = parse("debezium-json", repaired(seed_examples()[3]))
    assert event["op"] == "UPDATE"
    assert event["before"] == {"id": "1"}  # key only: REPLICA IDENTITY DEFAULT
    assert event["after"]["first_name"] == "Anne Marie"
    assert "before_image_partial" in event["flags"]
    assert event["changed_columns"] is None  # cannot be derived from a key-only before image


def test_seed_truncate_message_and_delete():
    examples = [repaired(e) for e in seed_examples()]
    [truncate] = parse("debezium-json", examples[4])
    assert (truncate["kind"], truncate["op"], truncate["source_table"]) == ("change", "TRUNCATE", "customers")
    for example in examples[5:7]:
        [message] = parse("debezium-json", example)
        assert message["kind"] == "message"
        assert json.loads(message["detail"]) == {"prefix": "foo", "content": "Ymfy"}
    [delete] = parse("debezium-json", examples[7])
    assert delete["op"] == "DELETE" and delete["before"] == {"id": "1"} and delete["after"] is None


def test_seed_history_end_to_end(spark, storage, tmp_path):
    """create -> update (key-only before) -> delete on customers: gone from SCD1, two closed versions in SCD2."""
    examples = [repaired(e) for e in seed_examples()]
    source = tmp_path / "seed.jsonl"
    source.write_text("\n".join([examples[2], examples[3], examples[7]]) + "\n", encoding="utf-8")
    ingest(spark, "debezium-json", source, storage, keys={"customers": "id"})
    assert gold_rows(spark, storage, "customers", 1) == []
    history = sorted(gold_rows(spark, storage, "customers", 2), key=lambda r: r["__START_AT"])
    assert [r["first_name"] for r in history] == ["Anne", "Anne Marie"]
    assert history[0]["__END_AT"] == history[1]["__START_AT"]
    assert history[1]["__END_AT"] is not None  # closed by the delete


# --- shared fixtures -------------------------------------------------------------------------
FIXTURES = [
    ("apache_flink__debezium-data-schema-include.txt", "json-lines"),
    ("apache_flink__debezium-postgres-data-schema-exclude.txt", "json-lines"),
    ("apache_flink__debezium-postgres-data-schema-include.txt", "json-lines"),
    ("apache_seatunnel__debezium-data.txt", "json-lines"),
]
PRODUCT_COLUMNS = ["id", "name", "description", "weight"]


@pytest.mark.parametrize(("name", "layout"), FIXTURES)
def test_fixture_gold_matches_expected_changelog(spark, storage, name, layout):
    path = shared_path("fixtures", "debezium-json", name)
    expected = load_expected(path)
    state, versions = changelog_state(expected["expected_rows"], PRODUCT_COLUMNS, "id")
    ingest(spark, "debezium-json", path, storage, keys={"products": "id"}, layout=layout)

    current = gold_rows(spark, storage, "products", 1)
    got = {str(r["id"]): r for r in current}
    assert set(got) == set(state)
    for identity, values in state.items():
        row = got[identity]
        assert [row["name"], row["description"]] == values[1:3]
        assert row["weight"] == pytest.approx(float(values[3]), rel=1e-6)
    history = gold_rows(spark, storage, "products", 2)
    assert len(history) == versions
    assert sum(1 for r in history if r["__END_AT"] is None) == len(state)
    assert datasets(storage)["bronze_debezium_json"]["rows"] == 16


def test_fixture_types_follow_the_envelope_schema(spark, storage):
    """The envelope says weight is a Connect `double` (Flink's test declares FLOAT itself, which is
    why it prints 3.14 for 3.140000104904175): gold follows the envelope."""
    path = shared_path("fixtures", "debezium-json", "apache_flink__debezium-data-schema-include.txt")
    ingest(spark, "debezium-json", path, storage, keys={"products": "id"})
    store_rows = gold_rows(spark, storage, "products", 1)
    from cdc_medallion.storage.delta_store import DeltaStore

    schema = DeltaStore(storage, spark).schema("gold_products")
    assert schema["weight"].dataType.simpleString() == "double"
    assert schema["id"].dataType.simpleString() == "int"
    assert {r["id"]: r["weight"] for r in store_rows}[101] == 3.140000104904175


def test_replica_identity_default_fixture(spark, storage):
    """Flink fails on the first update whose `before` is null; we apply it as a keyed upsert
    (its `after` still says what the row is now) and quarantine the delete that has neither image nor key, naming
    the fix. Our final state therefore still holds 111 (its delete could not be identified)."""
    path = shared_path("fixtures", "debezium-json", "apache_flink__debezium-postgres-data-replica-identity.txt")
    assert "REPLICA IDENTITY to FULL" in load_expected(path)["expected"]
    ingest(spark, "debezium-json", path, storage, keys={"products": "id"})
    current = {r["id"]: r for r in gold_rows(spark, storage, "products", 1)}
    assert current[106]["description"] == "18oz carpenter hammer"
    assert current[107]["weight"] == pytest.approx(5.1)
    assert current[110]["weight"] == pytest.approx(0.5)
    assert current[111]["weight"] == pytest.approx(5.17)
    assert len(current) == 11
    [quarantined] = read_rows(spark, storage, "silver_debezium_json_quarantine")
    assert "REPLICA IDENTITY FULL" in quarantined["error"]
    assert quarantined["failed_expectations"] == ["message_parsed", "known_kind"]


def test_seatunnel_all_types_snapshot(spark, storage):
    path = shared_path("fixtures", "debezium-json", "apache_seatunnel__e2e__debezium_data.txt")
    ingest(spark, "debezium-json", path, storage, keys={"mysql_cdc_e2e_source_table": "id"})
    rows = sorted(gold_rows(spark, storage, "mysql_cdc_e2e_source_table", 1), key=lambda r: r["id"])
    expected = load_expected(path)["expected"]["postgres_table_rows_order_by_id"]
    assert [r["id"] for r in rows] == [1, 2, 3]
    first = rows[0]
    assert str(first["f_decimal"]) == "789" and str(first["f_bigint_unsigned"]) == "987654321"
    assert first["f_date"].isoformat() == "2022-04-27"
    assert first["f_datetime"].isoformat() == "2022-04-27T14:30:00"
    assert first["f_timestamp"].isoformat() == "2023-04-27T03:08:40"
    assert first["f_time"] == "14:30:00"
    assert first["f_json"] == '{"key": "value"}'
    assert [r["f_year"] for r in rows] == [e[-1] for e in expected]
    assert [r["f_real"] for r in rows] == pytest.approx([e[36] for e in expected])


@pytest.mark.parametrize("origin", ["apache_flink", "apache_seatunnel"])
def test_inline_cases(origin):
    cases = json.loads(shared_path("fixtures", "debezium-json", f"{origin}__inline-cases.json").read_text())["cases"]
    for case in cases:
        for raw in case["messages"]:
            events = parse("debezium-json", raw, options={"table": "products"})
            if "no rows" in case["expect"] and raw is None:
                assert [e["kind"] for e in events] == ["tombstone"], case
            elif "no rows" in case["expect"]:  # empty bytes: quarantined as an empty message, no rows
                assert [e["error"][:20] for e in events] == ["value: empty message"], case
            else:  # the origin test expects an exception: we quarantine with the reason
                [event] = events
                assert event["kind"] == "error", (case, event)
                if "Unknown operation type" in case["expect"]:
                    assert "unknown operation type 'XX'" in event["error"]


def test_table_without_a_known_key_stays_in_silver_and_is_reported(spark, storage):
    path = shared_path("fixtures", "debezium-json", "apache_flink__debezium-postgres-data-schema-exclude.txt")
    summary = ingest(spark, "debezium-json", path, storage)  # no --key, and no key in the messages
    assert summary.discovery.unconfigured == ("debezium_json:products",)
    layers = {d["layer"] for d in datasets(storage).values()}
    assert "gold" not in layers and datasets(storage)["silver_debezium_json"]["rows"] == 16


# --- the envelope's schema, parsed once per text ----------------------------------------------
ENVELOPED = [
    "apache_flink__debezium-data-schema-include.txt",
    "apache_flink__debezium-postgres-data-schema-include.txt",
]


def payload_first(line: str) -> str:
    """The same document with its keys swapped, which only the full parse reads."""
    document = json.loads(line)
    return json.dumps({"payload": document["payload"], "schema": document["schema"]})


@pytest.mark.parametrize("name", ENVELOPED)
def test_envelope_schema_is_parsed_once_and_events_equal_the_full_parse(name):
    lines = lines_of(shared_path("fixtures", "debezium-json", name).read_text(encoding="utf-8"))
    lines = [line for line in lines if line.strip()]
    parser = get_format("debezium-json")("test", None)
    cached = [parser.events_for(message(line, line=i)) for i, line in enumerate(lines)]
    full = [parser.events_for(message(payload_first(line), line=i)) for i, line in enumerate(lines)]
    assert [e["kind"] for group in cached for e in group] == ["change"] * len(lines)
    assert cached == full
    # Every message of the file carries the same schema: one entry, read once.
    assert len(parser._schemas) == 1
    # Another schema text is another entry: a column retyped in it is retyped in the event.
    retyped = lines[0].replace('"type":"double"', '"type":"float"').replace('"type": "double"', '"type": "float"')
    assert retyped != lines[0]
    [event] = parser.events_for(message(retyped))
    assert event["column_types"]["weight"] == "float" and cached[0][0]["column_types"]["weight"] == "double"
    assert len(parser._schemas) == 2


def test_envelope_that_only_looks_splittable_is_read_whole():
    """A `"payload"` key nested in the schema, or keys after the payload, cannot be cut at the
    first `"payload"`: the full parse reads them, with the same result as the plain message."""
    path = shared_path("fixtures", "debezium-json", "apache_flink__debezium-data-schema-include.txt")
    line = next(line for line in lines_of(path.read_text(encoding="utf-8")) if line.strip())
    document = json.loads(line)
    [plain] = parse("debezium-json", line)
    nested = dict(document, schema=dict(document["schema"], parameters={"x": 1, "payload": {"op": "d"}}))
    trailing = json.dumps(document)[:-1] + ', "connector": "x"}'
    for variant in (json.dumps(nested), trailing, " \n" + line + "\r\n"):
        [event] = parse("debezium-json", variant)
        assert event == plain, variant[:120]
    [broken] = parse("debezium-json", line[:-1])  # no closing brace: reported, not guessed
    assert broken["kind"] == "error" and broken["error"].startswith("value: not valid JSON")


UNAVAILABLE = "__debezium_unavailable_value"


def _toast_update(schemas: bool) -> str:
    """An update from PostgreSQL (REPLICA IDENTITY DEFAULT) whose TOASTed text, bytea and array
    columns did not change: Debezium writes its placeholder for each."""
    after = {
        "id": 1,
        "qty": 8,
        "body": UNAVAILABLE,
        "blob": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==",  # the placeholder's bytes, base64
        "tags": [UNAVAILABLE],
        "label": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==",  # base64 of it, but in a text column
    }
    payload = {
        "before": None,
        "after": after,
        "source": {"db": "shop", "schema": "public", "table": "items", "lsn": 42, "txId": 7},
        "op": "u",
        "ts_ms": 1,
    }
    if not schemas:
        return json.dumps(payload)
    columns = [
        {"field": "id", "type": "int32", "optional": False},
        {"field": "qty", "type": "int16", "optional": True},
        {"field": "body", "type": "string", "optional": True},
        {"field": "blob", "type": "bytes", "optional": True},
        {"field": "tags", "type": "array", "items": {"type": "string"}, "optional": True},
        {"field": "label", "type": "string", "optional": True},
    ]
    image = {"type": "struct", "fields": columns, "optional": True, "name": "shop.public.items.Value"}
    schema = {"type": "struct", "fields": [{**image, "field": "before"}, {**image, "field": "after"}]}
    return json.dumps({"schema": schema, "payload": payload})


@pytest.mark.parametrize("schemas", [True, False], ids=["schemas", "schemaless"])
def test_unavailable_values_are_left_out_of_the_image(schemas):
    """Unchanged TOASTed columns are not values: left out, gold keeps what it had for them."""
    [event] = parse("debezium-json", _toast_update(schemas))
    assert event["kind"] == "change" and event["op"] == "UPDATE"
    kept = {"id", "qty", "label"} if schemas else {"id", "qty"}  # schemaless: the base64 text could be bytea
    assert set(event["after"]) == kept
    assert set(event["present_columns"]) == kept
    assert "unavailable_value_omitted" in event["flags"]
    if schemas:
        assert event["after"]["label"] == "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="


def test_unavailable_value_placeholder_is_the_connectors():
    """A connector configured with another `unavailable.value.placeholder`: that one is left out,
    and the default is an ordinary value."""
    options = {"unavailable_value_placeholder": "<toasted>"}
    message = json.loads(_toast_update(False))
    message["after"]["body"] = "<toasted>"
    [event] = parse("debezium-json", json.dumps(message), options=options)
    assert "body" not in event["after"]
    assert event["after"]["tags"] == json.dumps([UNAVAILABLE], separators=(",", ":"))


# --- Connect decimals: two's-complement bytes -------------------------------------------------
#: (column, unscaled value's bytes, scale, the value as Kafka Connect's `Decimal` defines it: the
#: big-endian two's complement of the unscaled value, times 10^-scale). Negative values have the
#: high bit set, which an unsigned reading turns into large positive numbers (b'\xff' into 255);
#: 16-byte values are what a DECIMAL(38, s) column sends. Values above 28 digits are left to the
#: decimal rounding tests of `formats/values.py`.
NEGATIVE_DECIMALS = [
    ("minus_one", b"\xff", 0, "-1"),
    ("minus_128", b"\x80", 0, "-128"),
    ("minus_129", b"\xff\x7f", 0, "-129"),
    ("minus_a_cent", b"\xff", 2, "-0.01"),
    ("minus_32768", b"\x80\x00", 0, "-32768"),
    ("plus_128", b"\x00\x80", 0, "128"),  # positive, its high byte zero: read alike either way
    ("plus_255_cents", b"\x00\xff", 2, "2.55"),
    ("wide_minus_five", b"\xff" * 15 + b"\xfb", 3, "-0.005"),
    (
        "wide_28_digits",
        (-1234567890123456789012345678).to_bytes(16, "big", signed=True),
        4,
        "-123456789012345678901234.5678",
    ),
    ("wide_lowest_byte_only", b"\xff" * 15 + b"\x80", 0, "-128"),
]


def _decimal_message() -> str:
    """An insert whose columns are Connect decimals (decimal.handling.mode=precise, the default),
    with a column of Debezium's VariableScaleDecimal (each value carries its scale) beside them."""

    def encoded(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    columns = [{"field": "id", "type": "int32", "optional": False}]
    after: dict[str, object] = {"id": 1}
    for name, raw, scale, _ in NEGATIVE_DECIMALS:
        parameters = {"scale": str(scale), "connect.decimal.precision": "38"}
        logical = "org.apache.kafka.connect.data.Decimal"
        columns.append({"field": name, "type": "bytes", "optional": True, "name": logical, "parameters": parameters})
        after[name] = encoded(raw)
    variable = {
        "type": "struct",
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "fields": [{"field": "scale", "type": "int32"}, {"field": "value", "type": "bytes"}],
    }
    columns.append({**variable, "field": "variable_minus_a_cent"})
    after["variable_minus_a_cent"] = {"scale": 2, "value": encoded(b"\xff")}
    columns.append({**variable, "field": "variable_minus_129"})
    after["variable_minus_129"] = {"scale": 0, "value": encoded(b"\xff\x7f")}
    image = {"type": "struct", "fields": columns, "optional": True, "name": "shop.public.prices.Value"}
    schema = {"type": "struct", "fields": [{**image, "field": "before"}, {**image, "field": "after"}]}
    payload = {
        "before": None,
        "after": after,
        "source": {"db": "shop", "schema": "public", "table": "prices", "lsn": 7, "txId": 3},
        "op": "c",
        "ts_ms": 1,
    }
    return json.dumps({"schema": schema, "payload": payload})


def test_connect_decimals_are_signed_twos_complement():
    """Every Connect decimal reads as a signed number: -1 is b'\\xff', not 255; -0.01 at scale 2
    is b'\\xff', not 2.55; a 16-byte value sign-extends from its first byte."""
    [event] = parse("debezium-json", _decimal_message())
    assert event["kind"] == "change" and event["op"] == "INSERT", event
    got = {name: event["after"][name] for name, *_ in NEGATIVE_DECIMALS}
    assert got == {name: expected for name, _, _, expected in NEGATIVE_DECIMALS}
    assert event["after"]["variable_minus_a_cent"] == "-0.01"
    assert event["after"]["variable_minus_129"] == "-129"
    assert event["column_types"]["minus_a_cent"] == "decimal(38,2)"
    # An unconstrained numeric holds any number of digits: exact text (docs/values.md).
    assert event["column_types"]["variable_minus_a_cent"] == UNCONSTRAINED_DECIMAL
