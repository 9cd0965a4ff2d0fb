"""Canal JSON (`canal-json`): Alibaba Canal's flat message, as Canal and Alibaba DTS write it.

One message holds one binlog event: `data[]` has one or more rows (one event each, the row
index in the sequence), `old[]` (aligned by index) the previous values of only the changed
columns of an UPDATE. `type` INSERT / UPDATE / DELETE map to the unified ops, INIT (full load)
to SNAPSHOT; `isDdl` messages (CREATE, ALTER, QUERY, ...) are schema changes, and a DDL
TRUNCATE empties the table. Values arrive as strings; `mysqlType` (else the JDBC `sqlType`)
types them, binary types being ISO-8859-1 text as Canal writes them. `pkNames` keys the table.

DELETE rows come two ways: in `data` (Canal, and DTS instances created or restarted on or after
2022-03-20) or in `old` with `data` null (DTS instances created before): detected per message,
or pinned per source with the `delete_rows` option.

Order: `es` (binlog time, ms), then `id` (Canal batch / DTS offset), then the landing position,
then the row index. The position comes before the row index because different messages may
share `es` and `id` (Canal batches; SeaTunnel's fixture has one `id` for five messages) while
rows of one message share the position.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field

from cdc_medallion.errors import ConfigError
from cdc_medallion.formats.base import Format, FormatOptions, ParseError, register_format
from cdc_medallion.formats.json_common import (
    Image,
    change,
    epoch_millis,
    flag_field,
    image_of,
    inferred_types,
    json_type,
    key_names,
    load_document,
    object_field,
    order_number,
    padded,
    schema_change,
    sequence,
    text_field,
    tombstone,
    unknown_operation,
)
from cdc_medallion.formats.message import BronzeMessage, Event
from cdc_medallion.model import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_TRUNCATE, OP_UPDATE
from cdc_medallion.sqltypes import UNCONSTRAINED_DECIMAL, spark_type

OPS = {"INSERT": OP_INSERT, "INIT": OP_SNAPSHOT, "UPDATE": OP_UPDATE, "DELETE": OP_DELETE}
DDL_TYPES = ("CREATE", "ALTER", "ERASE", "QUERY", "RENAME", "CINDEX", "DINDEX", "DDL", "TRUNCATE")

# java.sql.Types codes (Canal's `sqlType`) -> Spark types, for columns without `mysqlType`.
JDBC_TYPES = {
    -7: "boolean",
    -6: "tinyint",
    5: "smallint",
    4: "int",
    -5: "bigint",
    6: "double",
    7: "float",
    8: "double",
    2: UNCONSTRAINED_DECIMAL,  # NUMERIC and DECIMAL: a code names no precision, so the exact text
    3: UNCONSTRAINED_DECIMAL,
    1: "string",
    12: "string",
    -1: "string",
    -9: "string",
    -15: "string",
    -16: "string",
    2005: "string",
    91: "date",
    92: "string",
    93: "timestamp",
    -2: "binary",
    -3: "binary",
    -4: "binary",
    2004: "binary",
    16: "boolean",
}
_UNSIGNED = {"tinyint": "int", "smallint": "int", "mediumint": "int", "int": "bigint", "integer": "bigint"}
_MYSQL_EXTRA = {
    "year": "int",
    "tinyblob": "binary",
    "mediumblob": "binary",
    "set": "string",
    "geometry": "binary",  # spatial types: WKB bytes
    "point": "binary",
    "linestring": "binary",
    "polygon": "binary",
    "multipoint": "binary",
    "multilinestring": "binary",
    "multipolygon": "binary",
    "geometrycollection": "binary",
    "geomcollection": "binary",
}


@functools.lru_cache(maxsize=4096)  # a pure function of a short string, called per column per message
def mysql_spark_type(mysql_type: str) -> str | None:
    """`int(10) unsigned`, `decimal(10,2)`, `enum('a','b')`, `datetime(3)` ... -> Spark type."""
    name = " ".join(mysql_type.lower().replace("zerofill", "").split())
    unsigned = name.endswith(" unsigned")
    name = name.removesuffix(" unsigned")
    base, _, params = name.partition("(")
    base = base.strip()
    if unsigned and base == "bigint":
        return "decimal(20,0)"
    if unsigned and base in _UNSIGNED:
        return _UNSIGNED[base]
    if base == "bit":
        return "boolean" if params.strip(") ") in ("", "1") else "bigint"
    if base in ("enum", "set"):
        return "string"
    if base in ("float", "double", "real"):
        name = base  # MySQL's display width / digits are not a Spark precision
    if base in _MYSQL_EXTRA:
        return _MYSQL_EXTRA[base]
    try:
        return spark_type(name)
    except ConfigError:
        return None


class CanalJsonOptions(FormatOptions):
    delete_rows: Literal["auto", "data", "old"] = Field(
        "auto",
        description="where DELETE rows are: auto (in `data`, or in `old` when `data` is null, as DTS instances "
        "created before 2022-03-20 write them), data, or old",
    )
    table: str | None = Field(None, description="table name for messages that name none")


@register_format
class CanalJson(Format):
    name = "canal-json"
    options = CanalJsonOptions
    settings: CanalJsonOptions

    def parse_message(self, message: BronzeMessage) -> Iterable[Event]:
        document = load_document(message)
        if document is None:
            return [tombstone(message)]
        code = text_field(document.get("type"), "type")
        is_ddl = flag_field(document.get("isDdl"), "isDdl") is True
        if code is None and not is_ddl:
            raise ParseError("type", "missing: not a Canal message")
        code = (code or "DDL").upper()
        es = order_number(document.get("es"), "es")
        order = (padded(es, 15), padded(order_number(document.get("id"), "id"), 20))
        event_ts = epoch_millis(es)
        if is_ddl or (code in DDL_TYPES and code not in OPS):
            return [self._ddl(message, document, code, sequence(message, *order), event_ts)]
        if code not in OPS:
            raise unknown_operation("type", code, [*OPS, *DDL_TYPES])
        op = OPS[code]
        rows, olds, flags = self._rows(op, document)
        names = (text_field(document.get("database"), "database"), None, self._table(document))
        types, source_types = _column_types(document, rows)
        keys = key_names(document.get("pkNames"), "pkNames")
        gtid = text_field(document.get("gtid"), "gtid")
        events = []
        for index, row in enumerate(rows):
            where = f"data[{index}]" if "delete_rows_in_old" not in flags else f"old[{index}]"
            image = _converted(image_of(row, where), types, source_types, where)
            before, after, changed = None, image, None
            if op == OP_DELETE:
                before, after = image, None
            elif op == OP_UPDATE and olds is not None:
                old = _converted(image_of(olds[index], f"old[{index}]"), types, source_types, f"old[{index}]") or {}
                before, changed = {**image, **old}, list(old)
            events.append(
                change(
                    op,
                    names,
                    before,
                    after,
                    f"{sequence(message, *order)}|{index:06d}",
                    keys=keys,
                    types={c: t for c, t in types.items() if c in image},
                    source_types={c: t for c, t in source_types.items() if c in image},
                    changed=changed,
                    flags=list(flags),
                    tx_id=gtid,
                    event_ts=event_ts,
                )
            )
        return events

    # --- parts ----------------------------------------------------------------------------
    def _table(self, document: Mapping[str, Any]) -> str:
        table = text_field(document.get("table"), "table") or self.settings.table
        if not table:
            raise ParseError("table", "missing, and no `table` option to take it from")
        return table

    def _rows(self, op: str, document: Mapping[str, Any]) -> tuple[list[Any], list[Any] | None, list[str]]:
        """The message's rows, the aligned `old` entries of an UPDATE, and flags."""
        data, old = _row_list(document, "data"), _row_list(document, "old")
        flags: list[str] = []
        if op == OP_DELETE:
            convention = self.settings.delete_rows
            if convention == "old" or (convention == "auto" and not data and old):
                if not old:
                    raise ParseError("old", "DELETE without rows in `old` (option delete_rows=old)")
                return old, None, ["delete_rows_in_old"]
            if not data:
                raise ParseError("data", "DELETE without rows in `data` or `old`")
            return data, None, flags
        if not data:
            raise ParseError("data", f"{op} without rows in `data`")
        if op == OP_UPDATE:
            if old is None:
                flags.append("before_image_missing")
            elif len(old) != len(data):
                raise ParseError("old", f"{len(old)} entries for {len(data)} rows in `data`")
        return data, old if op == OP_UPDATE else None, flags

    def _ddl(self, message: BronzeMessage, document: Mapping[str, Any], code: str, order: str, event_ts: Any) -> Event:
        names = (text_field(document.get("database"), "database"), None, text_field(document.get("table"), "table"))
        sql = text_field(document.get("sql"), "sql")
        if code == "TRUNCATE" and names[2]:
            return change(OP_TRUNCATE, (names[0], None, names[2]), None, None, order, detail=sql, event_ts=event_ts)
        return schema_change(names, sql, order, event_ts=event_ts, flags=[f"canal_type:{code}"])


