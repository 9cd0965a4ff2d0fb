"""The two fixed schemas every format shares: the bronze landing row and the silver change event.

A silver row is one *event*: most are row changes (`kind = 'change'`), but schema changes,
heartbeats, transaction markers, tombstones and informational messages are events too, so that
every bronze message is accounted for in exactly one place and the counts add up
(`quality/accounting.py`).
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# --- bronze -----------------------------------------------------------------------------------
# The Kafka source's own columns, so local files and Kafka land identically, plus lineage.
HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
BRONZE_SCHEMA: Final = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("headers", ArrayType(HEADER)),
        StructField("_source", StringType()),
        StructField("_file", StringType()),
        StructField("_line", LongType()),
        StructField("_ingest_ts", TimestampType()),
        StructField("_landing_error", StringType()),
    ]
)

# --- silver -----------------------------------------------------------------------------------
KIND_CHANGE: Final = "change"
KIND_SCHEMA_CHANGE: Final = "schema_change"
KIND_HEARTBEAT: Final = "heartbeat"
KIND_TRANSACTION: Final = "transaction"
KIND_TOMBSTONE: Final = "tombstone"
KIND_MESSAGE: Final = "message"
KIND_KEY: Final = "key"
KIND_ERROR: Final = "error"
KIND_HELD: Final = "held"
KINDS: Final = (
    KIND_CHANGE,
    KIND_SCHEMA_CHANGE,
    KIND_HEARTBEAT,
    KIND_TRANSACTION,
    KIND_TOMBSTONE,
    KIND_MESSAGE,
    KIND_KEY,
    KIND_ERROR,
    KIND_HELD,
)

OP_INSERT: Final = "INSERT"
OP_UPDATE: Final = "UPDATE"
OP_DELETE: Final = "DELETE"
OP_SNAPSHOT: Final = "SNAPSHOT"
OP_TRUNCATE: Final = "TRUNCATE"
CHANGE_OPS: Final = (OP_INSERT, OP_UPDATE, OP_DELETE, OP_SNAPSHOT, OP_TRUNCATE)

# Row images are MAP<STRING,STRING>: a missing key means "column absent from the message",
# a key with a NULL value means "column is NULL". Values are canonical text (see values.py);
# `column_types` gives the Spark SQL type each value is cast to in gold.
IMAGE = MapType(StringType(), StringType(), valueContainsNull=True)

EVENT_SCHEMA: Final = StructType(
    [
        StructField("kind", StringType()),
        StructField("source_name", StringType()),
        StructField("source_format", StringType()),
        StructField("source_db", StringType()),
        StructField("source_schema", StringType()),
        StructField("source_table", StringType()),
        StructField("op", StringType()),
        StructField("key_columns", ArrayType(StringType())),
        StructField("before", IMAGE),
        StructField("after", IMAGE),
        StructField("changed_columns", ArrayType(StringType())),
        StructField("present_columns", ArrayType(StringType())),
        StructField("column_types", MapType(StringType(), StringType())),
        StructField("source_types", MapType(StringType(), StringType())),
        StructField("sequence", StringType()),
        StructField("tx_id", StringType()),
        StructField("tx_seq", LongType()),
        StructField("tx_last", BooleanType()),
        StructField("event_ts", TimestampType()),
        StructField("ingest_ts", TimestampType()),
        StructField("bronze_ref", StringType()),
        # Other bronze messages this event consumed (e.g. the UPDATE_BEFOR half of a pair, the
        # earlier segments of a transaction), so every message stays accounted for.
        StructField("related_refs", ArrayType(StringType())),
        StructField("detail", StringType()),
        StructField("flags", ArrayType(StringType())),
        StructField("error", StringType()),
        StructField("raw_message", StringType()),
    ]
)
EVENT_COLUMNS: Final = tuple(f.name for f in EVENT_SCHEMA.fields)


def bronze_ref_column():
    """Spark expression equal to `BronzeMessage.ref`: topic/partition/offset, or file:line."""
    from pyspark.sql import functions as F

    return F.when(
        F.col("offset").isNotNull(),
        F.concat_ws(
            "/", F.coalesce(F.col("topic"), F.lit("")), F.coalesce(F.col("partition"), F.lit(0)), F.col("offset")
        ),
    ).otherwise(F.concat_ws(":", F.col("_file"), F.col("_line")))
