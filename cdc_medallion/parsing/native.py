"""A format's native parse run, with its Python parser for the messages it does not take.

The native parse (`formats/native.py`, `Format.native_events`) answers NULL for a message it does
not take; the Python parser runs as an Arrow UDF that is handed NULL for every message the
native parse took: one projection computes the native events, and only the rest cross to
Python. (A union of a native and a Python branch would parse every message twice.)
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

from cdc_medallion.formats.native import FALLBACK, NATIVE
from cdc_medallion.model import BRONZE_SCHEMA, EVENT_SCHEMA
from cdc_medallion.parsing.cores import spread_over_cores

if TYPE_CHECKING:
    from cdc_medallion.formats.base import Format


def parse_hybrid(parser: Format, bronze: DataFrame) -> DataFrame:
    """Silver events: the native parse's where it answers an array, the Python parser's where NULL."""
    bronze_columns = [F.col(name) for name in BRONZE_SCHEMA.names]
    with_native = parser.native_events(spread_over_cores(bronze))
    python = _python_udf(parser)
    handed = F.when(F.col(NATIVE).isNull(), F.struct(*bronze_columns))
    both = with_native.select(F.col(NATIVE), python(handed).alias(FALLBACK))
    return both.select(F.inline(F.coalesce(F.col(NATIVE), F.col(FALLBACK))))


def _python_udf(parser: Format) -> Callable[[Column], Column]:
    """The Python parser as an Arrow UDF over bronze rows: each row's events (NULL in, NULL out)."""

    def parse(messages: pa.StructArray) -> pa.Array:
        from cdc_medallion.formats.base import _event_arrow_schema  # (the worker's import)

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
