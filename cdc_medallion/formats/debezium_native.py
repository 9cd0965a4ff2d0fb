"""Debezium JSON in the JVM: the schema envelope's messages parsed by Spark SQL alone.

Kafka Connect's JSON converter writes each value as `{"schema": S, "payload": P}`, and S types
every column, so no value's type has to be guessed from its JSON text (which VARIANT and
`from_json` cannot tell apart: `1.0` and `1` look alike to both). This parse takes a message
when it has that plain shape: its row images hold columns its schema describes, of primitive
Connect types or of the logical types decoded here (Date, Timestamp, MicroTimestamp, Decimal
up to 16 bytes); its metadata are of the JSON types Debezium writes. It
answers NULL for everything else (a schemaless message, a placeholder value, a message key it
cannot read as Python does, anything malformed), and `DebeziumJson.parse_message` decides those.

Values are the Python parser's canonical text, except the fraction digits of a `float64` column:
`1.50` arrives as `1.5`, the same double (the differential test compares those as doubles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdc_medallion.formats.native import NATIVE, position, reference, strict_json, whole_text
from cdc_medallion.model import BRONZE_SCHEMA

if TYPE_CHECKING:
    from cdc_medallion.formats.debezium_json import DebeziumJson

# Only what the parse reads: `from_json` skips the rest of the message without building it.
# Free-text members are VARIANT so that their JSON type can be checked (a STRING field would
# take a number as its digits, where the Python parser quarantines the message).
_COLUMN = "struct<field: variant, type: string, name: string, parameters: map<string,string>>"
VALUE_SCHEMA = (
    f"schema struct<fields: array<struct<field: string, fields: array<{_COLUMN}>>>>, "
    "payload struct<op: string, before: map<string,string>, after: map<string,string>, "
    "source: struct<db: variant, schema: variant, table: variant, lsn: string, file: variant, pos: string, "
    "row: string, commit_lsn: string, change_lsn: string, event_serial_no: string, scn: string, ts_ms: string, "
    "txId: variant>, "
    "ts_ms: string, transaction: struct<id: variant, data_collection_order: variant>>"
)

OPS = {"c": "INSERT", "u": "UPDATE", "d": "DELETE", "r": "SNAPSHOT", "t": "TRUNCATE"}
INTEGERS = ("int8", "int16", "int32", "int64")
FLOATS = ("float64", "double")  # float32 is left to Python: a double's text cast to float may round twice
TEXTS = ("string", "bytes")
TEXT_LOGICAL = ("io.debezium.data.Json", "io.debezium.data.Uuid", "io.debezium.data.Xml", "io.debezium.data.Enum")
DATE = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
MILLIS = ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp")
MICROS = "io.debezium.time.MicroTimestamp"
DECIMAL = "org.apache.kafka.connect.data.Decimal"

# Dates and times in years 1000-9999: four-digit years, as both Python and Spark write them.
_FIRST_DAY, _LAST_DAY = -354285, 2932896
_FIRST_MICRO, _LAST_MICRO = _FIRST_DAY * 86_400_000_000, (_LAST_DAY + 1) * 86_400_000_000 - 1
# Event times: below about year 2191 Python's `fromtimestamp(ms / 1000)` is exact to the millisecond.
_LAST_EVENT_MILLIS = 7_000_000_000_000


def _q(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _in(values: tuple[str, ...] | list[str]) -> str:
    return "(" + ", ".join(_q(v) for v in values) + ")"


def _text(variant: str) -> str:
    """A text member (`text_field`): NULL when absent, null or empty; `<BAD>` for another type."""
    return (
        f"case when {variant} is null or schema_of_variant({variant}) = 'VOID' then null "
        f"when schema_of_variant({variant}) = 'STRING' then nullif(variant_get({variant}, '$', 'string'), '') "
        "else '<BAD>' end"
    )


def _whole(text: str) -> str:
    """A whole number given as a JSON number or digits: true when absent or fine."""
    return f"({text} is null or {text} = '' or {text} rlike '^[0-9]+$')"


def _padded(text: str, width: int) -> str:
    """`f"{int(text):0{width}d}"`; NULL when its digits do not fit (then the message is not taken)."""
    digits = f"regexp_replace({text}, '^0+(?=.)', '')"
    return f"case when length({digits}) <= {width} then lpad({digits}, {width}, '0') end"


def _present(text: str) -> str:
    return f"({text} is not null and {text} != '')"


# Python writes a whole part and 6-digit fraction, the fraction only when non-zero.
def _micros_text(micros: str) -> str:
    """`timestamp_text` of microseconds since the epoch: whole seconds, then a 6-digit fraction
    when it is not zero (exact integer arithmetic; the day floors below the epoch)."""
    day = f"({micros} div 86400000000 - case when {micros} % 86400000000 < 0 then 1 else 0 end)"
    rest = f"({micros} - {day} * 86400000000)"
    clock = (
        f"concat(cast(date_add(DATE'1970-01-01', cast({day} as int)) as string), ' ', "
        f"lpad(cast({rest} div 3600000000 as string), 2, '0'), ':', "
        f"lpad(cast({rest} % 3600000000 div 60000000 as string), 2, '0'), ':', "
        f"lpad(cast({rest} % 60000000 div 1000000 as string), 2, '0'), "
        f"case when {rest} % 1000000 = 0 then '' else concat('.', lpad(cast({rest} % 1000000 as string), 6, '0')) end)"
    )
    return f"case when {micros} between {_FIRST_MICRO} and {_LAST_MICRO} then {clock} end"


_BASE64 = "'^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$'"


def _hex(value: str) -> str:
    return f"hex(try_to_binary({value}, 'base64'))"


def _magnitude(value: str, raw: str) -> str:
    """Digits of the absolute value of a Decimal's unscaled integer, from its bytes in hex."""
    negative = f"substr({raw}, 1, 1) >= '8'"
    extended = f"lpad({raw}, 32, case when {negative} then 'F' else '0' end)"
    # A negative number's magnitude is its complement plus one.
    flipped = (
        f"case when {negative} then translate({extended}, '0123456789ABCDEF', 'FEDCBA9876543210') else {extended} end"
    )
    high = f"cast(conv(substr({flipped}, 1, 16), 16, 10) as decimal(38,0))"
    low = f"cast(conv(substr({flipped}, 17, 16), 16, 10) as decimal(38,0))"
    magnitude = (
        f"try_add(try_add(try_multiply({high}, cast('18446744073709551616' as decimal(38,0))), {low}), "
        f"case when {negative} then 1 else 0 end)"
    )
    shaped = f"({value} rlike {_BASE64} and length({value}) between 4 and 24 and length({raw}) <= 32)"
    return f"case when {shaped} then cast({magnitude} as string) end"


