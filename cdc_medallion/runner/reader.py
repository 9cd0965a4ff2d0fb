"""What `dp.read_stream` / `dp.read` / `landing_stream` mean while the local runner plans a flow.

A query function runs once per update, when its flow's streaming query is defined, and gets what
it would get on Databricks: `read_stream` returns a streaming DataFrame (a Delta stream of the
table, after the flows that feed that table have run in this update), `read` a batch one, and a
temporary view is inlined, its expectations marked on its rows (`expectations.mark`) for the
flow's batches to count and split. The reader records what the query read, so the runner can
tell whether the query has anything new before it starts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from cdc_medallion.config import SourceConf
from cdc_medallion.declarative.definitions import Dataset
from cdc_medallion.errors import GraphError
from cdc_medallion.runner import expectations as exp
from cdc_medallion.sources.files import SOURCE_NAME, source_options

if TYPE_CHECKING:
    from cdc_medallion.runner.local import LocalRunner


@dataclass
class Inputs:
    """What one query read: Delta streams, Delta tables read whole, and landed sources."""

    streams: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    sources: list[SourceConf] = field(default_factory=list)
    checked_view: Dataset | None = None  # a view whose expectations the batches must split


class PlanReader:
    """The reader installed while a streaming flow's query function builds its DataFrame."""

    def __init__(self, runner: LocalRunner, query: str, streaming: bool = True) -> None:
        self.runner = runner
        self.query = query
        self.streaming = streaming
        self.inputs = Inputs()

    def read_stream(self, name: str) -> DataFrame:
        if not self.streaming:  # a materialized view reads what a stream would have read, whole
            return self.read(name)
        dataset = self.runner.graph.dataset(name)
        if dataset.is_view:
            return self._view(dataset)
        self._fresh(name)
        again = name in self.inputs.streams  # a self-join reads it twice: its sides differ
        self.inputs.streams.append(name)
        return self.runner.store.read_stream(name, self.runner.stream_options()) if again else self.runner.stream(name)

    def read(self, name: str) -> DataFrame:
        dataset = self.runner.graph.dataset(name)
        if dataset.is_view:
            return self._view(dataset)
        self._fresh(name)
        self.inputs.tables.append(name)
        return self.runner.store.read(name)

    def read_source(self, source: SourceConf) -> DataFrame:
        spark = self.runner.spark
        if source.input is None:
            from cdc_medallion.sources.kafka import kafka_stream

            self.inputs.sources.append(source)
            return kafka_stream(source)
        if not source.input.path.exists():
            missing = source.input.path
            self.runner.progress(f"  source {source.name}: input {missing} does not exist (yet): nothing to land")
        self.inputs.sources.append(source)
        conf = self.runner.conf
        cores = spark.sparkContext.defaultParallelism
        options = source_options(source, conf.max_messages_per_batch, conf.max_bytes_per_batch, cores)
        return spark.readStream.format(SOURCE_NAME).options(**options).load()

    def _fresh(self, name: str) -> None:
        self.runner.ensure_fresh(name)
        if not self.runner.store.exists(name):
            raise GraphError(f"{self.query} reads {name}, which has never been written")

    def _view(self, dataset: Dataset) -> DataFrame:
        assert dataset.query is not None
        rows = dataset.query()
        if not dataset.expectations:
            return rows
        if self.inputs.checked_view is not None:
            raise GraphError(
                f"{self.query} reads the views {self.inputs.checked_view.name} and {dataset.name}, which both have "
                "expectations: a flow reads at most one view with expectations"
            )
        self.inputs.checked_view = dataset
        return exp.mark(rows, dataset.expectations, dataset.name)


class BatchReader:
    """The reader installed while a member of a shared query (`sharing.py`) builds its rows from
    one micro-batch: the shared stream is that batch; a view is inlined and marked as in a plan."""

    def __init__(self, runner: LocalRunner, stream: str, batch: DataFrame) -> None:
        self.runner = runner
        self.stream = stream
        self.batch = batch

    def read_stream(self, name: str) -> DataFrame:
        if name == self.stream:
            return self.batch
        dataset = self.runner.graph.dataset(name)
        if not dataset.is_view:
            raise GraphError(f"a flow sharing the query over {self.stream} read {name} as well")
        assert dataset.query is not None
        rows = dataset.query()
        return exp.mark(rows, dataset.expectations, dataset.name) if dataset.expectations else rows

    def read(self, name: str) -> DataFrame:
        raise GraphError(f"a flow sharing the query over {self.stream} read table {name} as well")


class TableReader:
    """The reader installed while a view is computed over what its tables hold now, read whole
    rather than streamed (`LocalRunner.view_now`): a table is its snapshot, a view is inlined."""

    def __init__(self, runner: LocalRunner) -> None:
        self.runner = runner

    def read_stream(self, name: str) -> DataFrame:
        return self.read(name)

    def read(self, name: str) -> DataFrame:
        dataset = self.runner.graph.dataset(name)
        if not dataset.is_view:
            return self.runner.store.read(name)
        assert dataset.query is not None
        rows = dataset.query()
        return exp.mark(rows, dataset.expectations, dataset.name) if dataset.expectations else rows
