"""Real Debezium from a real PostgreSQL: what the connector writes is what gold must hold.

A PostgreSQL 15 cluster (`wal_level=logical`) gets two tables, one with the default replica
identity and one with REPLICA IDENTITY FULL, rows in them, and triggers that log every row
change (and every TRUNCATE) into an audit table the connector does not capture: the database's
own account of its history. Kafka Connect (standalone) then runs Debezium's PostgreSQL connector
twice over it (`pgoutput`), once with the JSON converter's schema envelope and once without,
each with its own slot, publication and topic prefix; both snapshot the rows, then stream a
workload: inserts, updates and deletes over several transactions, a primary key update, an
ALTER TABLE ADD COLUMN, a TRUNCATE, unchanged TOASTed values in updates, NULLs, and the column
types users meet. The last
transaction's id tells when both connectors' offsets (committed only once every record before
them is in Kafka) have passed it; the workload itself starts once both snapshots are in Kafka.

One pipeline run reads both connectors' topics from the broker. Then, per source, gold SCD1 must
equal `SELECT *` of each table value by value, and gold SCD2 must hold, per key, one version per
change the audit log recorded, in order, the last one open exactly when the key is alive.

Values are compared after one normalization per PostgreSQL type (`_canonical`): integers as int,
numeric as Decimal, real as a float32, double as float, date, time and timestamps as `datetime`
values (a timestamp without time zone is read as UTC, as Debezium does), bytea as bytes, json
and jsonb parsed, uuid as text, arrays as lists. The database side is `to_jsonb` of each row.
Gold's side depends on what the messages can say:

- with schemas, every column is typed from the envelope (Debezium's logical types decoded):
  numeric is a decimal, temporal columns are dates and timestamps, bytea is binary; time of day
  is text (`HH:MM:SS[.ffffff]`: Spark has no TIME type), arrays and json are JSON text;
- without schemas a message carries JSON values and no types, so gold holds Debezium's own
  encodings: dates as days since 1970, times and timestamps as microseconds, bytea as base64,
  timestamptz as ISO text, and numeric as text because this connector runs with
  `decimal.handling.mode=string`, what Debezium's documentation advises when consumers do not read
  the schema (its default, `precise`, writes base64 bytes that only the schema can decode).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdc_medallion.config import PipelineConf, SourceConf, TableConf, load_conf
from cdc_medallion.lines import lines_of
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.services.kafka_connect import KafkaConnect, postgres_connector
from cdc_medallion.services.postgres import PostgresCluster, Unavailable
from cdc_medallion.sources.kafka_settings import KafkaSettings
from tests.conftest import REPO
from tests.kafka_feed import rows, status

pytestmark = pytest.mark.xdist_group("kafka")

SOURCES = {"dbz_schemas": True, "dbz_plain": False}  # source (and topic prefix) -> schemas enabled
KEYS = {"items": ("id",), "accounts": ("region", "code")}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

SETUP = r"""
CREATE TABLE audit (seq bigserial PRIMARY KEY, tbl text NOT NULL, op text NOT NULL, old_row jsonb, new_row jsonb);
CREATE FUNCTION audited() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_LEVEL = 'STATEMENT' THEN
    INSERT INTO audit (tbl, op) VALUES (TG_TABLE_NAME, TG_OP);
  ELSE
    INSERT INTO audit (tbl, op, old_row, new_row) VALUES (TG_TABLE_NAME, TG_OP,
      CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END, CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END);
  END IF;
  RETURN NULL;
