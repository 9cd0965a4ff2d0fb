"""Small batches are handled in the driver, with Arrow, instead of by more Spark jobs.

On two cores a Spark job costs a tenth of a second to a second however few rows it holds.
A batch of a few thousand rows spent most of its time in jobs that count, cache and write
it (bench, 20k changes): collected once, it is counted and split with Arrow and written by
delta-rs in the same atomic commit. The limit is `pipeline.driver_apply_max_rows`.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame


def collect_small(rows: DataFrame, limit: int, few: bool = False, many: bool = False) -> pa.Table | None:
    """The rows as one Arrow table when there are at most `limit`; None when more (or limit 0).

    One job either way. The query runs with a limit of `limit + 1`, so a batch over the limit
    costs at most that many rows of work and memory before it is left to Spark. The limit has
    a price: its rows are shuffled into one partition, a stage of their own (0.3 s of a 2.8 s
    silver batch). So when the caller knows the rows are `few` (its new input was counted and
    is within the limit) there is no limit, and the rows are kept even if a little over it: a
    Canal message of several rows gives several events, and 78,513 messages gave 100,133.
    Collected, they are in memory already; handing them to Spark would parse them twice
    (silver took 17.6 s instead of about 8).

    When the caller expects `many` (its new input is over the limit, though what it derives may
    be fewer: one table's rows of a view over many), the rows under the limit are counted
    first, and only a batch within it is collected, whole, as it is known to fit: counting
    100,001 cached rows took 0.1 s, shipping them to Arrow to drop them 0.6-1.1 s (bench, a
    150k-row gold batch).
    """
    if limit <= 0:
        return None
    if few:
        return rows.toArrow()
    if many:
        return None if rows.limit(limit + 1).count() > limit else rows.toArrow()
    collected = rows.limit(limit + 1).toArrow()
    return None if collected.num_rows > limit else collected
