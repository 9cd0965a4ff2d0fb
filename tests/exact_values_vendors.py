"""How each vendor writes a row `(id, v)` of table `t<i>`: the messages of `tests/test_exact_values.py`.

Each function builds one insert the way its vendor writes it, after the vendor's documents in
../shared/seeds and the formats' fixtures: Debezium's Kafka Connect schema envelope and logical
types, Canal's text typed by `mysqlType`, Maxwell's, GoldenGate's and DMS's typed JSON (a decimal
as a JSON number in Java's `BigDecimal.toString`, which Python's `str(Decimal)` spells alike),
SharePlex's Oracle text, DataWorks' six types, DTS Avro's union branches, Qlik's metadata and
data messages, and IBM Q Replication's delimited records. The value `v` comes as the vendor
writes it (JSON value, `Number` text, union branch, delimited field); the caller knows its type.
"""

from __future__ import annotations

import base64
import decimal
import json
from dataclasses import dataclass
from typing import Any

from tests import dts_avro_builder as dts


@dataclass(frozen=True)
class Number:
    """A JSON number written with exactly this text (a Java writer's BigDecimal or double)."""

    text: str


def to_json(document: Any) -> str:
    """JSON as the vendors write it (UTF-8, not ASCII-escaped); a `Number` as its own text."""
    numbers: list[str] = []

    def number(value: Any) -> str:
        if not isinstance(value, Number):
            raise TypeError(f"not JSON: {value!r}")
        numbers.append(value.text)
        return f"\u0000#{len(numbers) - 1}"

    text = json.dumps(document, ensure_ascii=False, default=number)
    for index, written in enumerate(numbers):
        text = text.replace(f'"\\u0000#{index}"', written, 1)
    return text


# --- Debezium (Kafka Connect's JSON converter with schemas) -----------------------------------------
def debezium(i: int, column: dict[str, Any], value: Any) -> str:
    fields = [{"field": "id", "type": "int32", "optional": False}, {**column, "field": "v", "optional": True}]
    row_schema = {"type": "struct", "optional": True, "fields": fields}
    return to_json(
        {
            "schema": {
                "type": "struct",
                "name": f"srv.app.t{i}.Envelope",
                "fields": [{**row_schema, "field": "before"}, {**row_schema, "field": "after"}],
            },
            "payload": {
                "before": None,
                "after": {"id": i, "v": value},
                "op": "c",
                "source": {"connector": "postgresql", "db": "db", "schema": "app", "table": f"t{i}", "lsn": 1000 + i},
                "ts_ms": 1_700_000_000_000,
            },
        }
    )


# --- Canal (MySQL's text, typed by mysqlType, else sqlType) ----------------------------------------------
def canal(i: int, text: str | None, mysql_type: str | None, sql_type: int | None = None) -> str:
    return to_json(
        {
            "data": [{"id": str(i), "v": text}],
            "database": "db",
            "es": 1_700_000_000_000,
            "id": i,
            "isDdl": False,
            "mysqlType": None if mysql_type is None else {"id": "int", "v": mysql_type},
            "old": None,
            "pkNames": ["id"],
            "sql": "",
            "sqlType": None if sql_type is None else {"id": 4, "v": sql_type},
            "table": f"t{i}",
            "ts": 1_700_000_000_001,
            "type": "INSERT",
        }
    )


# --- typed JSON or text, typed by conf ------------------------------------------------------------------
def maxwell(i: int, value: Any) -> str:
    return to_json(
        {
            "database": "db",
            "table": f"t{i}",
            "type": "insert",
            "ts": 1_700_000_000,
            "xid": 100 + i,
            "commit": True,
            "data": {"id": i, "v": value},
            "primary_key_columns": ["id"],
        }
    )


def ogg(i: int, value: Any) -> str:
    return to_json(
        {
            "table": f"APP.T{i}",
            "op_type": "I",
            "op_ts": "2024-05-01 10:00:00.000000",
            "pos": f"{i:020d}",
            "primary_keys": ["id"],
            "after": {"id": i, "v": value},
        }
    )


def dms(i: int, value: Any) -> str:
    metadata = {
        "timestamp": "2024-05-01T10:00:00.000001Z",
        "record-type": "data",
        "operation": "insert",
        "partition-key-type": "primary-key",
        "schema-name": "app",
        "table-name": f"t{i}",
    }
    return to_json({"data": {"id": i, "v": value}, "metadata": metadata})


def shareplex(i: int, text: str | None) -> str:
    """SharePlex as DTS writes it: Oracle's values as text."""
    meta = {
        "time": "2017-06-16T14:24:34",
        "op": "ins",
        "scn": str(14589063118712 + i),
        "trans": "7.0.411499",
        "seq": 1,
        "size": 1,
        "table": f"APP.T{i}",
        "idx": "1/1",
    }
    return to_json({"meta": meta, "data": {"ID": str(i), "v": text}})


