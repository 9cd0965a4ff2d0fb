"""Bronze rows -> silver events: the one entry to a format's parse, whichever way it runs."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame

from cdc_medallion.formats.base import Format
from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.parsing.cores import spread_over_cores
from cdc_medallion.parsing.native import parse_hybrid
from cdc_medallion.parsing.stateful import parse_with_state


def parse(parser: Format, bronze: DataFrame) -> DataFrame:
    """Bronze rows -> silver events, in parallel via Arrow batches (`mapInArrow`).

    A stateful format parses through Spark's stateful operator instead (`stateful.py`): the
    messages it holds wait in the query's state store for what completes them. A format with a
    native parse parses in the JVM first (`native.py`).
    """
    if parser.stateful:
        return parse_with_state(parser, bronze)
    if parser.native:
        return parse_hybrid(parser, bronze)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield parser.parse_batch(batch)

    return spread_over_cores(bronze).mapInArrow(run, EVENT_SCHEMA)