# --- helpers ----------------------------------------------------------------------------------
def _row_list(document: Mapping[str, Any], name: str) -> list[Any] | None:
    """`data` / `old`: an array of row objects; any other JSON type is quarantined, naming it."""
    value = document.get(name)
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise ParseError(name, f"expected an array of rows, got {json_type(value)}")
    for index, row in enumerate(value):
        if not isinstance(row, dict):
            raise ParseError(f"{name}[{index}]", f"expected a row (a JSON object), got {json_type(row)}")
    return value


def _column_types(document: Mapping[str, Any], rows: list[Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Spark and source types: `mysqlType`, else `sqlType`, else what the JSON values are.

    A column's type absent, null or empty is not given (the next source decides); a type of
    another JSON type is an error naming it."""
    mysql = {
        column: name
        for column, raw in (object_field(document.get("mysqlType"), "mysqlType") or {}).items()
        if (name := text_field(raw, f"mysqlType.{column}")) is not None
    }
    jdbc = {
        column: code
        for column, code in (object_field(document.get("sqlType"), "sqlType") or {}).items()
        if _jdbc_code(code, f"sqlType.{column}") is not None
    }
    types, source_types = inferred_types(*rows)
    for column in set(mysql) | set(jdbc):
        mapped = mysql_spark_type(str(mysql[column])) if column in mysql else None
        if mapped is None and isinstance(jdbc.get(column), int):
            mapped = JDBC_TYPES.get(jdbc[column])
        types[column] = mapped or "string"
        source_types[column] = str(mysql[column]) if column in mysql else f"jdbc:{jdbc[column]}"
    return types, source_types


def _jdbc_code(code: Any, where: str) -> int | None:
    """A `sqlType` entry: a java.sql.Types code (a whole number, negative ones too), or null."""
    if code is None or (isinstance(code, int) and not isinstance(code, bool)):
        return code
    raise ParseError(where, f"expected a java.sql.Types code (a whole number), got {json_type(code)}")


def _converted(
    image: Image | None, types: Mapping[str, str], source_types: Mapping[str, str], where: str
) -> Image | None:
    """Binary columns: Canal writes bytes as ISO-8859-1 text; the image holds base64. ENUM and SET
    columns hold their labels, also where a writer gives the index or the bitmask."""
    if image is None:
        return None
    for column, value in image.items():
        if value is None:
            continue
        if types.get(column) == "binary":
            try:
                image[column] = base64.b64encode(value.encode("latin-1")).decode("ascii")
            except UnicodeEncodeError:
                reason = "binary value is not ISO-8859-1 text as Canal writes it"
                raise ParseError(f"{where}.{column}", reason) from None
        elif value.isdigit() and source_types.get(column, "")[:4].lower() in ("enum", "set("):
            image[column] = enum_or_set_label(value, source_types[column], f"{where}.{column}")
    return image


_LABEL = re.compile(r"'((?:[^']|'')*)'")


@functools.lru_cache(maxsize=1024)
def _labels(mysql_type: str) -> tuple[str, ...]:
    """The labels of `enum('a','b')` / `set('x','y')`, in definition order (`''` is a quote)."""
    return tuple(label.replace("''", "'") for label in _LABEL.findall(mysql_type.partition("(")[2]))


def enum_or_set_label(value: str, mysql_type: str, where: str) -> str:
    """An ENUM's 1-based index or a SET's bitmask as its label(s); a label stays as it is.

    The binlog stores the number; Canal usually writes the label, but not every writer does, and
    a number in gold would mean nothing without the table's definition. ENUM 0 is MySQL's value
    for an invalid label, the empty string."""
    labels = _labels(mysql_type)
    if not labels or value in labels:
        return value
    number = int(value)
    if mysql_type[:4].lower() == "enum":
        if number == 0:
            return ""
        if number > len(labels):
            raise ParseError(where, f"ENUM index {number} is outside the {len(labels)} labels of {mysql_type}")
        return labels[number - 1]
    if all(part in labels for part in value.split(",")):
        return value
    if number >> len(labels):
        raise ParseError(where, f"SET bitmask {number} names more than the {len(labels)} labels of {mysql_type}")
    return ",".join(label for bit, label in enumerate(labels) if number >> bit & 1)
