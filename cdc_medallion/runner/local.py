"""The local runner: updates of the declared graph as Spark Structured Streaming queries on Delta.

Each streaming table's flow is a streaming query over what its query function reads (a Delta
stream of an upstream table, or a landed source), writing through `foreachBatch`
(`batches.py`). One update runs every query with `trigger(availableNow=True)`: it reads what was
new when it started, in bounded micro-batches, and stops; `continuous` keeps every query running.
The auto CDC flows that read one source (gold's SCD1 and SCD2 flows read one view) run as one
query, so the view is read and checked once per batch. Materialized views are recomputed.
Flows run in dependency order, found as their query functions read each other.

Exactly-once comes from Spark and Delta: a query's checkpoint records what each batch read, and
each write names the batch (`Txn`). A query whose inputs have not changed since it last caught
up is not started at all (`checkpoints.signature`), which is most queries of most updates over
many tables.

This module holds the update itself and the order datasets are brought up to date in; how the
streaming flows are planned and started (alone or sharing a query) is `streaming.py`, the
queries while they run `queries.py`, the bookkeeping of their checkpoints `checkpoints.py`, and
what an update hands back `results.py`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from cdc_medallion.config import PipelineConf, using_conf
from cdc_medallion.declarative.definitions import AnyFlow, Dataset, DatasetKind, Flow
from cdc_medallion.declarative.runtime import reading_with
from cdc_medallion.errors import CdcMedallionError, ConcurrentRunError, GraphError, first_line
from cdc_medallion.quality.events import StaleKeys
from cdc_medallion.runner import expectations as exp
from cdc_medallion.runner.batches import FlowResult
from cdc_medallion.runner.checkpoints import StorageLock
from cdc_medallion.runner.event_log import EventLog
from cdc_medallion.runner.graph import Graph, load_graph
from cdc_medallion.runner.queries import RunningQueries
from cdc_medallion.runner.reader import PlanReader, TableReader
from cdc_medallion.runner.results import Progress, UpdateResult, UpstreamFailed, as_flow_error
from cdc_medallion.runner.streaming import StreamingFlows
from cdc_medallion.spark import get_spark
from cdc_medallion.storage.delta_store import DeltaStore

#: What one micro-batch of a Delta stream reads at most, in bytes of Parquet files and in files
#: (a fraction of the landing bound: Parquet compresses CDC events about fourfold).
STREAM_BYTES_SHARE = 4
STREAM_MAX_FILES = 64


class LocalRunner:
    """Runs updates of one pipeline conf against its storage."""

    def __init__(self, conf: PipelineConf, spark: SparkSession | None = None, progress: Progress | None = None) -> None:
        self.conf = conf
        self.spark = spark or get_spark()
        self.store = DeltaStore(conf.storage, self.spark)
        self.progress = progress or (lambda _line: None)
        self.graph: Graph = Graph({}, {})
        self._done: set[str] = set()
        self.flows_run: set[str] = set()
        self.in_progress: list[str] = []  # the datasets being brought up to date, the innermost last
        self.result = UpdateResult(update_id="")
        self.log: EventLog | None = None
        self.continuous = False
        self.queries = RunningQueries(conf, False, self.progress, None, self.record_failure)
        self._failed: dict[str, str] = {}  # dataset -> the failed dataset it is (or reads)
        self.streaming = StreamingFlows(self)
        self._streams: dict[str, DataFrame] = {}  # Delta streams as this update's queries read them (`stream`)
        self.partial_graph = False
        self.land = True

    # --- update -------------------------------------------------------------------------------
    def update(
        self,
        full_refresh: bool = False,
        lock: bool = True,
        continuous: bool = False,
        raise_failures: bool = True,
        partial_graph: bool = False,
        land: bool = True,
        hand_on_if_idle: bool = False,
        carried: list[dict[str, Any]] | None = None,
    ) -> UpdateResult:
        """Run every flow once (or, `continuous`, keep every flow running until one fails or the
        process is stopped); `lock=False` when the caller already holds the storage lock.

        A flow that fails does not stop the flows that do not read it: they finish, the failure
        and the flows it kept from running are in the event log, and the update then raises one
        error naming them (or, `raise_failures=False`, leaves it in the result's `error()`).

        `partial_graph`: this update's graph lacks flows a later one will have (the run's first
        update, before gold is declared): the flows that would share a query wait for that one,
        so that no member of a shared query misses a batch and the first shared query has them all.
        `land=False`: the queries reading sources are not run (the run's second update: its first
        landed what the sources held; a Kafka query cannot tell without starting that nothing is new).
        `hand_on_if_idle`: if no flow ran and none failed, the update's event log entries are not
        committed but left in the result's `unlogged`, for the next update of the run to commit
        with its own (`carried`): the event log's commit is most of an update with nothing new."""
        started = time.monotonic()
        with StorageLock(self.store.root) if lock else nullcontext():
            if full_refresh:
                self.progress(f"full refresh: clearing {self.store.root}")
                self.store.drop_all()
            self.graph = load_graph(self.conf)
            update_id = uuid.uuid4().hex
            self.result = UpdateResult(update_id=update_id)
            self.log = EventLog(self.store, self.conf.name, update_id, carried)
            self.log.emit("create_update", f"update {update_id} started", {"full_refresh": full_refresh})
            self._done, self.flows_run, self.continuous = set(), set(), continuous
            self.queries = RunningQueries(self.conf, continuous, self.progress, self.log, self.record_failure)
            self._failed, self._streams = {}, {}
            self.streaming = StreamingFlows(self)
            self.partial_graph, self.land = partial_graph, land or continuous
            try:
                with using_conf(self.conf):  # query functions may read the conf while they run
                    for name, dataset in self.graph.datasets.items():
                        if not dataset.is_view:
                            self.ensure_fresh(name)
                    if continuous:
                        self.queries.await_continuous()
                    else:
                        self.queries.finish(self.queries.running)
                        self.streaming.settle_joins()
            except CdcMedallionError as error:
                self.queries.stop()
                self.log.emit("update_progress", str(error), {"update_progress": {"state": "FAILED"}}, level="ERROR")
                self.log.flush()
                raise
            self.result.seconds = time.monotonic() - started
            error = self.result.error()
            if error is not None:
                self.log.emit("update_progress", str(error), {"update_progress": {"state": "FAILED"}}, level="ERROR")
            else:
                self.log.emit(
                    "update_progress",
                    f"update {update_id} completed in {self.result.seconds:.1f}s",
                    {"update_progress": {"state": "COMPLETED"}},
                )
            if hand_on_if_idle and error is None and not self.result.flows:
                self.result.unlogged = list(self.log.events)
            else:
                self.log.flush()
        if error is not None and raise_failures:
            raise error
        return self.result

    def ensure_fresh(self, name: str) -> None:
        """Bring dataset `name` up to date in this update (once), running what feeds it. A reader
        of a dataset that failed gets `UpstreamFailed` and does not run; the update goes on."""
        if name in self._done:
            if not self.continuous:
                self.queries.finish([q for q in self.queries.running if any(f.target == name for f in q.flows)])
            if name in self._failed and self.in_progress:  # asked by a reader
                raise UpstreamFailed(self._failed[name])
            return
        if name in self.in_progress:
            cycle = " -> ".join([*self.in_progress[self.in_progress.index(name) :], name])
            raise GraphError(f"dependency cycle: {cycle}")
        self.in_progress.append(name)
        dataset = self.graph.dataset(name)
        try:
            if dataset.kind is DatasetKind.MATERIALIZED_VIEW:
                self._isolated(name, [dataset.name], lambda: self._run_materialized_view(dataset))
            elif dataset.kind is DatasetKind.STREAMING_TABLE:
                for flow in self.graph.flows_into(name):
                    if flow.name not in self.flows_run:
                        flows = self.streaming.together_with(flow)
                        self._isolated(
                            name, [f.name for f in flows], lambda flows=flows: self.streaming.run_query(flows)
                        )
        finally:
            self.in_progress.pop()
            self._done.add(name)  # its query may still run: a reader waits for it, others overlap
        if self.in_progress and not self.continuous:  # asked by a reader: it reads what this update wrote
            self.queries.finish([q for q in self.queries.running if any(f.target == name for f in q.flows)])
        if name in self._failed and self.in_progress:
            raise UpstreamFailed(self._failed[name])  # the query reading it does not run either

    def _isolated(self, dataset: str, flows: list[str], run: Callable[[], None]) -> None:
        """Run one dataset's flow(s); a failure is recorded against them, not raised."""
        try:
            run()
        except UpstreamFailed as upstream:
            self._failed[dataset] = upstream.dataset
            for flow in flows:
                self.flows_run.add(flow)
                self.result.skipped[flow] = upstream.dataset
                self._log_failure(flow, dataset, f"not run: it reads {upstream.dataset}, which failed", "SKIPPED")
        except ConcurrentRunError:
            raise
        except Exception as error:  # one flow's failure, whatever raised it, stops only its readers
            self.record_failure(dataset, flows, as_flow_error(flows, error))

    def record_failure(self, dataset: str, flows: list[str], error: CdcMedallionError) -> None:
        if self.queries.interrupted:  # Ctrl-C cancelled its batch's jobs: not a failure of the flow
            for flow in flows:
                self._log_failure(flow, dataset, f"stopped mid-batch ({first_line(error)})", "STOPPED")
            self.progress(f"  {', '.join(flows):<40} stopped mid-batch: that batch runs again next time")
            return
        self._failed[dataset] = dataset
        for flow in flows:
            self.flows_run.add(flow)
            self.result.failures[flow] = error
            self._log_failure(flow, dataset, str(error), "FAILED")
        self.progress(f"  {', '.join(flows):<40} FAILED: {error}")

    def _log_failure(self, flow: str, dataset: str, message: str, status: str) -> None:
        assert self.log is not None
        self.log.emit(
            "flow_progress",
            f"flow {flow} {status.lower()}: {message}",
            {"flow_progress": {"status": status, "error": message}},
            flow=flow,
            dataset=dataset,
            level="ERROR" if status == "FAILED" else "WARN",
        )

    # --- what the readers and writers of its queries ask ------------------------------------------
    def stream(self, name: str) -> DataFrame:
        """Delta table `name` as a stream, one DataFrame for every query of this update that reads
        it (once): their plans then name its columns alike, as does a batch of a query over it,
        so a shared query can tell from its members' plans which of them a batch feeds
        (`sharing.stream_filter`)."""
        rows = self._streams.get(name)
        if rows is None:
            rows = self._streams[name] = self.store.read_stream(name, self.stream_options())
        return rows

    def view_now(self, view: Dataset) -> DataFrame:
        """The rows `view` keeps (failing none of its drop or quarantine rules) over what its
        input tables hold now, read whole: what every batch of its stream so far kept, and what
        later batches will."""
        reader = TableReader(self)
        with using_conf(self.conf), reading_with(reader):
            rows = reader.read(view.name)
        return exp.kept(rows, view.expectations) if view.expectations else rows

    def stream_options(self) -> dict[str, str]:
        """How much of a Delta stream one micro-batch reads, so that a backlog goes through every
        layer in bounded batches as bronze lands it."""
        return {
            "maxBytesPerTrigger": str(max(1, self.conf.max_bytes_per_batch // STREAM_BYTES_SHARE)),
            "maxFilesPerTrigger": str(STREAM_MAX_FILES),
        }

    # --- materialized views --------------------------------------------------------------------
    def _run_materialized_view(self, dataset: Dataset) -> None:
        assert dataset.query is not None
        flow = Flow(name=dataset.name, target=dataset.name, query=dataset.query)
        reader = PlanReader(self, dataset.name, streaming=False)
        with reading_with(reader):
            rows = dataset.query()
        if reader.inputs.checked_view is not None:
            raise GraphError(
                f"materialized view {dataset.name} reads view {reader.inputs.checked_view.name}, "
                "whose expectations apply only to streaming flows"
            )
        marked = exp.mark(rows, dataset.expectations, dataset.name).persist()
        try:
            split = exp.split(marked, dataset.expectations, dataset.name)
            self.store.overwrite(dataset.name, split.valid, dataset.table_properties)
        finally:
            marked.unpersist()
        self.log_flow(flow, dataset.name, split.kept, [split.report], {})

    # --- results and the event log ---------------------------------------------------------------
    def flow_result(self, flow: AnyFlow) -> FlowResult:
        return self.result.flows.setdefault(flow.name, FlowResult(flow=flow.name, target=flow.target))

    def log_flow(
        self,
        flow: AnyFlow,
        dataset: str,
        rows: int,
        reports: list[exp.ExpectationReport],
        metrics: dict[str, int],
        stale: StaleKeys | None = None,
    ) -> None:
        """A `flow_progress` event of one batch; `stale`: the target's stale keys after it."""
        assert self.log is not None
        quality = {
            "dropped_records": sum(r.dropped for r in reports),
            "quarantined_records": sum(r.quarantined for r in reports),
            "expectations": [e for r in reports for e in r.as_event_log()["expectations"]],  # type: ignore[union-attr]
            **(stale.as_quality() if stale is not None else {}),
        }
        self.log.emit(
            "flow_progress",
            f"flow {flow.name} wrote {rows} rows to {dataset}",
            {
                "flow_progress": {
                    "status": "COMPLETED",
                    "metrics": {"num_output_rows": rows, **metrics},
                    "data_quality": quality,
                }
            },
            flow=flow.name,
            dataset=dataset,
        )
