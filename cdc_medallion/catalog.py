"""What a storage root holds: its datasets with layer and row count, and reading one by name.

The CLI (`status`, `show`), the quality report, the kill drill and the tests all look tables
up this way, so the naming rules (system and state tables live in sub-folders) are in one place.
Listing needs no JVM, and neither does `first_rows` where delta-rs reads the table
(`storage/delta_rs.py` holds that rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.errors import ConfigError
from cdc_medallion.names import SYSTEM_DIR


def dataset_status(storage: Path) -> list[dict[str, Any]]:
    """One object per dataset: name, layer, rows, path (+ source_table, scd_type for gold)."""
    from cdc_medallion.storage.delta_rs import stored_datasets

    _require_storage(storage)
    entries = []
    for info in stored_datasets(storage.resolve()):  # no Spark needed to list tables
        layer = info.properties.get("layer") or ("system" if f"/{SYSTEM_DIR}/" in info.path else "unknown")
        entry: dict[str, Any] = {"name": info.name, "layer": layer, "rows": info.rows, "path": info.path}
        if layer == "gold":
            entry["source_table"] = info.properties.get("source_table")
            entry["scd_type"] = int(info.properties.get("scd_type", "1"))
        entries.append(entry)
    uncounted = [e for e in entries if e["rows"] is None]
    if uncounted:  # deletion vectors delta-rs cannot read here (storage/delta_rs.py)
        from cdc_medallion.spark import get_spark

        spark = get_spark()
        for entry in uncounted:
            entry["rows"] = read_dataset(spark, storage, entry["name"], entries).count()
    order = {"bronze": 0, "silver": 1, "quarantine": 2, "gold": 3, "system": 4}
    return sorted(entries, key=lambda e: (order.get(e["layer"], 5), e["name"]))


def _require_storage(storage: Path) -> None:
    if not storage.is_dir():
        raise ConfigError(f"storage {storage} does not exist: run the pipeline first")


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


def first_rows(storage: Path, name: str, limit: int) -> list[dict[str, Any]]:
    """The first `limit` rows of a dataset, ordered by every column Spark can order (map, array,
    struct and binary columns cannot be), ascending, NULLs first: what `show` prints. Python
    values as Spark's `Row.asDict(recursive=True)` gives them, whichever engine reads; Spark's
    rows go through Arrow too, since its `collect()` fails on a timestamp in year 1 or 9999
    (Python's `fromtimestamp`) that gold holds exactly."""
    from cdc_medallion.storage import delta_rs

    listed, path = _listed(storage, name)
    if delta_rs.readable_without_jvm(path):
        return python_rows(delta_rs.first_rows(path, limit))
    from cdc_medallion.spark import get_spark

    df = read_dataset(get_spark(), storage, name, listed)
    ordered = [f.name for f in df.schema.fields if f.dataType.typeName() not in ("map", "array", "struct", "binary")]
    return python_rows(df.orderBy(*ordered).limit(limit).toArrow())


def all_rows(storage: Path, name: str, spark: Any = None) -> list[dict[str, Any]]:
    """Every row of a dataset, in no order, as `first_rows` gives them, whichever engine reads:
    delta-rs where it reads the table as Spark does, which spares a Spark job and a snapshot
    per read; else Spark (`spark`, or the session `get_spark` starts)."""
    from cdc_medallion.storage import delta_rs

    listed, path = _listed(storage, name)
    if delta_rs.readable_without_jvm(path):
        return python_rows(delta_rs.read_table(path))
    if spark is None:
        from cdc_medallion.spark import get_spark

        spark = get_spark()
    return python_rows(read_dataset(spark, storage, name, listed).toArrow())


def _listed(storage: Path, name: str) -> tuple[list[dict[str, Any]], str]:
    """The datasets under `storage`, listed but not counted (no table is read), and `name`'s path."""
    from cdc_medallion.storage import delta_rs

    _require_storage(storage)
    listed = [{"name": n, "path": str(p)} for n, p in delta_rs.dataset_paths(Path(storage).resolve()).items()]
    return listed, dataset_entry(listed, name, storage)["path"]


def gold_dataset(status: list[dict[str, Any]], source_table: str, scd_type: int) -> str | None:
    """The gold table holding `source_table` as SCD `scd_type` (table names match case-insensitively)."""
    for entry in status:
        same_table = entry["layer"] == "gold" and (entry["source_table"] or "").lower() == source_table.lower()
        if same_table and entry["scd_type"] == scd_type:
            return entry["name"]
    return None
