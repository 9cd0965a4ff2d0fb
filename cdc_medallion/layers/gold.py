"""Gold: per source table, the current state (SCD1) and the change history (SCD2).

A temporary view turns the table's change events into typed columns plus `__op`,
`__sequence` and `__present` (the columns the message carried); two auto CDC flows apply it.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from cdc_medallion import dp
from cdc_medallion.config import PipelineConf, TableConf
from cdc_medallion.identifiers import check_identifier, dataset_name, quote
from cdc_medallion.layers import silver_name
from cdc_medallion.model import KIND_CHANGE, OP_DELETE, OP_TRUNCATE, OP_UPDATE
from cdc_medallion.quality.rules import load_rules

OP, SEQUENCE, PRESENT, CAST_ERRORS, EVENT_TS, BRONZE_REF = (
    "__op",
    "__sequence_by",
    "__present",
    "__cast_errors",
    "__event_ts",
    "__bronze_ref",
)
META_COLUMNS = (OP, SEQUENCE, PRESENT, CAST_ERRORS, EVENT_TS, BRONZE_REF)


def typed(value: Column, spark_type: str) -> Column:
    """Canonical text -> typed value; NULL when it does not convert (counted as a cast failure)."""
    kind = spark_type.strip().lower()
    if kind == "binary":
        return F.try_to_binary(value, F.lit("base64"))
    if kind == "boolean":
        lowered = F.lower(value)
        return (
            F.when(lowered.isin("true", "t", "1", "y", "yes"), F.lit(True))
            .when(lowered.isin("false", "f", "0", "n", "no"), F.lit(False))
            .otherwise(F.lit(None).cast("boolean"))
        )
    if kind == "string":
        return value
    return value.try_cast(kind)


def changes(events: DataFrame, table: TableConf) -> DataFrame:
    """One table's change events as typed columns (the source of its auto CDC flows)."""
    schema_part, _, name_part = table.table.rpartition(".")
    selected = events.filter((F.col("kind") == KIND_CHANGE) & (F.lower("source_table") == name_part.lower()))
    if schema_part:
        selected = selected.filter(F.lower(F.coalesce("source_schema", "source_db")) == schema_part.lower())
    # An update that changes the primary key also deletes the row under its old key.
    moved = F.lit(False)
    for key in table.keys:
        old, new = F.col("before").getItem(key), F.col("after").getItem(key)
        moved = moved | (old.isNotNull() & new.isNotNull() & (old != new))
    old_keys = selected.filter((F.col("op") == OP_UPDATE) & moved).withColumn("op", F.lit(OP_DELETE))
    selected = selected.unionByName(old_keys)
    image = F.when(F.col("op") == OP_DELETE, F.col("before")).otherwise(F.col("after"))
    columns = []
    failures = []
    for name, spark_type in table.columns.items():
        raw = image.getItem(name)
        value = typed(raw, spark_type)
        columns.append(value.alias(name))
        failures.append(F.when(raw.isNotNull() & value.isNull(), F.lit(name)))
    present = F.when(F.col("op").isin(OP_DELETE, OP_TRUNCATE), F.lit(None).cast(ArrayType(StringType()))).otherwise(
        F.map_keys(image)
    )
    return selected.select(
        *columns,
        F.col("op").alias(OP),
        F.col("sequence").alias(SEQUENCE),
        present.alias(PRESENT),
        (F.filter(F.array(*failures), lambda x: x.isNotNull()) if failures else F.array().cast("array<string>")).alias(
            CAST_ERRORS
        ),
        F.col("event_ts").alias(EVENT_TS),
        F.col("bronze_ref").alias(BRONZE_REF),
    )


def view_schema(columns: Mapping[str, str]) -> StructType:
    from pyspark.sql.types import _parse_datatype_string

    fields = [StructField(name, _parse_datatype_string(t)) for name, t in columns.items()]
    fields += [
        StructField(OP, StringType()),
        StructField(SEQUENCE, StringType()),
        StructField(PRESENT, ArrayType(StringType())),
        StructField(CAST_ERRORS, ArrayType(StringType())),
    ]
    return StructType(fields)


def define_table(conf: PipelineConf, table: TableConf) -> None:
    for column in [*table.columns, *table.keys]:
        check_identifier(column, f"column of {table.table}")
    gold = table.gold_name
    view = dataset_name("changes", gold.removeprefix("gold_"))
    key_rules = {f"key_{k}_present": f"{quote(k)} IS NOT NULL OR {OP} = '{OP_TRUNCATE}'" for k in table.keys}
    rules = load_rules(conf.expectations, "gold", None, view_schema(table.columns))

    @dp.temporary_view(name=view, comment=f"Typed change feed of {table.table}")
    @dp.expect_all_or_quarantine(key_rules)
    @dp.expectations_from(rules)
    def feed():
        return changes(dp.read_stream(silver_name(table.source)), table)

    properties = {"layer": "gold", "source": table.source, "source_table": table.table}
    common = {
        "source": view,
        "keys": list(table.keys),
        "sequence_by": SEQUENCE,
        "apply_as_deletes": f"{OP} = '{OP_DELETE}'",
        "apply_as_truncates": f"{OP} = '{OP_TRUNCATE}'",
        "except_column_list": list(META_COLUMNS),
        "present_columns_column": PRESENT,
    }
    dp.create_streaming_table(name=gold, comment=f"Current state of {table.table}", table_properties=properties)
    dp.create_auto_cdc_flow(target=gold, name=gold, stored_as_scd_type=1, **common)
    history = f"{gold}_history"
    dp.create_streaming_table(name=history, comment=f"Change history of {table.table}", table_properties=properties)
    dp.create_auto_cdc_flow(
        target=history,
        name=history,
        stored_as_scd_type=2,
        track_history_except_column_list=list(table.track_history_except) or None,
        **common,
    )


def define(conf: PipelineConf) -> None:
    names: dict[str, str] = {}
    for table in conf.tables:
        if not table.keys or not table.columns:
            continue  # no key yet (unconfigured) or no change seen yet: nothing to apply
        if table.gold_name in names:
            raise ValueError(
                f"tables {names[table.gold_name]!r} and {table.table!r} both map to {table.gold_name}; "
                "give one of them a `name` in conf"
            )
        names[table.gold_name] = table.table
        define_table(conf, table)
