"""Real Debezium from a real PostgreSQL: what the connector writes is what gold must hold.

A PostgreSQL 15 cluster (`wal_level=logical`) gets two tables, one with the default replica
identity and one with REPLICA IDENTITY FULL, a third of extreme values (every type's limits
within years 1 to 9999, NaN and the infinities, -0, 24:00:00, time zones of ±15:59, intervals of
±178,000,000 years, text with every line separator, all 256 bytes; through the snapshot and
again through logical decoding), rows in them, and triggers that log every row
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

Values are compared after one normalization per PostgreSQL type (`tests/capture_checks.py`, and
docs/captures.md for the mapping): integers as int, numeric as Decimal (NaN as text), real as
its float32 and double by their shortest text (NaN equals NaN, -0 differs from 0), dates,
timestamps as UTC `datetime` values (a timestamp without time zone is read as UTC, as Debezium
does), time as microseconds (24:00:00 included), timetz as microseconds since midnight UTC
(Debezium keeps no offset), interval as (months, days, microseconds), bit(n) as its number,
bytea as bytes, json and jsonb parsed, uuid and enums as text, arrays as lists. The database side
is `to_jsonb` of each row (floats of `extremes` as their text: a JSON number has no -0).
Gold's side depends on what the messages can say:

- with schemas, every column is typed from the envelope (Debezium's logical types decoded):
  numeric is a decimal, temporal columns are dates and timestamps, bytea is binary; time of day
  is text (`HH:MM:SS[.ffffff]`: Spark has no TIME type), arrays and json are JSON text;
- without schemas a message carries JSON values and no types, so gold holds Debezium's own
  encodings: dates as days since 1970, times and timestamps as microseconds, bytea as base64,
  timestamptz as ISO text, and numeric as text because this connector runs with
  `decimal.handling.mode=string`, what Debezium's documentation advises when consumers do not read
  the schema (its default, `precise`, writes base64 bytes that only the schema can decode).

Both connectors write intervals as ISO 8601 text (`interval.handling.mode=string`). What a
connector cannot say is not expected of gold: with schemas (`precise`), numeric NaN and the
infinities arrive as NULL (Debezium documents that only its string and double modes encode them).
A timetz whose offset has seconds (`-00:00:01`) is left out: Debezium's streaming fails on it
(`DateTimeParseException` in `ISODateTimeFormat.timeWithTimeZone`), and the connector stops.
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdc_medallion.config import PipelineConf, SourceConf, TableConf, load_conf
from cdc_medallion.lines import lines_of
from cdc_medallion.services.kafka_connect import KafkaConnect, postgres_connector
from cdc_medallion.services.postgres import PostgresCluster, Unavailable
from cdc_medallion.sources.kafka_settings import KafkaSettings
from tests.capture_checks import (
    canonical,
    day_number,
    differences,
    exact_decimal,
    expected_versions,
    float32,
    float_repr,
    gold_rows,
    interval_parts,
    micros_number,
    quarantined,
    run_or_why,
    time_micros,
    utc_time_micros,
    version_differences,
)
from tests.conftest import REPO
from tests.kafka_feed import rows

pytestmark = pytest.mark.xdist_group("capture_postgres")

SOURCES = {"dbz_schemas": True, "dbz_plain": False}  # source (and topic prefix) -> schemas enabled
KEYS = {"items": ("id",), "accounts": ("region", "code"), "extremes": ("id",)}

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
CREATE TYPE mood AS ENUM ('sad', 'ünï 🚀', 'x,y');
CREATE TABLE extremes (
  id integer PRIMARY KEY, i2 smallint, i4 integer, i8 bigint, n38 numeric(38,4), n numeric, r real,
  d double precision, dt date, ts timestamp, tstz timestamptz, tm time, ttz timetz, iv interval, txt text,
  bin bytea, b1 bit(1), b12 bit(12), m mood, j json, jb jsonb, u uuid
);
-- to_jsonb makes a float a JSON number, which has no -0: the floats of extremes are logged as text.
CREATE FUNCTION audited_extremes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit (tbl, op, old_row, new_row) VALUES (TG_TABLE_NAME, TG_OP,
    CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) || jsonb_build_object('r', OLD.r::text, 'd', OLD.d::text) END,
    CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) || jsonb_build_object('r', NEW.r::text, 'd', NEW.d::text) END);
  RETURN NULL;
END $$;
CREATE TRIGGER extremes_rows AFTER INSERT OR UPDATE OR DELETE ON extremes FOR EACH ROW
  EXECUTE FUNCTION audited_extremes();
"""

