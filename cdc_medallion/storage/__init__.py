"""Delta table storage: delta-rs locally (default), delta-spark where its jars resolve."""

from cdc_medallion.storage.delta_rs import DatasetInfo, DeltaRsStore

__all__ = ["DatasetInfo", "DeltaRsStore"]