def _decimal_text(raw: str, digits: str, scale: str) -> str:
    """Kafka Connect's Decimal (base64 of a big-endian two's-complement integer, 1-16 bytes) as
    `values.decimal_text` writes it: exact, plain, `scale` fraction digits."""
    negative = f"substr({raw}, 1, 1) >= '8'"
    padded = f"lpad({digits}, greatest(length({digits}), {scale} + 1), '0')"  # lpad cuts longer text
    plain = (
        f"case when {scale} = 0 then {digits} "
        f"else concat(substr({padded}, 1, length({padded}) - {scale}), '.', substr({padded}, -{scale})) end"
    )
    return f"case when {digits} is not null then concat(case when {negative} then '-' else '' end, {plain}) end"


def _value_text(column: str, value: str, raw: str = "x.h", magnitude: str = "x.d") -> str:
    """One image value as the Python parser writes it, by its column's schema; `<BAD>` for what
    only Python writes right (then the message is not taken)."""
    kind, logical = f"{column}.type", f"{column}.name"
    digits = f"{value} rlike '^-?[0-9]{{1,18}}$'"
    number = f"try_cast({value} as bigint)"
    # A string column's text is written as is, unless a JSON number with a fraction, an object or
    # an array could have produced it: `from_json` writes those its own way.
    written_as_is = (
        f"not ({value} rlike '^[\\\\[{{]' or ({value} rlike '^-?[0-9.]+([eE][-+]?[0-9]+)?$' and {value} rlike '[.eE]'))"
    )
    scale = f"try_cast(coalesce(nullif({column}.parameters['scale'], ''), '0') as int)"
    return (
        f"case when {value} is null then null "
        f"when {logical} is null and {kind} in {_in(INTEGERS)} "
        f"then case when {value} rlike '^-?[0-9]+$' then {value} end "
        f"when {logical} is null and {kind} = 'boolean' then case when {value} in ('true', 'false') then {value} end "
        f"when {logical} is null and {kind} in {_in(FLOATS)} then case when {value} rlike '^-?[0-9]' then {value} end "
        f"when ({logical} is null or {logical} in {_in(TEXT_LOGICAL)}) and {kind} in {_in(TEXTS)} "
        f"then case when {written_as_is} then {value} end "
        f"when {logical} in {_in(DATE)} then case when {digits} and {number} between {_FIRST_DAY} and {_LAST_DAY} "
        f"then cast(date_add(DATE'1970-01-01', cast({number} as int)) as string) end "
        f"when {logical} in {_in(MILLIS)} then case when {digits} then {_micros_text(f'({number} * 1000)')} end "
        f"when {logical} = {_q(MICROS)} then case when {digits} then {_micros_text(number)} end "
        f"when {logical} = {_q(DECIMAL)} then {_decimal_text(raw, magnitude, scale)} "
        "end"
    )