END $$;
CREATE TABLE items (
  id integer PRIMARY KEY, qty smallint, big bigint, price numeric(12,2), ratio numeric, score real,
  weight double precision, active boolean, born date, alarm time, seen timestamp, at timestamptz,
  blob bytea, label text, doc json, meta jsonb, ref uuid, tags text[], nums integer[], body text
);
CREATE TABLE accounts (region text, code integer, owner text, balance numeric(14,4), PRIMARY KEY (region, code));
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE TRIGGER items_rows AFTER INSERT OR UPDATE OR DELETE ON items FOR EACH ROW EXECUTE FUNCTION audited();
CREATE TRIGGER items_truncate AFTER TRUNCATE ON items FOR EACH STATEMENT EXECUTE FUNCTION audited();
CREATE TRIGGER accounts_rows AFTER INSERT OR UPDATE OR DELETE ON accounts FOR EACH ROW EXECUTE FUNCTION audited();
CREATE TRIGGER accounts_truncate AFTER TRUNCATE ON accounts FOR EACH STATEMENT EXECUTE FUNCTION audited();
"""

# Rows before the connectors start: they arrive as the snapshot (op `r`). Rows 1 and 4 have values
# large and random enough to be TOASTed: an update that leaves them unchanged does not log them
# (REPLICA IDENTITY DEFAULT), and Debezium writes a placeholder instead.
SNAPSHOT = r"""
INSERT INTO items VALUES
 (1, 7, 9007199254740993, 12345678.90, 0.000001, 3.14, 2.718281828459045, true, '2024-02-29', '23:59:59.999999',
  '2024-02-29 12:00:00.123456', '2024-02-29 23:59:59.999999+05:30',
  decode((SELECT string_agg(md5((-i)::text), '') FROM generate_series(1, 100) AS i), 'hex'), 'He said "hi" & it''s',
  '{"a": [1, 2.50, null], "b": "ü"}', '{"z": 1, "a": {"k": "v"}}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  ARRAY['x', 'y "quoted"', 'ünï'], ARRAY[1, -2, 3],
  (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) AS i)),
 (2, -32768, -1, -0.01, 123456789.123456789, -0.5, -1e-300, false, '1900-01-01', '00:00:00',
  '1969-12-31 23:59:59.5', '1970-01-01 00:00:00+00', '\x', E'line1\nline2\ttab \\ back', '[]', '{}',
  '00000000-0000-0000-0000-000000000000', ARRAY[]::text[], ARRAY[]::integer[], ''),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, 1, 2, 3.00, 4, 5, 6, true, '2000-01-01', '12:30:00', '2000-01-01 00:00:00', '2000-01-01 00:00:00+00',
  '\xdeadbeef', 'Zürich – 東京 🚀', 'null', '"text"', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
  (SELECT array_agg(md5(i::text)) || ARRAY[NULL] FROM generate_series(1, 150) AS i), ARRAY[NULL, 1],
  (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) AS i));
INSERT INTO accounts VALUES ('eu', 1, 'Ana', 10.5), ('eu', 2, 'Bo', -3.25), ('us', 1, 'Cy', NULL), ('us', 2, 'Di', 0);
"""

# Transactions after the connectors stream; the last one's id is what the test waits for.
WORKLOAD = [
    r"""
    INSERT INTO items (id, qty, price, label, at) VALUES (5, 50, 5.55, 'five', '2030-06-15 08:00:00-07');
    INSERT INTO items (id, label, blob, tags) VALUES (6, 'six', '\x01', ARRAY['a,b', 'c']);
    UPDATE items SET qty = 8, price = price + 1, label = label || ' (edited)', active = NULL, meta = '{"new": true}'
      WHERE id = 1;
    DELETE FROM items WHERE id = 2;
    """,
    r"""
    UPDATE items SET id = 30, label = 'was three' WHERE id = 3;
    UPDATE accounts SET code = 3, balance = 99.9999 WHERE region = 'eu' AND code = 2;
    UPDATE accounts SET owner = NULL WHERE region = 'us' AND code = 1;
    DELETE FROM accounts WHERE region = 'us' AND code = 2;
    """,
    "ALTER TABLE items ADD COLUMN extra text; ALTER TABLE accounts ADD COLUMN opened date;",
    r"""
    INSERT INTO items (id, label, extra) VALUES (7, 'seven', 'added later');
    UPDATE items SET extra = 'now set', seen = '2024-03-01 00:00:00' WHERE id = 4;
    UPDATE accounts SET opened = '2021-05-05' WHERE region = 'eu' AND code = 1;
    """,
    "TRUNCATE accounts;",
    r"""
    INSERT INTO accounts VALUES ('ap', 1, 'Eve', 1.0001, '2022-02-02'), ('eu', 1, 'Ana again', 2, NULL);
    UPDATE items SET qty = 51 WHERE id = 5;
    UPDATE items SET qty = 52, ratio = 1e-10 WHERE id = 5;
    """,
    r"""
    DELETE FROM items WHERE id = 6;
    INSERT INTO items (id, label) VALUES (6, 'six again');
    UPDATE accounts SET region = 'sa' WHERE region = 'ap' AND code = 1;
    """,
]
LAST = "INSERT INTO items (id, label) VALUES (8, 'last'); SELECT txid_current();"


def connectors(pg: PostgresCluster) -> dict[str, dict[str, str]]:
    """Each source's connector: what a user would configure to capture these tables."""
    tables = ["public.items", "public.accounts"]
    return {source: postgres_connector(pg, tables, source, schemas) for source, schemas in SOURCES.items()}


