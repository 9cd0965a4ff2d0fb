"""Parsing in the JVM, with the format's Python parser for the messages it does not take.

A format with a native parse (`Format.native`) turns bronze rows into silver events with Spark
SQL expressions alone, so most messages never leave the JVM. It takes a message only when every
part of it has the plain shape it was written for and knows it would give exactly the events
the Python parser gives; for any other message it answers NULL and the Python parser decides, so
a hostile or unusual message is quarantined (or read) exactly as before. The differential test
(`tests/test_native_parse.py`) holds the two to that, message by message.

The Python parser runs as an Arrow UDF that is handed NULL for every message the native parse
took: one projection computes the native events, and only the rest cross to Python. (A union of
a native and a Python branch would parse every message twice.)

The parse sets no session conf and reads none: on Databricks serverless (Spark Connect) a query
function may not set one, so a message's strictness is read off `from_json`'s own corrupt-record
column (see `strict_json`), whatever `spark.sql.json.enablePartialResults` says.

Opt-in and experimental (Debezium's `native_parse` option): the events are the same, but today it
is slower than the Python parser (bench/HISTORY.md, 2026-11-28 midday): each message repeats its
schema, which this parse reads again per message where Python reads each distinct schema once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType
from pyspark.util import PythonEvalType

from cdc_medallion.model import BRONZE_SCHEMA, EVENT_SCHEMA

if TYPE_CHECKING:
    from cdc_medallion.formats.base import Format

NATIVE = "_native"
FALLBACK = "_fallback"


def parse_hybrid(parser: Format, bronze: DataFrame) -> DataFrame:
    """Silver events: the native parse's where it answers an array, the Python parser's where NULL."""
    from cdc_medallion.formats.base import spread_over_cores

    bronze_columns = [F.col(name) for name in BRONZE_SCHEMA.names]
    with_native = parser.native_events(spread_over_cores(bronze))
    python = _python_udf(parser)
    handed = F.when(F.col(NATIVE).isNull(), F.struct(*bronze_columns))
    both = with_native.select(F.col(NATIVE), python(handed).alias(FALLBACK))
    return both.select(F.inline(F.coalesce(F.col(NATIVE), F.col(FALLBACK))))


def _python_udf(parser: Format) -> Callable[[Column], Column]:
    """The Python parser as an Arrow UDF over bronze rows: each row's events (NULL in, NULL out)."""

    def parse(messages: pa.StructArray) -> pa.Array:
        from cdc_medallion.formats.base import _event_arrow_schema

        schema = _event_arrow_schema()
        handed = messages.is_valid()
        batch = pa.RecordBatch.from_struct_array(messages.filter(handed))
        events, counts = parser.parse_counted(batch)
        offsets, position, nulls = [0], 0, []
        counted = iter(counts)
        for valid in handed.to_pylist():
            if valid:
                position += next(counted)
            offsets.append(position)
            nulls.append(not valid)
        structs = pa.StructArray.from_arrays(events.columns, fields=list(schema))
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), structs, mask=pa.array(nulls, pa.bool_()))

    with warnings.catch_warnings():  # it prefers type hints, which this module's are not at run time
        warnings.simplefilter("ignore", UserWarning)
        return F.arrow_udf(parse, ArrayType(EVENT_SCHEMA), PythonEvalType.SQL_SCALAR_ARROW_UDF)  # type: ignore[return-value]


# --- SQL pieces the native parses share ---------------------------------------------------------
# `from_json` (and `parse_json` too) read the first JSON value of a text and ignore whatever
# follows it, where Python's parser rejects the text. So the text is parsed inside five arrays
# and an object of its own: anything after its first value then breaks the JSON, or adds an
# element or a member (counted), or closes all five arrays, which only a text with `]` five times
# in a row (whitespace between) can do, and such a text goes to Python.
#
# A member of the wrong JSON type (a string where an object belongs) must hand the message to
# Python, which names the member. How `from_json` shows one depends on the session's
# `spark.sql.json.enablePartialResults`: the enclosing object NULL (false), or that member alone
# (true, Spark's default), which would pass for a member the message left out. Either way it is
# a record `from_json` could not read whole, and it writes such a record's text into the corrupt-
# record column when the schema has one: that column, NULL for every record read whole, is the
# test, and no session setting is needed (a query function on Spark Connect may set none).
_DEPTH = 5
_OPEN, _CLOSE = '{"w":' + "[" * _DEPTH + '{"v":', "}" + "]" * _DEPTH + "}"
_CLOSES = "'(\\\\][ \\\\t\\\\r\\\\n]*){5}'"
_CORRUPT = "__corrupt"


def strict_json(text: str, object_type: str) -> str:
    """SQL parsing `text` as one JSON object of `object_type` (a struct or a map), wrapped (see
    above); read it with `whole_text`."""
    nested = "array<" * _DEPTH + f"map<string,{object_type}>" + ">" * _DEPTH
    schema = f"struct<w: {nested}, {_CORRUPT}: string>"
    options = (
        "map('allowSingleQuotes', 'false', 'allowNonNumericNumbers', 'false', "
        f"'mode', 'PERMISSIVE', 'columnNameOfCorruptRecord', '{_CORRUPT}')"
    )
    return f"from_json(concat('{_OPEN}', {text}, '{_CLOSE}'), '{schema}', {options})"


def whole_text(parsed: str, text: str) -> tuple[str, str]:
    """SQL for the object `strict_json` parsed, and for whether the text was that object alone,
    read whole (false, never NULL, for any other text)."""
    level, alone = f"{parsed}.w", [f"{parsed}.{_CORRUPT} is null"]
    for _ in range(_DEPTH):
        alone.append(f"size({level}) = 1")
        level = f"get({level}, 0)"
    alone.append(f"size({level}) = 1 and map_contains_key({level}, 'v')")
    shaped = f"coalesce({' and '.join(alone)} and not {text} rlike {_CLOSES}, false)"
    return f"try_element_at({level}, 'v')", shaped


def position() -> Column:
    """`BronzeMessage.position`: the sortable landing position."""
    return F.when(
        F.col("offset").isNotNull(),
        F.format_string(
            "%s/%06d/%020d", F.coalesce("topic", F.lit("")), F.coalesce("partition", F.lit(0)), F.col("offset")
        ),
    ).otherwise(F.format_string("%s/%012d", F.coalesce("_file", F.lit("")), F.coalesce("_line", F.lit(0))))


def reference() -> Column:
    """`BronzeMessage.ref`: topic/partition/offset, or file:line."""
    return F.when(
        F.col("offset").isNotNull(),
        F.format_string("%s/%s/%s", F.coalesce("topic", F.lit("")), F.coalesce("partition", F.lit(0)), F.col("offset")),
    ).otherwise(
        F.format_string(
            "%s:%s", F.coalesce("_file", F.lit("None")), F.coalesce(F.col("_line").cast("string"), F.lit("None"))
        )
    )