def _spark_type(column: str) -> str:
    """`debezium_json._spark_type`: a column's Spark type by its schema."""
    from cdc_medallion.formats.debezium_json import CONNECT_TYPES, LOGICAL_TYPES

    logical, kind = f"{column}.name", f"lower({column}.type)"
    precision = f"nullif(try_cast({column}.parameters['connect.decimal.precision'] as int), 0)"
    scale = f"coalesce(try_cast({column}.parameters['scale'] as int), 0)"
    # No precision: any number of digits, so text (as `decimal_type` has it); `greatest` skips NULLs.
    wide = f"case when {precision} is not null then greatest({precision}, {scale}) end"
    logical_cases = " ".join(f"when {_q(name)} then {_q(spark)}" for name, spark in LOGICAL_TYPES.items())
    connect_cases = " ".join(f"when {_q(name)} then {_q(spark)}" for name, spark in CONNECT_TYPES.items())
    return (
        f"case when {logical} = {_q(DECIMAL)} then case when {wide} <= 38 and {scale} <= {wide} "
        f"then concat('decimal(', {wide}, ',', {scale}, ')') else 'string' end "
        f"when {logical} = 'io.debezium.data.Bits' and {column}.parameters['length'] = '1' then 'boolean' "
        f"else coalesce(case {logical} {logical_cases} end, case {kind} {connect_cases} end, 'string') end"
    )


def _column_fine(column: str) -> str:
    """A column's schema the native parse reads as Python does (else the message is not taken)."""
    handled = [*INTEGERS, *FLOATS, *TEXTS, "boolean"]
    logical_handled = [*TEXT_LOGICAL, *DATE, *MILLIS, MICROS, DECIMAL]
    scale, precision = f"{column}.parameters['scale']", f"{column}.parameters['connect.decimal.precision']"
    return (
        f"({column} is not null and schema_of_variant({column}.field) = 'STRING' "
        f"and length(variant_get({column}.field, '$', 'string')) > 0 "
        f"and (({column}.name is null and {column}.type in {_in(handled)}) "
        f"or ({column}.name in {_in(logical_handled)} and {column}.type in ('int32', 'int64', 'string', 'bytes'))) "
        f"and {_whole(scale)} and {_whole(precision)})"
    )


def _image_fine(name: str) -> str:
    """Keys unique, each a described column with a usable name, each value written natively."""
    image = f"m.payload.{name}"
    return (
        f"({image} is null or (size(map_keys({image})) = size(array_distinct(map_keys({image}))) "
        f"and forall(map_keys({image}), k -> map_contains_key(described, k) "
        "and length(k) between 1 and 255 and not k rlike '[\\\\x00-\\\\x1f\\\\x7f`]') "
        f"and forall(map_values(converted_{name}), v -> v is null or v != '<BAD>')))"
    )


