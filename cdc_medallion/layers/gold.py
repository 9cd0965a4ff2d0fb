"""Gold: per source table, the current state (SCD1) and the change history (SCD2).

A temporary view turns the table's change events into typed columns plus `__op`,
`__sequence` and `__present` (the columns the message carried); two auto CDC flows apply it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from pyspark.sql import DataFrame
from pyspark.sql.types import ArrayType, DataType, StringType, StructField, StructType, _parse_datatype_string

from cdc_medallion import dp
from cdc_medallion.civil_time import INFINITIES
from cdc_medallion.config import PipelineConf, TableConf
from cdc_medallion.identifiers import (
    COLUMN_MAPPING,
    GOLD_COLUMN_SQL,
    check_column,
    gold_column,
    needs_column_mapping,
    quote,
    sql_text,
)
from cdc_medallion.model import KIND_CHANGE, OP_DELETE, OP_TRUNCATE, OP_UPDATE
from cdc_medallion.names import changes_name, history_name, silver_name
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
IMAGE = "__image"  # a working column of `changes`, not in its output


_TRUE, _FALSE = "('true', 't', '1', 'y', 'yes')", "('false', 'f', '0', 'n', 'no')"
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
# A number in exponent form (`1.5E+3`): its digits before and after the point, and the exponent.
_EXPONENT_FORM = "'^ *[+-]?([0-9]*)(?:[.]([0-9]*))?[eE]([+-]?[0-9]+) *$'"


def typed(value: str, spark_type: str) -> str:
    """Canonical text -> typed value (SQL); NULL when it does not convert (a cast failure, which
    `values_cast` in gold.yml quarantines by default).

    A value the type cannot hold exactly does not convert either: Spark's cast would round a
    decimal to the column's scale (`1.005` in DECIMAL(9,2) is 1.01), cut a timestamp's
    nanoseconds and a date's time of day, all without a word. A year outside 1-9999 (a BC date,
    `+10000-01-01`, Debezium's extreme longs for PostgreSQL's `infinity`) converts: Spark's DATE
    and TIMESTAMP hold it, and the readers beside Spark print it as text (`civil_time`); the
    words `infinity` and `-infinity` are Spark's last and first instants (`INFINITIES`). The
    type is re-spelled by Spark's own parser, so conf text never reaches SQL as written.
    """
    kind = _type_sql(spark_type.strip())
    if kind == "binary":
        return f"try_to_binary({value}, 'base64')"
    if kind == "boolean":
        return f"CASE WHEN lower({value}) IN {_TRUE} THEN true WHEN lower({value}) IN {_FALSE} THEN false END"
    if kind == "string":
        return value
    cast = f"try_cast({value} AS {kind})"
    decimal = _DECIMAL.fullmatch(kind)
    if decimal is not None:
        return f"CASE WHEN {_within_scale(value, int(decimal[2]))} THEN {cast} END"
    if kind in ("timestamp", "timestamp_ntz"):
        zone = "Z" if kind == "timestamp" else ""  # an instant's text in UTC, whatever the session's zone
        words = " ".join(f"WHEN '{word}' THEN CAST('{text}{zone}' AS {kind})" for word, text in INFINITIES.items())
        exact = f"CASE WHEN NOT {value} rlike '[.][0-9]{{6}}[0-9]*[1-9]' THEN {cast} END"  # no nanoseconds
        return f"CASE lower(trim({value})) {words} ELSE {exact} END"
    if kind == "date":
        # A time of day must be midnight; a date past what TIMESTAMP_NTZ holds (year 294247)
        # is compared by its text.
        same = f"try_cast({value} AS timestamp_ntz) = try_cast({cast} AS timestamp_ntz)"
        whole_day = f"coalesce({same}, NOT {value} rlike '[T ]' OR {value} rlike '[T ]00:00(:00([.]0+)?)?$')"
        return f"CASE WHEN {whole_day} THEN {cast} END"
    return cast


def _within_scale(value: str, scale: int) -> str:
    """SQL: whether a number's text has no significant digit beyond `scale` fraction digits (its
    trailing zeros are not significant; in exponent form the exponent moves the point)."""
    plain = f"NOT {value} rlike '[.][0-9]{{{scale}}}[0-9]*[1-9]'"
    whole, fraction = (f"regexp_extract({value}, {_EXPONENT_FORM}, {group})" for group in (1, 2))
    exponent = f"try_cast(regexp_extract({value}, {_EXPONENT_FORM}, 3) AS bigint)"
    digits = f"concat({whole}, {fraction})"
    significant = f"regexp_replace({digits}, '0+$', '')"
    # digits after the point = fraction digits - exponent - the trailing zeros dropped
    after_point = f"length({fraction}) - {exponent} - (length({digits}) - length({significant}))"
    exponent_form = f"({significant} = '' OR {after_point} <= {scale})"
    return f"(CASE WHEN {value} rlike '[eE]' THEN {exponent_form} ELSE {plain} END)"


@lru_cache(maxsize=1024)
def _type_sql(spark_type: str) -> str:
    """A type as Spark spells it: parsed once per spelling, not once per column per batch."""
    return _data_type(spark_type).simpleString()


@lru_cache(maxsize=1024)
def _data_type(spark_type: str) -> DataType:
    """A type parsed by Spark (a JVM call), once per spelling: every update declares every
    table's view, whose schema has a type per column."""
    return _parse_datatype_string(spark_type)