# The limits of each type (dates and timestamps from 4713 BC to what Debezium's longs reach), the
# special values of numeric and floats, and text with every line separator JSON and Python know of.
LINES = (
    r"E'a\u2028b\u2029c\u0085d\re\r\nf\tg\\ \"q\" ''s'' Zürich – 東京 한국어 Ελληνικά עברית مرحبا हिन्दी 🚀 👩‍👩‍👧 𝄞'"
)
ALL_BYTES = "(SELECT decode(string_agg(lpad(to_hex(i), 2, '0'), ''), 'hex') FROM generate_series(0, 255) AS i)"
EXTREMES = rf"""
INSERT INTO extremes VALUES
 (1, 32767, 2147483647, 9223372036854775807, 9999999999999999999999999999999999.9999,
  123456789012345678901234567890123456789012345678901234567890.123456789012345678901234567890, 3.4028235e38,
  1.7976931348623157e308, '9999-12-31', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59.999999+00', '24:00:00',
  '23:59:59.999999-15:59', '178000000 years', {LINES}, {ALL_BYTES}, B'1', B'100000000011', 'ünï 🚀',
  '{{"big": 1e400, "s": "\u2028 \ud83d\ude80", "n": 123456789012345678901234567890.123456789}}',
  '{{"big": 123456789012345678901234567890.123456789, "tiny": 1e-30, "s": "\u2029"}}',
  'ffffffff-ffff-ffff-ffff-ffffffffffff'),
 (2, -32768, -2147483648, -9223372036854775808, -9999999999999999999999999999999999.9999,
  -0.0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001,
  -3.4028235e38, -1.7976931348623157e308, '0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00+00',
  '00:00:00', '00:00:00+15:59', '-178000000 years', '', '\x', B'0', B'000000000000', 'sad', '[]', '{{}}',
  '00000000-0000-0000-0000-000000000000'),
 (3, 0, 0, 0, 0, 'NaN', 'NaN', 'NaN', '1970-01-01', '1970-01-01 00:00:00', '1969-12-31 23:59:59.999999+00',
  '23:59:59.999999', '12:00:00+00', '1 year 2 mons 3 days 04:05:06.789', E'\r', '\x00', B'1', B'000000000001',
  'x,y', 'null', 'null', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),
 (4, 1, 1, 1, 0.0001, 'Infinity', 'Infinity', '-Infinity', '2000-02-29', '2000-02-29 12:00:00',
  '2262-04-11 23:47:16.854775+00',
  '00:00:00.000001', '00:00:00.000001+14:59', '-1 days +00:00:00.000001', E'\u0085', '\xff', B'0', B'010101010101',
  'sad', '"\u2028"', '"\u2028"', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12'),
 (5, -1, -1, -1, -0.0001, '-Infinity', '-Infinity', 'Infinity', '1677-09-21', '1677-09-21 00:12:43.145224',
  '1677-09-21 00:12:43.145224+00', '12:00:00', '24:00:00+00', '-00:00:00.000001', E'\u2028', '\x0a0d', B'1',
  B'111111111111', 'ünï 🚀', '[1.5e308]', '[1.5e308]', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13'),
 (6, NULL, NULL, NULL, NULL, '-0', '-0', '-0', NULL, NULL, NULL, NULL, NULL, '0', E'\u2029', NULL, NULL, NULL, NULL,
  NULL, NULL, NULL),
 (7, 0, 0, 0, 0, 1.4e-45, 1.4e-45, 4.9406564584124654e-324, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL),
 (8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL);
"""

# How a row is read as JSON: its floats as text where -0 matters (as `audited_extremes` logs them).
ROW_JSON = {"extremes": "to_jsonb(t) || jsonb_build_object('r', t.r::text, 'd', t.d::text)"}