def _convert(image: str) -> str:
    """The image's values as text, in three passes so that each piece is worked out once per
    value (a higher-order function's body is interpreted, with no common subexpressions)."""
    described_values = (
        f"transform_values({image}, (k, v) -> named_struct('v', v, 'c', described[k], 'h', "
        f"case when described[k].name = {_q(DECIMAL)} and v rlike {_BASE64} then {_hex('v')} end))"
    )
    with_digits = (
        "transform_values(typed, (k, x) -> named_struct('v', x.v, 'c', x.c, 'h', x.h, 'd', "
        f"case when x.h is not null then {_magnitude('x.v', 'x.h')} end))"
    )
    bad = "case when x.v is not null then '<BAD>' end"
    text = f"transform_values(decoded, (k, x) -> coalesce({_value_text('x.c', 'x.v')}, {bad}))"
    usable = (
        f"{image} is not null and size(map_keys({image})) = size(array_distinct(map_keys({image}))) "
        f"and forall(map_keys({image}), k -> map_contains_key(described, k))"
    )
    return (
        f"case when {usable} then " + text.replace("decoded", with_digits.replace("typed", described_values)) + " end"
    )


def _key_values_fine(image: str) -> str:
    written_as_is = "not (v rlike '^[\\\\[{]' or (v rlike '^-?[0-9.]+([eE][-+]?[0-9]+)?$' and v rlike '[.eE]'))"
    return (
        f"(size(map_keys({image})) = size(array_distinct(map_keys({image}))) "
        f"and forall(map_values({image}), v -> v is null or {written_as_is}) "
        "and forall(map_keys({image}), k -> length(k) between 1 and 255 and not k rlike '[\\\\x00-\\\\x1f\\\\x7f`]'))"
    ).replace("{image}", image)


def native_events(parser: DebeziumJson, bronze: DataFrame, staged: bool = False) -> DataFrame:
    """Bronze rows with their events in `_native` (NULL: the Python parser decides)."""
    settings = parser.settings
    text = "case when value is not null and is_valid_utf8(value) then cast(value as string) end"
    key_text = "case when key is not null and is_valid_utf8(key) then cast(key as string) end"
    parsed = bronze.select(
        *BRONZE_SCHEMA.names,
        position().alias("position"),
        reference().alias("ref"),
        F.expr(strict_json(text, f"struct<{VALUE_SCHEMA}>")).alias("m_wrapped"),
        F.expr(f"{text} rlike '^[ \\\\t\\\\r\\\\n]*\\\\{{[ \\\\t\\\\r\\\\n]*\"schema\"[ \\\\t\\\\r\\\\n]*:'").alias(
            "enveloped"
        ),
        F.expr(strict_json(key_text, "map<string,string>")).alias("key_wrapped"),
        F.expr("case when key is null or length(key) = 0 then map() end").alias("key_none"),
    )
    value_object, value_alone = whole_text("m_wrapped", text)
    key_object, key_alone = whole_text("key_wrapped", key_text)
    parsed = parsed.selectExpr(
        *BRONZE_SCHEMA.names,
        "position",
        "ref",
        f"{value_object} as m",
        f"{value_alone} as strict",
        "enveloped",
        # The key as a map of its members' texts, and as an envelope.
        f"coalesce(key_none, case when {key_alone} then {key_object} end) as key_whole",
    )
    parsed = parsed.selectExpr(
        "*",
        "named_struct('schema', from_json(key_whole['schema'], 'fields array<struct<field: variant>>'), "
        "'payload', from_json(key_whole['payload'], 'map<string,string>')) as key_envelope",
    )
    topic_table = (
        _q(settings.table)
        if settings.table
        else "case when topic is not null and topic != '' then element_at(split(topic, '\\\\.'), -1) end"
    )
    columns = (
        "filter(coalesce(try_element_at(filter(m.schema.fields, f -> f.field = 'after' and f.fields is not null), 1), "
    )
    columns += "try_element_at(filter(m.schema.fields, f -> f.field = 'before' and f.fields is not null), 1))"
    columns += ".fields, c -> true)"
    derived = parsed.selectExpr(
        *BRONZE_SCHEMA.names,
        "position",
        "ref",
        "m",
        "enveloped and strict and m.schema is not null and m.payload is not null "
        "and not exists(m.schema.fields, f -> f is null) as shaped",
        f"{columns} as columns",
        # The key: an envelope's payload (schema then payload), else the whole object.
        "case when key_whole is null then null "
        "when not map_contains_key(key_whole, 'payload') then key_whole "
        "when map_keys(key_whole) = array('schema', 'payload') and key_envelope.payload is not null "
        "and (key_whole['schema'] is null or (key_envelope.schema is not null "
        "and not exists(key_envelope.schema.fields, f -> f is null))) then key_envelope.payload end as key_map",
        f"{_text('m.payload.source.table')} as source_table_text",
        f"{topic_table} as topic_table",
    )
    described = derived.selectExpr(
        "*",
        "case when columns is not null and size(columns) > 0 and forall(columns, c -> c is not null "
        "and schema_of_variant(c.field) = 'STRING') "
        "and size(array_distinct(transform(columns, c -> variant_get(c.field, '$', 'string')))) = size(columns) "
        "then map_from_arrays(transform(columns, c -> variant_get(c.field, '$', 'string')), columns) end as described",
    )
    converted = described.selectExpr(
        "*",
        f"{_convert('m.payload.before')} as converted_before",
        f"{_convert('m.payload.after')} as converted_after",
    )
    fielded = converted.selectExpr("*", *(f"{sql} as {name}" for name, sql in _fields(parser).items()))
    if staged:
        return fielded
    return fielded.select(*BRONZE_SCHEMA.names, _events(parser).alias(NATIVE))