def _snapshot_done(offset: dict[str, Any]) -> bool:
    """The snapshot's last record is in Kafka (or streaming has begun).

    The workload must wait for it: a snapshot reads each table in a transaction that began when
    its slot was made, and TRUNCATE is not MVCC-safe, so a table truncated before the snapshot
    reads it would look empty to it, and its rows would never be captured."""
    return offset.get("snapshot_completed") is True or "snapshot" not in offset


def pipeline_conf(storage: Path, bootstrap_servers: str) -> PipelineConf:
    base = load_conf(REPO / "conf" / "local.yml")
    sources = tuple(
        SourceConf(
            name=name,
            format="debezium-json",
            kafka=KafkaSettings(bootstrap_servers=bootstrap_servers, subscribe_pattern=rf"{name}\.public\..*"),
        )
        for name in SOURCES
    )
    tables = tuple(
        TableConf(source=name, table=f"public.{table}", keys=keys, name=f"{name}_{table}")
        for name in SOURCES
        for table, keys in KEYS.items()
    )
    return dataclasses.replace(base, name="debezium-postgres", storage=storage, sources=sources, tables=tables)


@pytest.fixture(scope="module")
def captured(request, tmp_path_factory) -> dict[str, Any]:
    """The database's tables, audit log and column types, and the storage of the pipeline run.

    PostgreSQL is looked for first: without it the tests skip before Spark or Kafka start."""
    try:
        pg = PostgresCluster()
    except Unavailable as e:
        reason = f"PostgreSQL is not available: {e}"
        print(reason)
        pytest.skip(reason)
    spark, kafka_broker = request.getfixturevalue("spark"), request.getfixturevalue("kafka_broker")
    try:
        pg.start()
    except Unavailable as e:
        pg.close()
        reason = f"PostgreSQL does not start here: {e}"
        print(reason)
        pytest.skip(reason)
    try:
        pg.transaction(SETUP)
        pg.transaction(SNAPSHOT)
        with KafkaConnect(kafka_broker.bootstrap_servers, connectors(pg)) as connect:
            connect.wait_for_offsets(SOURCES, _snapshot_done, "the end of their snapshots")
            for script in WORKLOAD:
                pg.transaction(script)
            txid = int(pg.sql(f"BEGIN; {LAST} COMMIT;").stdout.split()[-1])
            # Connect commits an offset once every record before it is in Kafka.
            connect.wait_for_offsets(SOURCES, lambda o: int(o.get("txId") or 0) >= txid, f"transaction {txid}")
        truth = {
            "types": {t: _column_types(pg, t) for t in KEYS},
            "tables": {t: _json_rows(pg, f"SELECT to_jsonb(t) FROM {t} AS t") for t in KEYS},
            "audit": _json_rows(pg, "SELECT to_jsonb(a) FROM audit AS a ORDER BY seq"),
        }
    finally:
        pg.close()
    storage = tmp_path_factory.mktemp("debezium-postgres") / "storage"
    run_pipeline(pipeline_conf(storage, kafka_broker.bootstrap_servers), spark=spark)
    return {**truth, "storage": storage}


