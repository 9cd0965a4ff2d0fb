"""Stateful formats parse through one of Spark's stateful streaming operators.

Qlik's data messages need their table's metadata message, DataWorks' UPDATE_BEFOR needs its
UPDATE_AFTER, an IBM Q Replication transaction needs all its segments; any of these may come in
a later micro-batch. So the messages a batch cannot complete are kept in the query's state
store (RocksDB, versioned with the checkpoint) and parsed again with the next batch of their
group, together with the earlier events the format reads as context; what a group keeps is only
what is still open (`stateful_step.py`). The operators are Spark's own, so the same code runs
on Databricks.

Groups: one per source, or, for a format whose messages only need those sharing one value
(`Format.related_by`), one per hash bucket of that value, so the work spreads over cores. A
message that any message may need (`Format.needed_by_all`: Qlik's metadata) is fed to every
group: its own group (the bucket of a message without the value) emits its events, the others
learn from it (their context keeps its events), so each group knows what the whole batch knows.

A checkpoint keeps the layout it was made with, as its state is that layout's: the runner
names it in the session's conf (`LAYOUT_CONF`) while the query is planned. Layout 3 (this
version) runs `transformWithStateInPandas` (`stateful_processor.StepProcessor`, a list state
per kind of thing kept, a timer for a timed format); layouts 1 and 2 ran
`applyInPandasWithState`, which a checkpoint made with them keeps (`legacy_step`), and a format
split since a later layout (`Format.split_since_layout`) stays in one group there. Without the
setting (a new checkpoint, Databricks, a batch parse) the current layout holds.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.parsing.stateful_processor import (
    LEGACY_STATE,
    TICK_GROUP,
    StepProcessor,
    batch_step,
    legacy_step,
)
from cdc_medallion.parsing.stateful_step import COPY, GROUP

if TYPE_CHECKING:
    from cdc_medallion.formats.base import Format

# PySpark's own serializer for these operators pads its output with empty frames through
# `pd.concat`, which pandas 2 warns about once per Python worker; the warning is about pyspark's
# code, not ours or the data, and would print into every run's output. This module is imported
# in each worker that runs the operator, so the filter is set there.
warnings.filterwarnings("ignore", message="The behavior of DataFrame concatenation with empty", category=FutureWarning)

#: Hash buckets of `related_by` values: fixed, as the state is kept per bucket.
BUCKETS = 16
#: The group of the messages without a `related_by` value (a format not split has group 0).
NO_VALUE_GROUP = -1
#: The layout of this version: 1, one group per format but DataWorks' buckets; 2, Qlik split too
#: (`QlikJson.related_by`), its metadata fed to every group; 3, `transformWithStateInPandas`.
STATE_LAYOUT = 3
#: The first layout whose state is `transformWithStateInPandas`'s.
KEYED_STATE_SINCE = 3
LAYOUT_CONF = "cdc_medallion.state.layout"
ENVELOPE = "__envelope"  # `Format.split_envelope`, while the groups are worked out
#: The operator node of layout 3 in a query's plan, with timers when its format is timed.
TIMED_OPERATOR = "TransformWithStateInPySpark"


def parse_with_state(parser: Format, bronze: DataFrame) -> DataFrame:
    """Bronze rows -> silver events through the state store (see the module's docstring)."""
    layout = _layout(bronze)
    rows = _grouped(parser, bronze, layout)
    if not bronze.isStreaming:  # one batch on its own (tools, tests): nothing held before it
        return rows.groupBy(GROUP).applyInPandas(batch_step(parser), schema=EVENT_SCHEMA)
    if layout < KEYED_STATE_SINCE:
        return rows.groupBy(GROUP).applyInPandasWithState(
            legacy_step(parser),
            outputStructType=EVENT_SCHEMA,
            stateStructType=LEGACY_STATE,
            outputMode="append",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    if parser.timed:
        rows = rows.unionByName(_ticks(bronze.sparkSession, rows))
    return rows.groupBy(GROUP).transformWithStateInPandas(
        statefulProcessor=StepProcessor(parser, rows.columns),
        outputStructType=EVENT_SCHEMA,
        outputMode="Append",
        timeMode="ProcessingTime" if parser.timed else "None",
    )


@contextmanager
def planned_in_layout(spark: SparkSession, layout: int) -> Iterator[None]:
    """The stateful operators planned inside split their messages as `layout` did (the layout
    of the checkpoint they will run from)."""
    if layout == STATE_LAYOUT:
        yield
        return
    spark.conf.set(LAYOUT_CONF, str(layout))
    try:
        yield
    finally:
        spark.conf.unset(LAYOUT_CONF)


def _layout(bronze: DataFrame) -> int:
    named = bronze.sparkSession.conf.get(LAYOUT_CONF, None)
    return int(named) if named else STATE_LAYOUT


def _grouped(parser: Format, bronze: DataFrame, layout: int) -> DataFrame:
    """Each bronze row with its group (`GROUP`), and, for a message fed to every group, a copy
    for each other group (`COPY` true)."""
    if parser.related_by is None or layout < parser.split_since_layout:
        return bronze.withColumn(GROUP, F.lit(0).cast("long")).withColumn(COPY, F.lit(False))
    rows = bronze if parser.split_envelope is None else bronze.withColumn(ENVELOPE, F.expr(parser.split_envelope))
    value = F.expr(parser.related_by)
    own = F.coalesce(F.pmod(F.xxhash64(value), F.lit(BUCKETS)), F.lit(NO_VALUE_GROUP)).cast("long")
    if parser.needed_by_all is None:
        return rows.withColumn(GROUP, own).withColumn(COPY, F.lit(False)).drop(ENVELOPE)
    every = F.array(*[F.lit(g).cast("long") for g in [NO_VALUE_GROUP, *range(BUCKETS)]])
    groups = F.when(F.expr(parser.needed_by_all), every).otherwise(F.array(own))
    fed = rows.select("*", F.posexplode(groups).alias("__nth", GROUP))
    return fed.withColumn(COPY, F.col("__nth") > 0).drop("__nth", ENVELOPE)


def _ticks(spark: SparkSession, rows: DataFrame) -> DataFrame:
    """One row per start of the query, and one per micro-batch after it (`rate-micro-batch`
    under `availableNow` plans one batch of it), in `TICK_GROUP`: a query whose bronze has
    nothing new still runs a batch, in which the timers that are due fire."""
    ticks = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).option("numPartitions", 1).load()
    columns = [F.lit(None).cast(f.dataType).alias(f.name) for f in rows.schema if f.name not in (GROUP, COPY)]
    return ticks.select(*columns, F.lit(TICK_GROUP).cast("long").alias(GROUP), F.lit(False).alias(COPY))