CHECKS = (
    "envelope",
    "op",
    "schema",
    "before",
    "after",
    "placeholder",
    "key",
    "images",
    "table",
    "names",
    "transaction",
    "numbers",
    "event_ts",
    "order",
    "tombstone",
)


def failed_checks(parser: DebeziumJson, bronze: DataFrame) -> DataFrame:
    """Each check's verdict per message: why the native parse left a message to Python."""
    staged = native_events(parser, bronze, staged=True)
    return staged.select(*(_events(parser, name).alias(name) for name in CHECKS))


def _fields(parser: DebeziumJson) -> dict[str, str]:
    """An event's parts, each worked out once per message in a stage of its own: the checks and
    the event both read them (in one expression, a CASE's branches would each work them out)."""
    settings = parser.settings
    source = "m.payload.source"
    op_cases = " ".join(f"when {_q(code)} then {_q(op)}" for code, op in OPS.items())
    tx_variant = f"coalesce({source}.txId, m.payload.transaction.id)"
    tx_type = f"schema_of_variant({tx_variant})"
    order_variant = "m.payload.transaction.data_collection_order"
    source_ts = f"try_cast(nullif({source}.ts_ms, '') as decimal(38,0))"
    payload_ts = "try_cast(nullif(m.payload.ts_ms, '') as decimal(38,0))"
    ts_order = f"case when {source_ts} > 0 then {source}.ts_ms else nullif(m.payload.ts_ms, '') end"
    row = f"coalesce(nullif({source}.row, ''), '0')"
    schema_name = _q(settings.schema_name) if settings.schema_name else "null"
    column_names = "transform(columns, c -> variant_get(c.field, '$', 'string'))"
    return {
        "e_op": f"case m.payload.op {op_cases} end",
        "e_table": f"coalesce(source_table_text, {_q(settings.table) if settings.table else 'null'}, topic_table)",
        "e_db": _text(source + ".db"),
        "e_schema": _text(source + ".schema"),
        "e_schema_name": schema_name,
        "e_file": _text(source + ".file"),
        "e_tx_id": (
            f"case when {tx_variant} is null or {tx_type} = 'VOID' then null "
            f"when {tx_type} = 'STRING' then nullif(variant_get({tx_variant}, '$', 'string'), '') "
            f"when {tx_type} in ('TINYINT', 'SMALLINT', 'INT', 'BIGINT') "
            f"and variant_get({tx_variant}, '$', 'bigint') >= 0 "
            f"then variant_get({tx_variant}, '$', 'string') else '<BAD>' end"
        ),
        "e_order_type": f"schema_of_variant({order_variant})",
        "e_event_millis": f"case when {source_ts} > 0 then {source_ts} when {payload_ts} > 0 then {payload_ts} end",
        "e_ts_order": ts_order,
        "e_row": row,
        "e_key_columns": "case when size(key_map) > 0 then map_keys(key_map) end",
        "e_column_names": column_names,
    }


