"""Source SQL type names (VARCHAR(20), DECIMAL(9,2), NUMBER, ...) -> Spark SQL type names."""

from __future__ import annotations

import functools
import re

from cdc_medallion.errors import ConfigError

_SIMPLE = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "character": "string",
    "text": "string",
    "clob": "string",
    "nclob": "string",
    "long varchar": "string",
    "long vargraphic": "string",
    "character varying": "string",
    "char varying": "string",
    "dbclob": "string",
    "graphic": "string",
    "vargraphic": "string",
    "nvarchar": "string",
    "nchar": "string",
    "longtext": "string",
    "mediumtext": "string",
    "tinytext": "string",
    "xml": "string",
    "json": "string",
    "uuid": "string",
    "time": "string",
    "enum": "string",
    "int": "int",
    "integer": "int",
    "int4": "int",
    "mediumint": "int",
    "smallint": "smallint",
    "int2": "smallint",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "bigint": "bigint",
    "int8": "bigint",
    "long": "bigint",
    "float": "float",
    "real": "float",
    "float4": "float",
    "double": "double",
    "float8": "double",
    "double precision": "double",
    "decfloat": "string",  # Db2 DECFLOAT(34): 34 significant digits, NaN and infinities; a double has 17
    "boolean": "boolean",
    "bool": "boolean",
    "bit": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "datetime": "timestamp",
    "timestamptz": "timestamp",
    "timestamp with time zone": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
    "varbinary": "binary",
    "blob": "binary",
    "bytes": "binary",
    "bytea": "binary",
    "longblob": "binary",
    "rowid": "binary",
}
_DECIMAL = re.compile(r"^(decimal|numeric|number|dec|fixed)\s*(\(\s*(\d+)\s*(,\s*(-?\d+)\s*)?\))?$")
MAX_PRECISION = 38  # digits a Spark decimal holds
# A decimal without a precision (PostgreSQL's `numeric`, Oracle's `NUMBER`, DTS's `decimal` whose
# parameters it drops) holds any value its database does, up to 131072 digits before the point:
# more than any Spark decimal, so its values stay exact text (docs/values.md).
UNCONSTRAINED_DECIMAL = "string"
MAX_FRACTION_DIGITS = 6  # a Spark TIMESTAMP holds microseconds
_FRACTIONAL_SECONDS = re.compile(r"^(timestamp|datetime|timestamptz|timestamp_ntz)\s*\(\s*(\d+)\s*\)")
_SIZED = re.compile(r"^([a-z_ ]+?)\s*\(\s*\d+\s*[kmg]?\s*\)$")  # LOB sizes may be 1M, 2G
# Db2: CHAR(10) FOR BIT DATA is binary; FOR SBCS/MIXED DATA only names the character subtype.
_BIT_DATA = re.compile(r"^(.*?)\s+for\s+bit\s+data$")
_SUBTYPE = re.compile(r"\s+for\s+(sbcs|mixed)\s+data$")


def decimal_type(precision: int, scale: int) -> str:
    """DECIMAL(p, s) in Spark, which holds at most 38 digits: wider ones (MySQL's DECIMAL(65,
    30), Debezium's `connect.decimal.precision` 40) stay exact as text, never rounded or NULL.

    A negative scale (Oracle's NUMBER(5,-2) holds 9999900) needs `p - s` integer digits and no
    fraction; a scale above the precision (NUMBER(2,5) holds 0.00099) needs `s` digits."""
    if scale < 0:
        precision, scale = precision - scale, 0
    precision = max(precision, scale)
    if 0 < precision <= MAX_PRECISION:
        return f"decimal({precision},{scale})"
    return "string"


@functools.lru_cache(maxsize=4096)  # parsers map the same few type names for every message
def spark_type(sql_type: str) -> str:
    """The Spark type for a source type name; unknown names are a config error."""
    name = " ".join(sql_type.strip().lower().split())
    bit_data = _BIT_DATA.match(name)
    if bit_data and spark_type(bit_data.group(1)) == "string":
        return "binary"
    name = _SUBTYPE.sub("", name)
    if name in _SIMPLE:
        return _SIMPLE[name]
    decimal = _DECIMAL.match(name)
    if decimal:
        if decimal.group(3) is None:  # NUMERIC, NUMBER, DECIMAL without a precision: any value
            return UNCONSTRAINED_DECIMAL
        return decimal_type(int(decimal.group(3)), int(decimal.group(5) or 0))
    fractional = _FRACTIONAL_SECONDS.match(name)
    if fractional:
        if int(fractional.group(2)) > MAX_FRACTION_DIGITS:
            return "string"  # TIMESTAMP(9), Db2's TIMESTAMP(12): more digits than Spark keeps; exact text
        return spark_type(_FRACTIONAL_SECONDS.sub(r"\1", name))
    sized = _SIZED.match(name)
    if sized and sized.group(1).strip() in _SIMPLE:
        return _SIMPLE[sized.group(1).strip()]
    raise ConfigError(f"unknown column type {sql_type!r}")


# --- widening: a column's type as a source changes it (ALTER TABLE ... MODIFY / TYPE) -----------
_INTEGERS = ("tinyint", "smallint", "int", "bigint")
_INTEGER_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}
_SPARK_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def widens(old: str, new: str) -> bool:
    """Whether every value of Spark type `old` is a value of `new`, as Delta's type widening
    allows a column to change: a wider integer, float to double, an integer to double or to a
    decimal with room for it, a decimal to more digits on both sides, a date to a timestamp."""
    if old == new:
        return True
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(old) <= _INTEGERS.index(new)
    if new == "double" and (old == "float" or old in ("tinyint", "smallint", "int")):
        return True
    wide = _SPARK_DECIMAL.fullmatch(new)
    if wide is None:
        return old == "date" and new == "timestamp_ntz"
    precision, scale = int(wide[1]), int(wide[2])
    if old in _INTEGER_DIGITS:
        return precision - scale >= _INTEGER_DIGITS[old]
    narrow = _SPARK_DECIMAL.fullmatch(old)
    return narrow is not None and int(narrow[2]) <= scale and int(narrow[1]) - int(narrow[2]) <= precision - scale


def wider(first: str, second: str) -> str | None:
    """The narrowest type both widen to, or None when there is none (e.g. a number and a date)."""
    if widens(first, second):
        return second
    if widens(second, first):
        return first
    digits = [_decimal_digits(t) for t in (first, second)]
    if None not in digits:
        integral = max(d[0] for d in digits if d is not None)
        scale = max(d[1] for d in digits if d is not None)
        if integral + scale <= MAX_PRECISION:
            return f"decimal({integral + scale},{scale})"
    if {first, second} <= {*_INTEGERS, "float", "double"}:
        return "double"
    return None


def _decimal_digits(spark_type: str) -> tuple[int, int] | None:
    """(digits before the point, digits after) a type's values need, for integers and decimals."""
    if spark_type in _INTEGER_DIGITS:
        return _INTEGER_DIGITS[spark_type], 0
    match = _SPARK_DECIMAL.fullmatch(spark_type)
    return None if match is None else (int(match[1]) - int(match[2]), int(match[2]))
