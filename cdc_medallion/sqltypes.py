"""Source SQL type names (VARCHAR(20), DECIMAL(9,2), NUMBER, ...) -> Spark SQL type names."""

from __future__ import annotations

import re

from cdc_medallion.errors import ConfigError

_SIMPLE = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "character": "string",
    "text": "string",
    "clob": "string",
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
    "decfloat": "double",
    "boolean": "boolean",
    "bool": "boolean",
    "bit": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "datetime": "timestamp",
    "timestamptz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
    "varbinary": "binary",
    "blob": "binary",
    "bytes": "binary",
    "bytea": "binary",
    "longblob": "binary",
}
_DECIMAL = re.compile(r"^(decimal|numeric|number|dec)\s*(\(\s*(\d+)\s*(,\s*(-?\d+)\s*)?\))?$")
_SIZED = re.compile(r"^([a-z_ ]+?)\s*\(\s*\d+\s*\)$")


def spark_type(sql_type: str) -> str:
    """The Spark type for a source type name; unknown names are a config error."""
    name = " ".join(sql_type.strip().lower().split())
    if name in _SIMPLE:
        return _SIMPLE[name]
    decimal = _DECIMAL.match(name)
    if decimal:
        precision = int(decimal.group(3) or 38)
        scale = int(decimal.group(5) or (0 if decimal.group(3) else 18))
        return f"decimal({min(precision, 38)},{max(min(scale, precision), 0)})"
    sized = _SIZED.match(name)
    if sized and sized.group(1).strip() in _SIMPLE:
        return _SIMPLE[sized.group(1).strip()]
    raise ConfigError(f"unknown column type {sql_type!r}")
