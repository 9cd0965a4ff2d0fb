"""How a query function reads other datasets, whichever engine runs it.

On Databricks a dataset is a table in the pipeline's catalog and schema; locally the runner
installs a reader that serves only the rows this flow has not processed yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession


class DatasetReader(Protocol):
    def read(self, name: str) -> DataFrame: ...

    def read_stream(self, name: str) -> DataFrame: ...


class CatalogReader:
    """Databricks / Spark Connect: datasets are catalog tables."""

    def read(self, name: str) -> DataFrame:
        return SparkSession.active().read.table(name)

    def read_stream(self, name: str) -> DataFrame:
        return SparkSession.active().readStream.table(name)


_reader: ContextVar[DatasetReader | None] = ContextVar("cdc_medallion_reader", default=None)


def current_reader() -> DatasetReader:
    return _reader.get() or CatalogReader()


def is_local() -> bool:
    """True while the local runner executes a flow."""
    return _reader.get() is not None


@contextmanager
def reading_with(reader: DatasetReader) -> Iterator[None]:
    token = _reader.set(reader)
    try:
        yield
    finally:
        _reader.reset(token)