# Rows before the connectors start: they arrive as the snapshot (op `r`). Rows 1 and 4 have values
# large and random enough to be TOASTed: an update that leaves them unchanged does not log them
# (REPLICA IDENTITY DEFAULT), and Debezium writes a placeholder instead.
SNAPSHOT = (
    r"""
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
    + EXTREMES
)

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
    # Dates and timestamps beyond years 1-9999, through logical decoding only: Debezium's snapshot
    # (JDBC) drops a date's era, 4713 BC arriving as 4713 AD (docs/captures.md). Infinity in a
    # date is left out: Debezium sends an int that overflowed, and a different one per path.
    r"""
    INSERT INTO extremes (id, dt, ts, tstz) VALUES
      (9, '4713-01-01 BC', '4713-01-01 00:00:00 BC', '4713-01-01 00:00:00+00 BC'),
      (10, '5874897-12-31', '294246-12-31 23:59:59.999999', '294246-12-31 23:59:59.999999+00'),
      (21, NULL, 'infinity', 'infinity'),
      (22, '0001-12-31 BC', '-infinity', '-infinity');
    """,
    # The extremes again, through logical decoding this time (the snapshot read them over JDBC).
    "INSERT INTO extremes SELECT id + 10, i2, i4, i8, n38, n, r, d, dt, ts, tstz, tm, ttz, iv, txt, bin, b1, b12, m,"
    " j, jb, u FROM extremes",
    r"""
    UPDATE extremes SET n = 'NaN', r = '-Infinity', tm = '24:00:00', iv = '-178000000 years', txt = txt || E'\u2028'
      WHERE id IN (11, 13);
    DELETE FROM extremes WHERE id = 12;
    DELETE FROM items WHERE id = 6;
    INSERT INTO items (id, label) VALUES (6, 'six again');
    UPDATE accounts SET region = 'sa' WHERE region = 'ap' AND code = 1;
    """,
]
LAST = "INSERT INTO items (id, label) VALUES (8, 'last'); SELECT txid_current();"


def connectors(pg: PostgresCluster) -> dict[str, dict[str, str]]:
    """Each source's connector: what a user would configure to capture these tables."""
    tables = [f"public.{table}" for table in KEYS]
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
            "tables": {t: _json_rows(pg, f"SELECT {ROW_JSON.get(t, 'to_jsonb(t)')} FROM {t} AS t") for t in KEYS},
            "audit": _json_rows(pg, "SELECT to_jsonb(a) FROM audit AS a ORDER BY seq"),
        }
    finally:
        pg.close()
    storage = tmp_path_factory.mktemp("debezium-postgres") / "storage"
    failure = run_or_why(pipeline_conf(storage, kafka_broker.bootstrap_servers), spark)
    return {**truth, "storage": storage, "failures": {"the run": failure}}


def _column_types(pg: PostgresCluster, table: str) -> dict[str, str]:
    """Each column's type by its `udt_name` (`bit1` for bit(1), which Debezium writes as a boolean)."""
    kind = "CASE WHEN udt_name = 'bit' AND character_maximum_length = 1 THEN 'bit1' ELSE udt_name END"
    query = f"SELECT column_name, {kind} FROM information_schema.columns WHERE table_name = '{table}'"
    return dict(line.split("|") for line in lines_of(pg.sql(query).stdout) if line)


def _json_rows(pg: PostgresCluster, query: str) -> list[dict[str, Any]]:
    """One JSON value a line. Lines end at "\n" only: JSON text escapes it, but not U+2028,
    U+2029 or U+0085, which `str.splitlines` would also split at."""
    return [_loads(line) for line in lines_of(pg.sql(query).stdout) if line]


def _loads(text: str) -> Any:
    return json.loads(text, parse_float=decimal.Decimal)


# --- one canonical value per PostgreSQL type ----------------------------------------------------
def _json_value(value: Any) -> Any:
    return _loads(value) if isinstance(value, str) else value


def _debezium_decimal_text(value: Any) -> Any:
    """`decimal.handling.mode=string`: a numeric's text, and its infinities by name."""
    special = {"POSITIVE_INFINITY": decimal.Decimal("Infinity"), "NEGATIVE_INFINITY": decimal.Decimal("-Infinity")}
    return special.get(value) or exact_decimal(value)


def _precise(value: Any) -> Any:
    """What `decimal.handling.mode=precise` can say of a numeric: Debezium's documentation says
    only the string and double modes encode NaN (and the infinities), so the schema-envelope
    connector writes them as NULL. They cannot be compared there; everything else is."""
    number = exact_decimal(value)
    return None if number == "NaN" or (isinstance(number, decimal.Decimal) and number.is_infinite()) else number


def _bits(value: Any) -> int:
    """Debezium's Bits: the bits as bytes, least significant first."""
    return int.from_bytes(bytes(value), "little")


# Debezium's MicroTimestamp for PostgreSQL's infinities: pgjdbc's milliseconds for them
# (`PGStatement.DATE_POSITIVE_INFINITY`), sent as they are, as microseconds.
DEBEZIUM_INFINITIES = {"infinity": 9223372036825200000, "-infinity": -9223372036832400000}

# The database's side: `to_jsonb` text of each type.
FROM_POSTGRES: dict[str, Callable[[Any], Any]] = {
    "int2": int,
    "int4": int,
    "int8": int,
    "numeric": exact_decimal,
    "float4": float32,
    "float8": float_repr,
    "bool": bool,
    "date": day_number,  # any year: `4713-01-01 BC`, `5874897-12-31`
    "time": time_micros,  # 24:00:00 is a time of day here
    "timetz": utc_time_micros,
    "timestamp": lambda v: DEBEZIUM_INFINITIES.get(v) or micros_number(v),  # as Debezium sends it
    "timestamptz": micros_number,
    "interval": interval_parts,
    "bytea": lambda v: bytes.fromhex(v[2:]),
    "bit1": lambda v: int(v, 2),
    "bit": lambda v: int(v, 2),
    "mood": str,
    "text": str,
    "json": lambda v: v,
    "jsonb": lambda v: v,
    "uuid": str,
    "_text": list,
    "_int4": list,
}

