"""Dataset definitions per layer; `transformations/*.py` call these so Databricks and the local
runner load the very same graph. This module names the layers' datasets; it imports none of
them (each imports it)."""

from __future__ import annotations

from cdc_medallion.identifiers import dataset_name


def bronze_name(source: str) -> str:
    return dataset_name("bronze", source)


def silver_name(source: str) -> str:
    return dataset_name("silver", source)


def layer_of(dataset: str) -> str:
    """bronze, silver (side tables and quarantines included) or gold (with its `_state/` tables),
    read off a dataset's name: what progress lines and kill points name."""
    return next((layer for layer in ("bronze", "silver") if dataset.startswith(f"{layer}_")), "gold")
