"""A graph recorded by the Databricks stand-ins, checked and run on real Spark as Lakeflow would.

The stand-ins record what the facade declares; this runs it. Each dataset's query function (and
each flow's) is called under a recording reader, in dependency order as the functions read each
other, over real DataFrames: a batch read of what the upstream dataset produced (a static
DataFrame, computed once). Datasets in `served` are given, not computed: bronze reads Kafka on
Databricks, so a test serves it from the messages it lands locally.

Checked on the way, each failure an AssertionError naming the dataset or flow:
- every read, every auto CDC source and target and every append target names a dataset of the
  graph (Unity Catalog names are case-insensitive);
- an auto CDC target comes from `create_streaming_table`;
- keys, `sequence_by` and the column lists name columns of the flow's source
  (`auto_cdc_reference.CdcFlow.of`);
- every constraint parses and analyses over the dataset it guards (Spark's own parser).

`execute=False` stops at schemas (no Spark job beyond analysis): the checks only. With
`execute=True` the expectations act as Databricks documents (`expect` keeps the row,
`expect_or_drop` drops a row whose constraint is false, `expect_or_fail` fails the update; a NULL
result passes natively, which the facade's NULL-safe constraints turn into a failure), append
flows append, and each auto CDC flow is applied by `auto_cdc_reference`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_medallion.declarative.runtime import reading_with
from tests import auto_cdc_reference
from tests.databricks_standins import Recorded, Recorder


class RecordingReader:
    """`dp.read` / `dp.read_stream` inside one query function: names checked, reads recorded."""

    def __init__(self, run: GraphRun, owner: str) -> None:
        self.run, self.owner = run, owner

    def read(self, name: str) -> DataFrame:
        found = self.run.resolve(name, f"the query of {self.owner!r}")
        self.run.reads.setdefault(self.owner, []).append(found)
        return self.run.dataset(found)

    read_stream = read


class GraphRun:
    def __init__(
        self, recorder: Recorder, spark: SparkSession, served: Mapping[str, DataFrame], execute: bool = True
    ) -> None:
        self.recorder, self.spark, self.execute = recorder, spark, execute
        self.names = {name.lower(): name for name in recorder.datasets}
        assert len(self.names) == len(recorder.datasets), "two datasets differ only in case"
        self.served = {self.resolve(name, "the test"): df for name, df in served.items()}
        for flow_name, flow in recorder.flows.items():  # a flow into nothing is never computed: look now
            self.resolve(flow.options["target"], f"{flow.api} {flow_name!r} (its target)")
            if flow.api != "append_flow":
                self.resolve(flow.options["source"], f"{flow.api} {flow_name!r} (its source)")
        self.reads: dict[str, list[str]] = {}  # query owner (dataset or flow) -> datasets it read
        self._done: dict[str, DataFrame] = {}
        self._busy: list[str] = []

    def resolve(self, name: Any, by: str) -> str:
        assert isinstance(name, str), f"{by} names {name!r}, not a dataset name"
        found = self.names.get(name.lower())
        assert found is not None, f"{by} names {name!r}, which is no dataset of the graph"
        return found

    def run_all(self) -> dict[str, DataFrame]:
        """Every dataset, and so every query function and flow."""
        return {name: self.dataset(name) for name in self.recorder.datasets}

    def dataset(self, name: str) -> DataFrame:
        if name in self._done:
            return self._done[name]
        assert name not in self._busy, f"a cycle: {' -> '.join([*self._busy, name])}"
        self._busy.append(name)
        try:
            result = self.served[name] if name in self.served else self._compute(name)
            if self.execute:  # computed once: every reader gets these rows, not a new plan
                result = result.localCheckpoint(eager=True)
        finally:
            self._busy.pop()
        self._done[name] = result
        return result

    # --- computing one dataset ----------------------------------------------------------------
    def _compute(self, name: str) -> DataFrame:
        recorded = self.recorder.datasets[name]
        parts = [self._query(name, recorded.query)] if recorded.query is not None else []
        for flow_name, flow in self.recorder.flows.items():
            if self.resolve(flow.options["target"], f"flow {flow_name!r}") != name:
                continue
            if flow.api == "append_flow":
                parts.append(self._query(flow_name, flow.query))
            else:
                assert recorded.api == "create_streaming_table", (
                    f"auto CDC flow {flow_name!r} writes {name!r}, made by {recorded.api}, not create_streaming_table"
                )
                parts.append(self._auto_cdc(flow_name, flow))
        assert parts, f"{recorded.api} {name!r} has neither a query nor a flow"
        rows = reduce(lambda a, b: a.unionByName(b), parts)
        return self._expectations(name, recorded, rows)

    def _query(self, owner: str, query: Any) -> DataFrame:
        self.reads.setdefault(owner, [])
        with reading_with(RecordingReader(self, owner)):
            result = query()
        assert isinstance(result, DataFrame), f"the query of {owner!r} returned {result!r}"
        result.schema  # noqa: B018 - analysis: an unknown column fails here, naming the query
        return result

    def _auto_cdc(self, flow_name: str, flow: Recorded) -> DataFrame:
        source_name = self.resolve(flow.options["source"], f"auto CDC flow {flow_name!r}")
        self.reads[flow_name] = [source_name]
        source = self.dataset(source_name)
        spec = auto_cdc_reference.CdcFlow.of(flow.options, source.columns, f"auto CDC flow {flow_name!r}")
        if not self.execute:
            return self.spark.createDataFrame([], auto_cdc_reference.target_schema(spec, source))
        return auto_cdc_reference.apply(spec, source)

    def _expectations(self, name: str, recorded: Recorded, rows: DataFrame) -> DataFrame:
        checks = []
        for kind, rule, constraint in recorded.expectations:
            condition = F.expr(constraint) if isinstance(constraint, str) else constraint
            try:
                rows.select(condition.cast("boolean")).schema  # noqa: B018 - Spark's own parser and analyzer
            except Exception as error:
                raise AssertionError(f"{name}: constraint {rule!r} does not parse or analyse: {error}") from None
            checks.append((kind, rule, condition))
        if not self.execute:
            return rows
        for kind, rule, condition in checks:
            failing: Column = ~F.coalesce(condition.cast("boolean"), F.lit(True))  # natively a NULL passes
            if kind == "expect_or_fail":
                bad = rows.filter(failing).limit(1).collect()
                assert not bad, f"{name}: expect_or_fail {rule!r} failed on {bad[0].asDict()}"
            elif kind == "expect_or_drop":
                rows = rows.filter(~failing)
        return rows
