"""Applying batches straight through an auto CDC flow's batch function, for property tests
that would take too long through whole pipeline updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql.types import StructType

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.runner.auto_cdc.applier import apply_batch
from cdc_medallion.storage.delta_store import DeltaStore, Txn


def apply_batches(spark: Any, root: Path, flow: AutoCdcFlow, batches: list[list[tuple]], schema: StructType) -> None:
    store = DeltaStore(root, spark)
    for version, batch in enumerate(batches):
        apply_batch(store, flow, spark.createDataFrame(batch, schema), Txn("t<-v", version))


def target_rows(spark: Any, root: Path, flow: AutoCdcFlow) -> list[tuple]:
    """The target's rows as tuples in its column order, sorted."""
    rows = DeltaStore(root, spark).read(flow.target).collect()
    return sorted((tuple(r) for r in rows), key=repr)
