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
    "decfloat": "double",
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
_DECIMAL = re.compile(r"^(decimal|numeric|number|dec)\s*(\(\s*(\d+)\s*(,\s*(-?\d+)\s*)?\))?$")
_SIZED = re.compile(r"^([a-z_ ]+?)\s*\(\s*\d+\s*[kmg]?\s*\)$")  # LOB sizes may be 1M, 2G
# Db2: CHAR(10) FOR BIT DATA is binary; FOR SBCS/MIXED DATA only names the character subtype.
_BIT_DATA = re.compile(r"^(.*?)\s+for\s+bit\s+data$")
_SUBTYPE = re.compile(r"\s+for\s+(sbcs|mixed)\s+data$")


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
        precision = int(decimal.group(3) or 38)
        scale = int(decimal.group(5) or (0 if decimal.group(3) else 18))
        return f"decimal({min(precision, 38)},{max(min(scale, precision), 0)})"
    sized = _SIZED.match(name)
    if sized and sized.group(1).strip() in _SIMPLE:
        return _SIMPLE[sized.group(1).strip()]
    raise ConfigError(f"unknown column type {sql_type!r}")