# Gold's side with schemas: typed columns (delta-rs reads decimals as Decimal, timestamps as UTC).
FROM_GOLD_TYPED: dict[str, Callable[[Any], Any]] = {
    **{t: lambda v: v for t in ("int2", "int4", "int8", "bool", "text", "uuid", "mood")},
    "numeric": exact_decimal,
    "float4": float32,
    "float8": float_repr,
    "date": day_number,  # a date, or text outside years 1-9999 (`+10000-01-01`)
    "time": time_micros,  # text: Spark has no TIME type
    "timetz": utc_time_micros,  # ZonedTime: text in UTC
    "timestamp": micros_number,  # a datetime, or text outside years 1-9999
    "timestamptz": micros_number,
    "interval": interval_parts,  # interval.handling.mode=string: ISO 8601 text
    "bytea": bytes,
    "bit1": int,  # a boolean
    "bit": _bits,
    "json": _json_value,
    "jsonb": _json_value,
    "_text": _json_value,
    "_int4": _json_value,
}

# Gold's side without schemas: Debezium's JSON encodings of each type, as the message had them.
FROM_GOLD_PLAIN: dict[str, Callable[[Any], Any]] = {
    **FROM_GOLD_TYPED,
    "numeric": _debezium_decimal_text,  # decimal.handling.mode=string
    "date": int,  # io.debezium.time.Date: days
    "time": int,  # MicroTime
    "timestamp": int,  # MicroTimestamp: microseconds
    "bytea": base64.b64decode,  # the JSON converter writes bytes as base64
    "bit": lambda v: _bits(base64.b64decode(v)),
}


def _decoders(source: str) -> dict[str, Callable[[Any], Any]]:
    return FROM_GOLD_TYPED if SOURCES[source] else FROM_GOLD_PLAIN


def _expected(source: str) -> dict[str, Callable[[Any], Any]]:
    """The database's side, less what the source's connector cannot encode (`_precise`)."""
    return {**FROM_POSTGRES, "numeric": _precise} if SOURCES[source] else FROM_POSTGRES


def test_the_runs_succeed(captured):
    failed = {run: why for run, why in captured["failures"].items() if why is not None}
    assert not failed, failed


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("table", KEYS)
def test_scd1_is_the_source_table(captured, source, table):
    types = captured["types"][table]
    expected = [canonical(r, types, _expected(source)) for r in captured["tables"][table]]
    gold = gold_rows(captured["storage"], f"gold_{source}_{table}", list(types))
    actual = [canonical(r, types, _decoders(source)) for r in gold]
    found = differences(actual, expected, KEYS[table], f"{source} {table}")
    assert not found, f"{len(found)} values differ:\n" + "\n".join(found)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("table", KEYS)
def test_scd2_has_one_version_per_change(captured, source, table):
    types = captured["types"][table]
    keys = KEYS[table]
    expected = expected_versions(captured["audit"], table, keys, lambda r: canonical(r, types, _expected(source)))
    assert sum(len(v) for v in expected.values()) > len(expected)  # some keys changed more than once
    name = f"gold_{source}_{table}_history"
    history = sorted(gold_rows(captured["storage"], name, list(types)), key=lambda r: r["__START_AT"])
    actual: dict[tuple, list] = {}
    for row in history:
        image = canonical(row, types, _decoders(source))
        actual.setdefault(tuple(image[k] for k in keys), []).append((image, row["__END_AT"] is None))
    wrong = version_differences(actual, expected, f"{source} {table}")
    assert not wrong, f"{len(wrong)} differences:\n" + "\n".join(wrong)


@pytest.mark.parametrize("source", SOURCES)
def test_every_message_is_a_change_or_a_tombstone(captured, source):
    """Nothing Debezium wrote is quarantined: each message is a change (snapshot row, insert,
    update, delete, truncate) or the tombstone that follows a delete."""
    found = quarantined(captured["storage"])
    assert not found, "\n".join(f"{name}: {row}" for name, found_rows in found.items() for row in found_rows)
    events = rows(captured["storage"], f"silver_{source}", ["kind", "op", "source_table"])
    assert {e["kind"] for e in events} == {"change", "tombstone"}
    ops = {(e["source_table"], e["op"]) for e in events if e["kind"] == "change"}
    assert ("accounts", "TRUNCATE") in ops
    toasted = rows(captured["storage"], f"silver_{source}", ["source_table", "flags"])
    assert any("unavailable_value_omitted" in (e["flags"] or ()) for e in toasted if e["source_table"] == "items")
    assert {op for table, op in ops if table == "items"} == {"SNAPSHOT", "INSERT", "UPDATE", "DELETE"}
