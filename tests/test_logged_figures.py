"""The quality step's figures from the event log, read in one scan (`events.logged_figures`)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from cdc_medallion.quality.events import StaleKeys, logged_figures

SCHEMA = StructType(
    [
        StructField("event_type", StringType()),
        StructField("origin", StructType([StructField("dataset_name", StringType())])),
        StructField("timestamp", TimestampType()),
        StructField("details", StringType()),
    ]
)


def progress(dataset: str | None, minute: int, rows: int, quality: dict[str, Any] | None = None) -> tuple:
    details: dict[str, Any] = {"flow_progress": {"metrics": {"num_output_rows": rows}}}
    if quality is not None:
        details["flow_progress"]["data_quality"] = quality
    return ("flow_progress", (dataset,), dt.datetime(2026, 1, 1, 0, minute), json.dumps(details))


def test_rows_are_summed_and_each_tables_latest_stale_figure_holds_over_later_batches_without_one(spark):
    events = spark.createDataFrame(
        [
            progress("gold_orders", 1, 5, {"stale_keys": 3, "stale_unplaced": 1, "stale_samples": ["id=7"]}),
            progress("gold_orders", 2, 4, {"stale_keys": 2, "stale_samples": ["id=8"], "quarantined_records": 6}),
            progress("gold_orders", 3, 1, {"quarantined_records": 1}),  # a later batch gives no figure
            progress("gold_orders", 0, 2, {"stale_keys": 9}),  # an older figure, logged later
            progress("silver_x", 1, 7),
            progress(None, 1, 100),  # no dataset: not a table's
            ("update_progress", ("gold_orders",), dt.datetime(2026, 1, 1, 0, 9), json.dumps({"state": "COMPLETED"})),
        ],
        SCHEMA,
    )
    figures = logged_figures(events)
    assert figures.rows == {"gold_orders": (12, 7), "silver_x": (7, 0)}
    assert figures.stale_keys == {"gold_orders": StaleKeys(2, 0, ("id=8",))}
