"""Delta table storage, written by delta-spark (`delta_store.py`)."""

from cdc_medallion.storage.delta_store import DatasetInfo, DeltaStore, Txn

__all__ = ["DatasetInfo", "DeltaStore", "Txn"]