def _events(parser: DebeziumJson, only: str | None = None) -> Column:
    settings = parser.settings
    source = "m.payload.source"
    op, table, file_text, tx_id = "e_op", "e_table", "e_file", "e_tx_id"
    order_variant = "m.payload.transaction.data_collection_order"
    order_type = "e_order_type"
    tx_seq = (
        f"case when {order_variant} is not null and {order_type} in ('TINYINT', 'SMALLINT', 'INT', 'BIGINT') "
        f"then variant_get({order_variant}, '$', 'bigint') end"
    )
    numbers = [f"{source}.{n}" for n in ("lsn", "pos", "row", "scn", "ts_ms", "event_serial_no")] + ["m.payload.ts_ms"]
    numbers_fine = " and ".join(_whole(n) for n in numbers)
    event_millis = "e_event_millis"
    millis = f"try_cast({event_millis} as bigint)"
    event_ts = f"case when {event_millis} <= {_LAST_EVENT_MILLIS} then timestamp_millis({millis}) end"
    ts_order, row = "e_ts_order", "e_row"
    order = (
        f"case when {_present(source + '.lsn')} then concat('lsn:', {_padded(source + '.lsn', 20)}) "
        f"when {file_text} is not null and {_present(source + '.pos')} then concat('binlog:', {file_text}, ':', "
        f"{_padded(source + '.pos', 20)}, ':', {_padded(row, 10)}) "
        f"when {_present(source + '.scn')} then concat('scn:', {_padded(source + '.scn', 30)}) "
        f"when {ts_order} is not null then concat('ts:', {_padded(ts_order, 20)}) else 'ts:' end"
    )
    before, after = "converted_before", "converted_after"
    partial = f"not forall(map_keys({after}), c -> map_contains_key({before}, c))"
    changed = (
        f"case when {op} = 'UPDATE' and {before} is not null and {after} is not null and not ({partial}) "
        f"then filter(map_keys({after}), c -> not ({before}[c] <=> {after}[c])) end"
    )
    flags = (
        f"case when {op} = 'UPDATE' and {before} is null then array('before_image_missing') "
        f"when {op} = 'UPDATE' and {after} is not null and {partial} then array('before_image_partial') end"
    )
    types = f"map_from_arrays(e_column_names, transform(columns, c -> {_spark_type('c')}))"
    source_types = (
        "map_from_arrays(e_column_names, transform(columns, c -> coalesce(nullif(c.name, ''), lower(c.type))))"
    )
    placeholder_free = "true"
    if settings.unavailable_value_placeholder:
        import base64

        marker = settings.unavailable_value_placeholder
        encoded = base64.b64encode(marker.encode()).decode()
        placeholder_free = " and ".join(
            f"({image} is null or not exists(map_values({image}), v -> v is not null "
            f"and (v = {_q(marker)} or v = {_q(encoded)} "
            f"or v like '[%')))"
            for image in ("m.payload.before", "m.payload.after")
        )
    key_columns = "e_key_columns"
    change = F.expr(
        "named_struct("
        "'kind', 'change', "
        f"'source_name', {_q(parser.source_name)}, 'source_format', {_q(parser.name)}, "
        "'source_db', e_db, 'source_schema', coalesce(e_schema, e_schema_name), "
        f"'source_table', {table}, 'op', {op}, 'key_columns', {key_columns}, "
        f"'before', {before}, 'after', {after}, 'changed_columns', {changed}, "
        f"'present_columns', map_keys({after}), 'column_types', {types}, 'source_types', {source_types}, "
        f"'sequence', concat({order}, '|', position), 'tx_id', {tx_id}, 'tx_seq', {tx_seq}, "
        "'tx_last', cast(null as boolean), "
        f"'event_ts', {event_ts}, 'ingest_ts', _ingest_ts, 'bronze_ref', ref, "
        "'related_refs', cast(null as array<string>), 'detail', cast(null as string), "
        f"'flags', {flags}, 'error', cast(null as string), 'raw_message', cast(null as string))"
    )
    table_name = f"coalesce({table}, '')"
    order_types = "('TINYINT', 'SMALLINT', 'INT', 'BIGINT', 'VOID', 'STRING', 'BOOLEAN')"
    checks = {
        "envelope": "shaped",
        "op": f"{op} is not null and {op} != 'TRUNCATE'",
        "schema": f"described is not null and forall(columns, c -> {_column_fine('c')})",
        "before": _image_fine("before"),
        "after": _image_fine("after"),
        "placeholder": placeholder_free,
        "key": f"key_map is not null and {_key_values_fine('key_map')}",
        "images": f"not ({op} in ('INSERT', 'SNAPSHOT', 'UPDATE') and {after} is null) "
        f"and not ({op} = 'DELETE' and {before} is null)",
        "table": f"{table_name} not in ('', '<BAD>') and length({table_name}) <= 255 "
        f"and not {table_name} rlike '[\\\\x00-\\\\x1f\\\\x7f`./]'",
        "names": "coalesce(e_db, '') != '<BAD>' and coalesce(e_schema, '') != '<BAD>' "
        f"and coalesce({file_text}, '') != '<BAD>'",
        "transaction": f"coalesce({tx_id}, '') != '<BAD>' and not ({order_variant} is not null "
        f"and {order_type} not in {order_types} and not {order_type} rlike '^DECIMAL\\\\([0-9]+,[1-9]')",
        "numbers": f"{numbers_fine} and {source}.commit_lsn is null and {source}.change_lsn is null",
        "event_ts": f"({event_millis} is null or {event_millis} <= {_LAST_EVENT_MILLIS})",
        "order": f"{order} is not null",
    }
    fine = " and ".join(f"({check})" for check in checks.values())
    tombstone = F.expr(
        "named_struct("
        "'kind', 'tombstone', "
        f"'source_name', {_q(parser.source_name)}, 'source_format', {_q(parser.name)}, "
        "'source_db', cast(null as string), 'source_schema', cast(null as string), "
        "'source_table', topic_table, 'op', cast(null as string), "
        f"'key_columns', {key_columns}, 'before', case when size(key_map) > 0 then key_map end, "
        "'after', cast(null as map<string,string>), 'changed_columns', cast(null as array<string>), "
        "'present_columns', cast(null as array<string>), 'column_types', cast(null as map<string,string>), "
        "'source_types', cast(null as map<string,string>), 'sequence', position, 'tx_id', cast(null as string), "
        "'tx_seq', cast(null as bigint), 'tx_last', cast(null as boolean), 'event_ts', cast(null as timestamp), "
        "'ingest_ts', _ingest_ts, 'bronze_ref', ref, 'related_refs', cast(null as array<string>), "
        "'detail', cast(null as string), 'flags', cast(null as array<string>), 'error', cast(null as string), "
        "'raw_message', cast(null as string))"
    )
    tombstone_fine = (
        "key_map is not null and " + _key_values_fine("key_map") + " and (topic_table is null or "
        "(length(topic_table) between 1 and 255 and not topic_table rlike '[\\\\x00-\\\\x1f\\\\x7f`./]'))"
    )
    if only is not None:  # one check alone: what `failed_checks` reports
        return F.expr(checks[only]) if only in checks else F.expr(tombstone_fine)
    return (
        F.when(F.col("_landing_error").isNotNull(), F.lit(None))
        .when(F.col("value").isNull() & F.expr(tombstone_fine), F.array(tombstone))
        .when(F.col("value").isNotNull() & F.expr(fine), F.array(change))
    )
