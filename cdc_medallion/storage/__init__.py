"""Delta table storage: delta-spark writes and reads every table (`delta_store.py`); delta-rs
reads them without a JVM where it can (`delta_rs.py`).

`DeltaStore` and `Txn` are imported on first use, so that the JVM-free readers (`status`,
`show`) do not import pyspark with this package."""

from typing import Any

__all__ = ["DatasetInfo", "DeltaStore", "Txn"]


def __getattr__(name: str) -> Any:
    if name == "DatasetInfo":
        from cdc_medallion.storage.delta_rs import DatasetInfo

        return DatasetInfo
    if name in ("DeltaStore", "Txn"):
        from cdc_medallion.storage import delta_store

        return getattr(delta_store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
