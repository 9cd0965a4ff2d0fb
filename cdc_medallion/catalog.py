"""What a storage root holds: its datasets with layer and row count, and reading one by name.

The CLI (`status`, `show`), the quality report, the kill drill and the tests all look tables
up this way, so the naming rules (system and state tables live in sub-folders) are in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdc_medallion.errors import ConfigError


def dataset_status(storage: Path) -> list[dict[str, Any]]:
    """One object per dataset: name, layer, rows, path (+ source_table, scd_type for gold)."""
    from cdc_medallion.storage.delta_store import stored_datasets

    if not storage.is_dir():
        raise ConfigError(f"storage {storage} does not exist: run the pipeline first")
    entries = []
    for info in stored_datasets(storage.resolve()):  # no Spark needed to list tables
        layer = info.properties.get("layer") or ("system" if "/_system/" in info.path else "unknown")
        entry: dict[str, Any] = {"name": info.name, "layer": layer, "rows": info.rows, "path": info.path}
        if layer == "gold":
            entry["source_table"] = info.properties.get("source_table")
            entry["scd_type"] = int(info.properties.get("scd_type", "1"))
        entries.append(entry)
    order = {"bronze": 0, "silver": 1, "quarantine": 2, "gold": 3, "system": 4}
    return sorted(entries, key=lambda e: (order.get(e["layer"], 5), e["name"]))


def dataset_entry(status: list[dict[str, Any]], name: str, storage: Path) -> dict[str, Any]:
    """The `dataset_status` entry of `name`, or an error listing the datasets there are."""
    for entry in status:
        if entry["name"] == name:
            return entry
    have = ", ".join(sorted(e["name"] for e in status))
    raise ConfigError(f"no dataset {name!r} in {storage} (have: {have})")


def read_dataset(spark: Any, storage: Path, name: str, status: list[dict[str, Any]] | None = None) -> Any:
    """A dataset as a DataFrame, by the name `dataset_status` lists (pass its result to save a scan)."""
    from cdc_medallion.storage.delta_store import DeltaStore

    entry = dataset_entry(status if status is not None else dataset_status(storage), name, storage)
    store = DeltaStore(storage, spark)
    path = Path(entry["path"])
    return store.read(name if path.parent == store.root else f"{path.parent.name}/{name}")


def gold_dataset(status: list[dict[str, Any]], source_table: str, scd_type: int) -> str | None:
    """The gold table holding `source_table` as SCD `scd_type` (table names match case-insensitively)."""
    for entry in status:
        same_table = entry["layer"] == "gold" and (entry["source_table"] or "").lower() == source_table.lower()
        if same_table and entry["scd_type"] == scd_type:
            return entry["name"]
    return None
