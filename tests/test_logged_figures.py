"""The quality step's figures from the event log, read in one scan (`events.logged_figures`), and
from the events appended since the last step's scan (`checks.logged` with the memo)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from cdc_medallion.names import EVENT_LOG
from cdc_medallion.quality.checks import logged
from cdc_medallion.quality.events import LoggedFigures, StaleKeys, logged_figures
from cdc_medallion.quality.memo import QualityMemo
from cdc_medallion.storage.delta_store import DeltaStore

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


EVENTS = [
    progress("gold_orders", 1, 5, {"stale_keys": 3, "stale_unplaced": 1, "stale_samples": ["id=7"]}),
    progress("silver_x", 1, 7, {"quarantined_records": 2}),
    progress("gold_orders", 2, 4, {"stale_keys": 2, "stale_samples": ["id=8"], "quarantined_records": 6}),
    progress("gold_orders", 0, 2, {"stale_keys": 9}),  # an older figure, logged later
    progress("gold_items", 3, 1, {"stale_keys": 0}),
    progress("silver_x", 4, 3),
]


def test_figures_of_two_parts_of_the_log_merge_into_the_figures_of_the_whole(spark):
    """What the quality step remembers of the log up to a version, merged with the figures of
    the events since (and through its JSON form), is what one scan of the whole log gives."""
    for cut in range(len(EVENTS) + 1):
        before, after = EVENTS[:cut], EVENTS[cut:]
        whole = logged_figures(spark.createDataFrame(EVENTS, SCHEMA))
        remembered = LoggedFigures.from_dict(
            json.loads(json.dumps(logged_figures(spark.createDataFrame(before, SCHEMA)).as_dict()))
        )
        merged = remembered.merged(logged_figures(spark.createDataFrame(after, SCHEMA)))
        assert (merged.rows, merged.stale_keys) == (whole.rows, whole.stale_keys), cut
    assert whole.stale_keys["gold_orders"] == StaleKeys(2, 0, ("id=8",))


def test_the_quality_step_reads_only_the_events_appended_since_its_last_scan(spark, tmp_path, monkeypatch):
    """`checks.logged` with the memo: the second scan reads the commits since the first, and
    its figures equal a whole scan's; a commit that is not an append, or a log made again,
    makes it read the whole log."""
    store = DeltaStore(tmp_path / "storage", spark)
    memo = QualityMemo(store, tmp_path / "memo")
    store.append(EVENT_LOG, spark.createDataFrame(EVENTS[:3], SCHEMA), None)
    first = logged(store, memo, "u1")
    since: list[int] = []
    appended = store.appended_since
    monkeypatch.setattr(store, "appended_since", lambda name, v: since.append(v) or appended(name, v))
    store.append(EVENT_LOG, spark.createDataFrame(EVENTS[3:], SCHEMA), None)
    second = logged(store, memo, "u2")
    whole = logged_figures(store.read(EVENT_LOG))
    assert since == [0] and appended(EVENT_LOG, 0).count() == len(EVENTS) - 3
    assert (second.rows, second.stale_keys) == (whole.rows, whole.stale_keys) != (first.rows, first.stale_keys)

    store.merge_table(EVENT_LOG, spark).delete("origin.dataset_name = 'gold_items'")  # not an append
    assert appended(EVENT_LOG, 1) is None
    assert logged(store, memo, "u3").rows == logged_figures(store.read(EVENT_LOG)).rows
    assert "gold_items" not in logged(store, memo, "u4").rows

    store.drop_all()  # a log made again, to the same version as the one remembered
    for part in (EVENTS[:1], EVENTS[1:2], EVENTS[2:3]):
        store.append(EVENT_LOG, spark.createDataFrame(part, SCHEMA), None)
    assert logged(store, memo, "u5").rows == logged_figures(store.read(EVENT_LOG)).rows