def _column_types(pg: PostgresCluster, table: str) -> dict[str, str]:
    query = f"SELECT column_name, udt_name FROM information_schema.columns WHERE table_name = '{table}'"
    return dict(line.split("|") for line in lines_of(pg.sql(query).stdout) if line)


def _json_rows(pg: PostgresCluster, query: str) -> list[dict[str, Any]]:
    return [_loads(line) for line in lines_of(pg.sql(query).stdout) if line]


def _loads(text: str) -> Any:
    return json.loads(text, parse_float=decimal.Decimal)


# --- one canonical value per PostgreSQL type ----------------------------------------------------
def _float32(value: Any) -> float:
    return struct.unpack("f", struct.pack("f", float(value)))[0]


def _instant(value: Any) -> dt.datetime:
    parsed = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def _json_value(value: Any) -> Any:
    return _loads(value) if isinstance(value, str) else value


# The database's side: `to_jsonb` text of each type.
FROM_POSTGRES: dict[str, Callable[[Any], Any]] = {
    "int2": int,
    "int4": int,
    "int8": int,
    "numeric": decimal.Decimal,
    "float4": _float32,
    "float8": float,
    "bool": bool,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "timestamp": _instant,
    "timestamptz": _instant,
    "bytea": lambda v: bytes.fromhex(v[2:]),
    "text": str,
    "json": lambda v: v,
    "jsonb": lambda v: v,
    "uuid": str,
    "_text": list,
    "_int4": list,
}

# Gold's side with schemas: typed columns (delta-rs reads decimals as Decimal, timestamps as UTC).
FROM_GOLD_TYPED: dict[str, Callable[[Any], Any]] = {
    **{t: lambda v: v for t in ("int2", "int4", "int8", "bool", "text", "uuid")},
    "numeric": decimal.Decimal,
    "float4": _float32,
    "float8": float,
    "date": lambda v: v,
    "time": dt.time.fromisoformat,
    "timestamp": _instant,
    "timestamptz": _instant,
    "bytea": bytes,
    "json": _json_value,
    "jsonb": _json_value,
    "_text": _json_value,
    "_int4": _json_value,
}

# Gold's side without schemas: Debezium's JSON encodings of each type, as the message had them.
FROM_GOLD_PLAIN: dict[str, Callable[[Any], Any]] = {
    **FROM_GOLD_TYPED,
    "numeric": lambda v: decimal.Decimal(str(v)),  # decimal.handling.mode=string
    "date": lambda v: (EPOCH + dt.timedelta(days=int(v))).date(),  # io.debezium.time.Date
    "time": lambda v: (EPOCH + dt.timedelta(microseconds=int(v))).time(),  # MicroTime
    "timestamp": lambda v: EPOCH + dt.timedelta(microseconds=int(v)),  # MicroTimestamp
    "bytea": base64.b64decode,  # the JSON converter writes bytes as base64
}


def _canonical(row: dict[str, Any], types: dict[str, str], decode: dict[str, Callable[[Any], Any]]) -> dict:
    """A row's columns (a column the row lacks is NULL), each value made canonical by its type."""
    return {c: None if row.get(c) is None else decode[t](row[c]) for c, t in types.items()}


def _gold(storage: Path, name: str, columns: list[str]) -> list[dict[str, Any]]:
    """A gold table's rows; it must have every column of the source table."""
    names = {d["name"] for d in status(storage)}
    assert name in names, f"{name} is not among {sorted(names)}"
    found = rows(storage, name)
    assert found, f"{name} is empty"
    assert set(columns) <= set(found[0]), f"{name} lacks {set(columns) - set(found[0])}"
    return found


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("table", KEYS)
def test_scd1_is_the_source_table(captured, source, table):
    types = captured["types"][table]
    decode = FROM_GOLD_TYPED if SOURCES[source] else FROM_GOLD_PLAIN
    key = lambda row: tuple(row[k] for k in KEYS[table])  # noqa: E731
    expected = sorted((_canonical(r, types, FROM_POSTGRES) for r in captured["tables"][table]), key=key)
    gold = _gold(captured["storage"], f"gold_{source}_{table}", list(types))
    actual = sorted((_canonical(r, types, decode) for r in gold), key=key)
    assert [key(r) for r in actual] == [key(r) for r in expected]
    for got, want in zip(actual, expected, strict=True):
        for column in types:
            assert got[column] == want[column], f"{table} {key(want)} {column}: {got[column]!r} != {want[column]!r}"


