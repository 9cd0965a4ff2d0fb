"""Kafka Connect's and Debezium's type names, and the Spark SQL types their values become.

One table for both Debezium parsers: the Python one (`debezium_json`) and the one in the JVM
(`debezium_native`) type every column alike, by these names.
"""

from __future__ import annotations

from cdc_medallion.sqltypes import UNCONSTRAINED_DECIMAL

# Kafka Connect primitive types -> Spark SQL types.
CONNECT_TYPES = {
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float32": "float",
    "float": "float",
    "float64": "double",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
    "struct": "string",
    "array": "string",
    "map": "string",
}

# Logical types -> Spark SQL types (value decoding in `_decoder`).
LOGICAL_TYPES = {
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.Time": "string",
    "io.debezium.time.MicroTime": "string",
    "io.debezium.time.NanoTime": "string",
    "org.apache.kafka.connect.data.Time": "string",
    "io.debezium.time.ZonedTime": "string",
    "io.debezium.time.Timestamp": "timestamp",
    "io.debezium.time.MicroTimestamp": "timestamp",
    "io.debezium.time.NanoTimestamp": "string",  # 7-9 digits (Oracle TIMESTAMP(9), SQL Server datetime2(7))
    "org.apache.kafka.connect.data.Timestamp": "timestamp",
    "io.debezium.time.ZonedTimestamp": "timestamp",
    "io.debezium.time.Year": "int",
    "io.debezium.time.MicroDuration": "bigint",
    "io.debezium.data.VariableScaleDecimal": UNCONSTRAINED_DECIMAL,  # PostgreSQL numeric, Oracle NUMBER
    "io.debezium.data.Json": "string",
    "io.debezium.data.Uuid": "string",
    "io.debezium.data.Xml": "string",
    "io.debezium.data.Enum": "string",
    "io.debezium.data.EnumSet": "string",
    "io.debezium.data.Bits": "binary",
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"
