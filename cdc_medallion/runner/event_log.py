"""The event log, shaped like the Databricks pipeline event log.

`details` is a JSON string; for `flow_progress` events it holds
`{"flow_progress": {"status", "metrics": {"num_output_rows"}, "data_quality": {"dropped_records",
"expectations": [{"name", "dataset", "passed_records", "failed_records"}]}}}`, so reports and
queries written for Databricks read ours unchanged.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from cdc_medallion.names import EVENT_LOG
from cdc_medallion.storage.delta_store import DeltaStore

ORIGIN = StructType(
    [
        StructField("pipeline_name", StringType()),
        StructField("update_id", StringType()),
        StructField("flow_name", StringType()),
        StructField("dataset_name", StringType()),
    ]
)
EVENT_LOG_SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("event_type", StringType()),
        StructField("level", StringType()),
        StructField("message", StringType()),
        StructField("origin", ORIGIN),
        StructField("details", StringType()),
    ]
)


#: The event log gets a commit per update: with Delta's default of a checkpoint every 10 commits,
#: every tenth update paid a Spark job of seconds to write one, ten times an update with nothing
#: new. Replaying up to 100 small commits instead costs a reader of the log a fraction of that.
EVENT_LOG_PROPERTIES = {"layer": "system", "delta.checkpointInterval": "100"}


class EventLog:
    """Buffers one update's events and appends them in one commit (and on failure).

    `carried`: the events of an earlier update of the same run that wrote nothing, committed
    with this update's (`LocalRunner.update`), so that a run with nothing new commits once."""

    def __init__(
        self, store: DeltaStore, pipeline_name: str, update_id: str, carried: list[dict[str, Any]] | None = None
    ) -> None:
        self.store = store
        self.pipeline_name = pipeline_name
        self.update_id = update_id
        self.events: list[dict[str, Any]] = list(carried or ())

    def emit(
        self,
        event_type: str,
        message: str,
        details: dict[str, Any],
        flow: str | None = None,
        dataset: str | None = None,
        level: str = "INFO",
    ) -> None:
        self.events.append(
            {
                "id": uuid.uuid4().hex,
                "timestamp": dt.datetime.now(dt.UTC),
                "event_type": event_type,
                "level": level,
                "message": message,
                "origin": {
                    "pipeline_name": self.pipeline_name,
                    "update_id": self.update_id,
                    "flow_name": flow,
                    "dataset_name": dataset,
                },
                "details": json.dumps(details, default=str),
            }
        )

    def flush(self) -> None:
        if not self.events:
            return
        rows = self.store.spark.createDataFrame(self.events, schema=EVENT_LOG_SCHEMA)
        self.store.append(EVENT_LOG, rows, None, properties=EVENT_LOG_PROPERTIES)
        self.events.clear()
