"""Whether a stateful query has a processing-time timer due, read from its checkpoint.

The runner does not start a query whose inputs have nothing new since it last caught up. A
timed stateful format (IBM Q Replication: an incomplete transaction's timeout) must still run
when one of its timers is due, or a transaction would be quarantined only when the source's
next message arrives. The checkpoint says both: its operator's metadata names its time mode
(a local file, read without a Spark job), and Spark's state data source lists the registered
timers (a small job, only for a query with processing-time timers and nothing new).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def timers_due(spark: SparkSession, checkpoint: Path) -> bool:
    """True when the query at `checkpoint` has a processing-time timer at or before now."""
    if not _keeps_processing_time_timers(checkpoint):
        return False
    # The state data source loads the store through its provider, which reports to the driver's
    # state store coordinator; the coordinator is registered with the session's streaming query
    # manager, made on first use. In a fresh process no query has started yet, so make it first
    # (else every task fails: "Cannot find endpoint: StateStoreCoordinator", and the run with it).
    spark.streams  # noqa: B018
    timers = spark.read.format("statestore").option("readRegisteredTimers", True).load(str(checkpoint))
    now = int(time.time() * 1000)
    return bool(timers.filter(F.col("expiration_timestamp_ms") <= now).limit(1).count())


def _keeps_processing_time_timers(checkpoint: Path) -> bool:
    """Its stateful operator's latest metadata (`state/<operator>/_metadata/v2/<batch>`: a
    version line, then JSON) names the processing-time mode."""
    for folder in (checkpoint / "state").glob("*/_metadata/v2"):
        batches = [p for p in folder.iterdir() if p.name.isdigit()]
        if not batches:
            continue
        latest = max(batches, key=lambda p: int(p.name))
        try:
            metadata = json.loads(latest.read_text(encoding="utf-8").split("\n", 1)[1])
            properties = json.loads(metadata.get("operatorPropertiesJson") or "{}")
        except (OSError, IndexError, ValueError):
            continue
        if properties.get("timeMode") == "ProcessingTime":
            return True
    return False
