"""Shared fixtures: one Spark session for the whole suite (cold start is ~7 s), real Delta tables."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark():
    from cdc_medallion.spark import get_spark

    return get_spark("cdc-medallion-tests")


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / "storage"


def shared_path(*parts: str) -> Path:
    """A file under ../shared; tests that need it skip, printing why, when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared must sit beside the repository)")
    return path
