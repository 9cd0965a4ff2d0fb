"""IBM Q Replication delimited messages carry no column names: the tables they name come from conf.

`tables` option shapes (columns in column-ID order, as the messages list the values):

    tables:
      TEST.EMPLOYEE: [FIRSTNME:VARCHAR(12), LASTNAME:VARCHAR(15), SALARY:DECIMAL(9,2)]
      ASN.T1: {C1: INTEGER, C2: CHAR(4), C3: CHAR(3)}
      LEGACY.ORDERS: {columns: [ID:INTEGER, NOTE:VARCHAR(40)], code_page: cp037}

or, from the command line, the `--columns` syntax: `T1=C1:INTEGER,C2:CHAR(4);T2=...`. Keys are
`OWNER.TABLE` or just `TABLE` (case-insensitive). Values are turned into canonical text here
(dates ISO, times `HH:MM:SS`, timestamps `YYYY-MM-DD HH:MM:SS.ffffff` with every digit of a
TIMESTAMP(7..12), binary base64).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdc_medallion.errors import ConfigError
from cdc_medallion.formats.ibm_qrep_records import Delimiters, Field, InvalidData, RecordError
from cdc_medallion.identifiers import TABLE_NAME_RULE, is_column_name, is_table_name
from cdc_medallion.sqltypes import MAX_FRACTION_DIGITS, spark_type

Image = dict[str, str | None]

_CHAR = {
    "char",
    "character",
    "varchar",
    "character varying",
    "char varying",
    "long varchar",
    "graphic",
    "vargraphic",
    "long vargraphic",
    "nchar",
    "nvarchar",
    "string",
    "text",
}
_LOB_CHAR = {"clob", "dbclob", "nclob", "xml"}
_BINARY = {"binary", "varbinary", "rowid"}
_TEMPORAL = {"date": "date", "time": "time", "timestamp": "timestamp", "timestamp with time zone": "timestamp"}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    sql_type: str
    spark_type: str
    kind: str  # char | lob_char | binary | lob_binary | date | time | timestamp | boolean | number

    @property
    def is_character(self) -> bool:
        """Character data: sent in hex (…-HEX) or as null (…-NULL) when a row has invalid data."""
        return self.kind == "char"

    @property
    def is_lob(self) -> bool:
        """LOB and XML columns: sent as null in a row with invalid character data."""
        return self.kind in ("lob_char", "lob_binary")


@dataclass(frozen=True, slots=True)
class TableSpec:
    name: str
    columns: tuple[Column, ...]
    code_page: str


def column_kind(sql_type: str) -> str:
    name = " ".join(sql_type.lower().split())
    bit_data = name.endswith("for bit data")
    base = re.sub(r"\s*\([^)]*\)", "", name)
    base = re.sub(r"\s+for\s+(bit|sbcs|mixed)\s+data$", "", base).strip()
    if base == "blob":
        return "lob_binary"
    if bit_data or base in _BINARY:
        return "binary"
    if base in _LOB_CHAR:
        return "lob_char"
    if base in _CHAR:
        return "char"
    if base in _TEMPORAL:
        return _TEMPORAL[base]
    if base in ("boolean", "bool"):
        return "boolean"
    return "number"


def split_specs(spec: str) -> list[str]:
    """`COL:TYPE,COL:TYPE` where a type may hold commas in parentheses (DECIMAL(9,2))."""
    parts, depth, current = [], 0, ""
    for char in spec:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_tables(value: Any, default_code_page: str, where: str) -> dict[str, TableSpec]:
    """The `tables` option as specs keyed by upper-case `OWNER.TABLE` or `TABLE`."""
    if value is None:
        return {}
    if isinstance(value, str):
        pairs = {}
        for chunk in (c.strip() for c in value.split(";")):
            if not chunk:
                continue
            table, sep, rest = chunk.partition("=")
            if not sep:
                raise ConfigError(f"{where}: {chunk!r} must be TABLE=COL:TYPE,COL:TYPE,...")
            pairs[table.strip()] = split_specs(rest)
        value = pairs
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a mapping of OWNER.TABLE to its columns, got {type(value).__name__}")
    specs: dict[str, TableSpec] = {}
    for table, columns in value.items():
        if not isinstance(table, str) or not all(is_table_name(p) for p in table.split(".")):
            raise ConfigError(f"{where}: {table!r} is not an OWNER.TABLE or TABLE name ({TABLE_NAME_RULE} in a part)")
        code_page = default_code_page
        if isinstance(columns, Mapping) and "columns" in columns and set(columns) <= {"columns", "code_page"}:
            code_page = columns.get("code_page") or default_code_page
            columns = columns["columns"]
        check_code_page(code_page, f"{where}.{table}.code_page")
        specs[table.upper()] = TableSpec(table, _columns(columns, f"{where}.{table}"), code_page)
    return specs


def check_code_page(code_page: Any, where: str) -> None:
    try:
        codecs.lookup(str(code_page))
    except LookupError:
        raise ConfigError(
            f"{where}: unknown code page {code_page!r} (a Python codec name: utf-8, cp037, ...)"
        ) from None


def _columns(raw: Any, where: str) -> tuple[Column, ...]:
    if isinstance(raw, str):
        raw = split_specs(raw)
    if isinstance(raw, Mapping):
        pairs = list(raw.items())
    elif isinstance(raw, list) and all(isinstance(item, str) for item in raw):
        pairs = [tuple(p.strip() for p in item.partition(":")[::2]) for item in raw]
    else:
        raise ConfigError(f"{where}: columns must be a list of COL:TYPE or a mapping COL: TYPE, in column-ID order")
    if not pairs:
        raise ConfigError(f"{where}: no columns")
    columns = []
    for name, sql_type in pairs:
        if not is_column_name(name) or not isinstance(sql_type, str) or not sql_type.strip():
            raise ConfigError(f"{where}: {name!r}: {sql_type!r} must be a column name and a type name")
        try:
            spark = spark_type(sql_type)
        except ConfigError as error:
            raise ConfigError(f"{where}: {name}: {error}") from None
        columns.append(Column(name, sql_type.strip(), spark, column_kind(sql_type)))
    names = [c.name.upper() for c in columns]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: a column is listed twice")
    return tuple(columns)


# --- values ---------------------------------------------------------------------------------------
_DATE = (
    (re.compile(r"^(\d{4})-(\d{2})-(\d{2})$"), (1, 2, 3)),  # ISO / JIS
    (re.compile(r"^(\d{2})/(\d{2})/(\d{4})$"), (3, 1, 2)),  # USA
    (re.compile(r"^(\d{2})\.(\d{2})\.(\d{4})$"), (3, 2, 1)),  # EUR
)
_TIME = re.compile(r"^(\d{2})[.:](\d{2})(?:[.:](\d{2}))?$")
_TIMESTAMP = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[- T](\d{2})[.:](\d{2})[.:](\d{2})(?:[.,](\d{1,12}))?$")


def _temporal(kind: str, text: str) -> str | None:
    """Canonical text of a DATE / TIME / TIMESTAMP value; None when it is not a real one."""
    value = text.strip()
    try:
        if kind == "date":
            for pattern, order in _DATE:
                match = pattern.match(value)
                if match:
                    year, month, day = (int(match.group(i)) for i in order)
                    return dt.date(year, month, day).isoformat()
            return None
        if kind == "time":
            match = _TIME.match(value)
            if not match:
                return None
            hour, minute, second = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
            if (hour, minute, second) == (24, 0, 0):  # Db2 allows 24.00.00 (end of day)
                return "24:00:00"
            return dt.time(hour, minute, second).isoformat()
        match = _TIMESTAMP.match(value)
        if not match:
            return None
        parts = [int(g) for g in match.groups()[:6]]
        whole = dt.datetime(*parts).isoformat(sep=" ")
        fraction = match.group(7) or ""
        if len(fraction) > MAX_FRACTION_DIGITS:  # Db2's TIMESTAMP(7..12): every digit kept (a text column)
            return f"{whole}.{fraction}"
        micros = int(fraction.ljust(MAX_FRACTION_DIGITS, "0"))
        return f"{whole}.{micros:06d}" if micros else whole
    except ValueError:
        return None


def image(
    table: TableSpec,
    fields: list[Field],
    code: str,
    delimiters: Delimiters,
    invalid: InvalidData | None,
    flags: list[str],
) -> Image:
    """One row image (before `B` or after `A`) as canonical text; absent columns are left out.

    In a row with invalid character data the character columns are hex (decoded with the
    table's code page) or were replaced by nulls, and LOB/XML columns were replaced by nulls:
    those nulls are not the source's values, so those columns are left out of the image
    (gold keeps what it had) instead of being written as NULL.
    """
    where = "before" if code == "B" else "after"
    result: Image = {}
    for column, value in zip(table.columns, fields, strict=True):
        if value.repaired:
            flags.append(f"repaired_quote:{column.name}:{code}")
        if invalid is not None and (column.is_lob or (column.is_character and invalid.mode == "NULL")):
            continue
        text = value.text
        if text is None:
            result[column.name] = None
        elif invalid is not None and column.is_character:
            result[column.name] = _from_hex(text, table.code_page, column, code, where, flags)
        elif column.kind in ("date", "time", "timestamp"):
            canonical = _temporal(column.kind, text)
            if canonical is None:
                flags.append(f"invalid_time:{column.name}:{code}:{text}")
            result[column.name] = text if canonical is None else canonical
        elif column.kind in ("binary", "lob_binary"):
            try:
                result[column.name] = base64.b64encode(bytes.fromhex(text)).decode("ascii")
            except ValueError:
                raise RecordError(
                    f"{where}.{column.name}", f"{text[:40]!r} is not hexadecimal ({column.sql_type} is read as hex)"
                ) from None
        elif column.kind == "number":
            number = text.strip()
            result[column.name] = number.replace(delimiters.decimal, ".") if delimiters.decimal != "." else number
        else:
            result[column.name] = text
    return result


def _from_hex(text: str, code_page: str, column: Column, code: str, where: str, flags: list[str]) -> str:
    try:
        raw = binascii.unhexlify(text.strip())
    except (binascii.Error, ValueError):
        raise RecordError(
            f"{where}.{column.name}",
            f"the identifier says character data is sent in hex, but {text[:40]!r} is not hexadecimal",
        ) from None
    try:
        return raw.decode(code_page)
    except UnicodeDecodeError:
        flags.append(f"invalid_char_replaced:{column.name}:{code}")
        return raw.decode(code_page, errors="replace")