def changes(events: DataFrame, table: TableConf) -> DataFrame:
    """One table's change events as typed columns (the source of its auto CDC flows).

    Written as SQL text: a table has tens of columns, and building each as Python Columns cost
    a thousand JVM round trips per batch, more than the batch itself.
    """
    schema_part, _, name_part = table.table.rpartition(".")
    where = f"kind = {sql_text(KIND_CHANGE)} AND lower(source_table) = {sql_text(name_part.lower())}"
    if schema_part:
        where += f" AND lower(coalesce(source_schema, source_db)) = {sql_text(schema_part.lower())}"
    # Each event with the row image its columns read, chosen once (each column's value and its
    # cast check read it); an update that changes the primary key also deletes the row under
    # its old key, as a second row. One generator, not a projection per step: Spark analyzes
    # each projection anew, and every update plans this view for every table.
    image = f"CASE WHEN op = {sql_text(OP_DELETE)} THEN before ELSE after END"
    event = f"array(named_struct('op', op, '{IMAGE}', {image}))"
    moved = " OR ".join(
        f"(before[{sql_text(k)}] IS NOT NULL AND after[{sql_text(k)}] IS NOT NULL"
        f" AND before[{sql_text(k)}] <> after[{sql_text(k)}])"
        for k in table.keys
    )
    if moved:
        with_old_key = f"array_append({event}, named_struct('op', {sql_text(OP_DELETE)}, '{IMAGE}', before))"
        event = f"CASE WHEN op = {sql_text(OP_UPDATE)} AND ({moved}) THEN {with_old_key} ELSE {event} END"
    selected = events.filter(where).selectExpr(f"inline({event})", "sequence", "event_ts", "bronze_ref")
    columns, failures = [], []
    for name, spark_type in table.columns.items():
        raw = f"{IMAGE}[{sql_text(check_column(name, f'column of {table.table}'))}]"
        value = typed(raw, spark_type)
        columns.append(f"{value} AS {quote(gold_column(name))}")
        # The reason names the column, the value and the type, so a quarantined change explains itself.
        kind = sql_text(" is not " + _type_sql(spark_type.strip()))
        reason = f"concat({sql_text(name + ': ')}, substring({raw}, 1, 80), {kind})"
        failures.append(f"CASE WHEN {raw} IS NOT NULL AND ({value}) IS NULL THEN {reason} END")
    gone = f"op IN ({sql_text(OP_DELETE)}, {sql_text(OP_TRUNCATE)})"
    present = f"transform(map_keys({IMAGE}), c -> {GOLD_COLUMN_SQL.format('c')})"
    cast_errors = f"filter(array({', '.join(failures)}), x -> x IS NOT NULL)" if failures else "array()"
    return selected.selectExpr(
        *columns,
        f"op AS {OP}",
        f"sequence AS {SEQUENCE}",
        f"CASE WHEN {gone} THEN CAST(NULL AS array<string>) ELSE {present} END AS {PRESENT}",
        f"CAST({cast_errors} AS array<string>) AS {CAST_ERRORS}",
        f"event_ts AS {EVENT_TS}",
        f"bronze_ref AS {BRONZE_REF}",
    )


def view_schema(columns: Mapping[str, str]) -> StructType:
    fields = [StructField(gold_column(name), _data_type(t)) for name, t in columns.items()]
    fields += [
        StructField(OP, StringType()),
        StructField(SEQUENCE, StringType()),
        StructField(PRESENT, ArrayType(StringType())),
        StructField(CAST_ERRORS, ArrayType(StringType())),
    ]
    return StructType(fields)


def define_table(conf: PipelineConf, table: TableConf) -> None:
    for column in [*table.columns, *table.keys]:
        check_column(column, f"column of {table.table}")
    gold = table.gold_name
    view = changes_name(gold)
    keys = [gold_column(k) for k in table.keys]
    key_rules = {f"key_{k}_present": f"{quote(k)} IS NOT NULL OR {OP} = '{OP_TRUNCATE}'" for k in keys}
    rules = load_rules(conf.expectations, "gold", None, view_schema(table.columns))

    @dp.temporary_view(name=view, comment=f"Typed change feed of {table.table}")
    @dp.expect_all_or_quarantine(key_rules)
    @dp.expectations_from(rules)
    def feed():
        return changes(dp.read_stream(silver_name(table.source)), table)

    properties = {"layer": "gold", "source": table.source, "source_table": table.table}
    if needs_column_mapping(table.columns):  # names with spaces, commas, ...: Delta stores them mapped
        properties.update(COLUMN_MAPPING)
    common = {
        "source": view,
        "keys": keys,
        "sequence_by": SEQUENCE,
        "apply_as_deletes": f"{OP} = '{OP_DELETE}'",
        "apply_as_truncates": f"{OP} = '{OP_TRUNCATE}'",
        "except_column_list": list(META_COLUMNS),
        "present_columns_column": PRESENT,
    }
    dp.create_streaming_table(name=gold, comment=f"Current state of {table.table}", table_properties=properties)
    dp.create_auto_cdc_flow(target=gold, name=gold, stored_as_scd_type=1, **common)
    history = history_name(gold)
    dp.create_streaming_table(name=history, comment=f"Change history of {table.table}", table_properties=properties)
    dp.create_auto_cdc_flow(
        target=history,
        name=history,
        stored_as_scd_type=2,
        track_history_except_column_list=[gold_column(c) for c in table.track_history_except] or None,
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