def _expected_versions(audit: list[dict[str, Any]], table: str, types: dict[str, str]) -> dict[tuple, list]:
    """Per key, the row after each change the audit log recorded, and whether it is still open.

    A change that leaves every column as it was makes no version (SCD2 updates the open one in
    place); an update of the key ends the old key's version and starts one for the new key."""
    versions: dict[tuple, list[list]] = {}
    open_keys: set[tuple] = set()

    def key_of(image: dict[str, Any]) -> tuple:
        return tuple(image[k] for k in KEYS[table])

    def close(key: tuple) -> None:
        if key in open_keys:
            versions[key][-1][1] = False
            open_keys.discard(key)

    for entry in audit:
        if entry["tbl"] != table:
            continue
        if entry["op"] == "TRUNCATE":
            for key in list(open_keys):
                close(key)
            continue
        moved = entry["op"] == "UPDATE" and key_of(entry["old_row"]) != key_of(entry["new_row"])
        if entry["op"] == "DELETE" or moved:
            close(key_of(entry["old_row"]))
        if entry["op"] in ("INSERT", "UPDATE"):
            key, image = key_of(entry["new_row"]), _canonical(entry["new_row"], types, FROM_POSTGRES)
            history = versions.setdefault(key, [])
            if key in open_keys and history[-1][0] == image:
                continue
            close(key)
            history.append([image, True])
            open_keys.add(key)
    return {key: [tuple(v) for v in history] for key, history in versions.items()}


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("table", KEYS)
def test_scd2_has_one_version_per_change(captured, source, table):
    types = captured["types"][table]
    decode = FROM_GOLD_TYPED if SOURCES[source] else FROM_GOLD_PLAIN
    expected = _expected_versions(captured["audit"], table, types)
    assert sum(len(v) for v in expected.values()) > len(expected)  # some keys changed more than once
    name = f"gold_{source}_{table}_history"
    history = sorted(_gold(captured["storage"], name, list(types)), key=lambda r: r["__START_AT"])
    actual: dict[tuple, list] = {}
    for row in history:
        image = _canonical(row, types, decode)
        actual.setdefault(tuple(image[k] for k in KEYS[table]), []).append((image, row["__END_AT"] is None))
    assert sorted(actual, key=repr) == sorted(expected, key=repr)
    for key, versions in expected.items():
        assert actual[key] == versions, key


@pytest.mark.parametrize("source", SOURCES)
def test_every_message_is_a_change_or_a_tombstone(captured, source):
    """Nothing Debezium wrote is quarantined: each message is a change (snapshot row, insert,
    update, delete, truncate) or the tombstone that follows a delete."""
    quarantined = {d["name"]: d["rows"] for d in status(captured["storage"]) if d["layer"] == "quarantine"}
    assert not any(quarantined.values()), quarantined
    events = rows(captured["storage"], f"silver_{source}", ["kind", "op", "source_table"])
    assert {e["kind"] for e in events} == {"change", "tombstone"}
    ops = {(e["source_table"], e["op"]) for e in events if e["kind"] == "change"}
    assert ("accounts", "TRUNCATE") in ops
    toasted = rows(captured["storage"], f"silver_{source}", ["source_table", "flags"])
    assert any("unavailable_value_omitted" in (e["flags"] or ()) for e in toasted if e["source_table"] == "items")
    assert {op for table, op in ops if table == "items"} == {"SNAPSHOT", "INSERT", "UPDATE", "DELETE"}