# --- DataWorks (BOOLEAN, DOUBLE, DATE = epoch ms, BYTES, LONG, STRING) ----------------------------------
def dataworks(i: int, kind: str, value: Any) -> str:
    return to_json(
        {
            "schema": {
                "dataColumn": [{"name": "id", "type": "LONG"}, {"name": "v", "type": kind}],
                "primaryKey": ["id"],
                "source": {"dbType": "MySQL", "dbName": "db", "tableName": f"t{i}"},
            },
            "payload": {
                "before": None,
                "after": {"dataColumn": {"id": i, "v": value}},
                "sequenceId": str(1620457642589000000 + i),
                "op": "INSERT",
                "timestamp": {"eventTime": 1620457896000, "systemTime": 1620457896977},
            },
            "version": "1.0.0",
        }
    )


# --- DTS Avro (a Record per message, the value in its union branch) ---------------------------------------
def dts_avro(i: int, value: Any, type_number: int) -> bytes:
    fields = [("id", 8), ("v", type_number)]
    after = [dts.integer(i), value]
    return dts.encode(
        dts.record("INSERT", f"db.t{i}", record_id=i, position=f"{100 + i}@7", fields=fields, after=after)
    )


# --- Qlik Replicate (a table's metadata message, then its data message) -------------------------------------
def qlik(i: int, kind: str, value: Any, precision: int = 0, scale: int = 0) -> list[str]:
    columns = {
        "id": {"ordinal": 1, "type": "INT4", "length": 0, "precision": 0, "scale": 0, "primaryKeyPosition": 1},
        "v": {"ordinal": 2, "type": kind, "length": 0, "precision": precision, "scale": scale, "primaryKeyPosition": 0},
    }
    lineage = {"server": "replicate", "task": "t", "schema": "app", "table": f"t{i}", "tableVersion": 1}
    metadata = {
        "magic": "atMSG",
        "type": "MD",
        "headers": None,
        "messageSchemaId": f"S{i}",
        "message": {"schemaId": f"S{i}", "lineage": lineage, "tableStructure": {"tableColumns": columns}},
    }
    headers = {
        "operation": "INSERT",
        "changeSequence": f"{20240501100000000000000000000000 + i}",
        "timestamp": "2024-05-01T10:00:00.000",
        "transactionId": "0001",
        "changeMask": "03",
        "columnMask": "03",
    }
    data = {
        "magic": "atMSG",
        "type": "DT",
        "headers": None,
        "messageSchemaId": f"S{i}",
        "message": {"data": {"id": i, "v": value}, "beforeData": None, "headers": headers},
    }
    return [to_json(metadata), to_json(data)]


# --- IBM Q Replication (delimited records; names and types from the `tables` option) -----------------------
def ibm(i: int, field: str) -> str:
    """An insert of `APP.T<i>`: the 12-field header, the before values (NULL), the after values."""
    header = [
        "10",
        '"IBM"',
        '"2024122"',
        '"101010000000"',
        '"APP"',
        f'"T{i}"',
        '"ISRT"',
        '"0000:0000:0388:4642:0000"',
        f'"0000:0000:0000:0271:{i % 65536:04x}:0000:0000:0000"',
        '"2024-05-01-10.00.00"',
        '"ASNQCAP"',
        "0000",
    ]
    return ",".join([*header, "", "", str(i), field])


def ibm_string(text: str) -> str:
    """A character (or date, time, timestamp) value between string delimiters, doubled inside."""
    return '"' + text.replace('"', '""') + '"'


def ibm_tables(types: dict[int, str]) -> dict[str, list[str]]:
    return {f"APP.T{i}": ["id:INTEGER", f"v:{sql_type}"] for i, sql_type in types.items()}


# --- numbers as the databases print them ----------------------------------------------------------------------
def connect_decimal(unscaled: int) -> str:
    """Kafka Connect's Decimal in JSON: base64 of the unscaled value's two's complement, big-endian,
    in as few bytes as hold it (Java's `BigInteger.toByteArray`)."""
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")


def exact(unscaled: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal((int(unscaled < 0), tuple(int(d) for d in str(abs(unscaled))), -scale))


def plain(unscaled: int, scale: int) -> str:
    """`unscaled × 10^-scale` with exactly `scale` fraction digits and no exponent: as PostgreSQL,
    MySQL, Db2 and Spark print a DECIMAL(p, scale)."""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    return ("-" if unscaled < 0 else "") + (digits if scale == 0 else f"{digits[:-scale]}.{digits[-scale:]}")


def java_big_decimal(unscaled: int, scale: int) -> Number:
    """A JSON number as Java's `BigDecimal.toString()` writes it: plain, or scientific below
    1E-6 (`1.000E-27`); Python's `str(Decimal)` follows the same rule."""
    return Number(str(exact(unscaled, scale)))
