"""What a flow's streaming query does with each micro-batch (its `foreachBatch`).

Every write of a batch names the query's application id and the batch id (`Txn`), so a batch
that Spark replays after a crash (its offsets were logged, its commit was not) skips the writes
that committed and makes the rest: quarantined rows before the dataset's rows, the state of an
auto CDC flow before its target. Nothing is written twice and nothing is lost.

A batch is counted against its expectations once (one job over the cached batch), quarantined
rows go to `<dataset>_quarantine` with the names of the rules they failed, and the counts go to
the event log as `flow_progress` events, as on Databricks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_medallion.declarative.definitions import AnyFlow, AutoCdcFlow, Dataset, Flow
from cdc_medallion.faults import commit_point
from cdc_medallion.names import quarantine_name
from cdc_medallion.quality.events import StaleKeys
from cdc_medallion.runner import expectations as exp
from cdc_medallion.runner.auto_cdc.applier import AutoCdcApplier
from cdc_medallion.runner.auto_cdc.feed import ChangeBatch, FeedState, feed_spec
from cdc_medallion.runner.auto_cdc.target import ApplyResult
from cdc_medallion.runner.stale_keys import StaleKeyState
from cdc_medallion.storage.delta_store import Txn

if TYPE_CHECKING:
    from cdc_medallion.runner.local import LocalRunner


@dataclass
class FlowResult:
    flow: str
    target: str
    batches: int = 0
    output_rows: int = 0
    quarantined: int = 0
    dropped: int = 0
    deleted: int = 0
    seconds: float = 0.0  # wall clock of this flow's query in the update, shared among the flows of one query


@dataclass
class BatchWriter:
    """The `foreachBatch` function of one query: one append flow, or the auto CDC flows that
    read one source (gold's SCD1 and SCD2 flows read one view, so its batch is split once)."""

    runner: LocalRunner
    flows: Sequence[AnyFlow]
    app_id: str
    checked_view: Dataset | None = None
    #: A new query over input that earlier queries read (the readers of a view changed): its
    #: quarantine writes leave out rows the quarantine table already holds.
    fresh: bool = False
    error: BaseException | None = None
    results: list[FlowResult] = field(default_factory=list)
    #: Its query lands a source's messages: a batch holds some (a file source's offsets move
    #: only past messages; Kafka's past its transaction markers too, so an empty one commits
    #: nothing but its transaction), and with nothing to check it is written as it streams in.
    lands: bool = False
    #: When its last batch ended (monotonic): a query's own time ends there, not when the
    #: runner, busy with other queries, gets to collect it.
    last_batch_ended: float | None = None
    batches: int = 0  # micro-batches its query ran in this update

    def __post_init__(self) -> None:
        self.results = [self.runner.flow_result(flow) for flow in self.flows]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        query = self.app_id.rsplit(":", 1)[0]
        commit_point(f"before batch {batch_id} of {query}")  # its offsets are logged already
        self.batches += 1
        self.write(batch, Txn(self.app_id, batch_id))
        commit_point(f"after batch {batch_id} of {query}")  # written, not yet in the checkpoint

    def write(self, batch: DataFrame, txn: Txn) -> None:
        """Write one batch of this writer's flows (its own query's, or its share of a shared one)."""
        try:
            self._write(batch, txn)
        except BaseException as error:  # kept: Spark wraps what a batch raises into its own error
            self.error = error
            raise
        self.last_batch_ended = time.monotonic()

    def _write(self, batch: DataFrame, txn: Txn) -> None:
        started = time.monotonic()
        flow = self.flows[0]
        if (
            self.lands
            and isinstance(flow, Flow)
            and self.checked_view is None
            and not self.runner.graph.dataset(flow.target).expectations
        ):
            self._append_unchecked(flow, batch, txn, started)
            return
        cached = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            rows, reports, quarantined = self._view_rows(cached, txn)
            if isinstance(self.flows[0], AutoCdcFlow):
                self._apply_auto_cdc(rows, reports, txn, started, quarantined)
            else:
                self._append(self.flows[0], rows, reports, txn, started)
        finally:
            cached.unpersist()

    def _view_rows(self, batch: DataFrame, txn: Txn) -> tuple[DataFrame, list[exp.ExpectationReport], DataFrame | None]:
        """The batch's rows that pass the expectations of the view it read, if that view has any;
        its quarantined rows go to the view's quarantine table, and are returned too (None: none)."""
        view = self.checked_view
        if view is None:
            return batch, [], None
        split = exp.split(batch, view.expectations, view.name)
        self._quarantine(view.name, split, txn)
        quarantined = split.quarantine if split.report.quarantined else None
        return split.valid, [split.report], quarantined

    def _quarantine(self, dataset: str, split: exp.Split, txn: Txn) -> None:
        if split.quarantine is None or not split.report.quarantined:  # no empty quarantine tables
            return
        store = self.runner.store
        name = quarantine_name(dataset)
        rows = split.quarantine
        rows = store.conform(name, rows)  # a view's column types widen as its table's do
        if self.fresh and dataset == getattr(self.checked_view, "name", None):
            rows = _not_already_in(rows, store.read(name))
        store.append(name, rows, txn, {"layer": "quarantine", "quarantine_of": dataset})

    def _append(
        self, flow: Flow, rows: DataFrame, reports: list[exp.ExpectationReport], txn: Txn, started: float
    ) -> None:
        dataset = self.runner.graph.dataset(flow.target)
        marked = exp.mark(rows, dataset.expectations, dataset.name)
        split = exp.split(marked, dataset.expectations, dataset.name)
        self._quarantine(dataset.name, split, txn)
        if split.kept:
            self.runner.store.check_schema(dataset.name, split.valid.schema)
            self.runner.store.append(dataset.name, split.valid, txn, dataset.table_properties)
        self._appended(flow, split.report, reports, started)

    def _append_unchecked(self, flow: Flow, rows: DataFrame, txn: Txn, started: float) -> None:
        """A landed batch with nothing to check (bronze) is written as it streams in: no cache
        and no count first (a quarter of bronze's time); its count is its commit's, read back
        from the table's log, so a batch replayed after a crash counts what it had written."""
        dataset = self.runner.graph.dataset(flow.target)
        store = self.runner.store
        store.check_schema(dataset.name, rows.schema)
        store.append(dataset.name, rows, txn, dataset.table_properties)
        report = exp.ExpectationReport(dataset=dataset.name, rows=store.rows_committed(dataset.name, txn))
        self._appended(flow, report, [], started)

    def _appended(
        self, flow: Flow, report: exp.ExpectationReport, reports: list[exp.ExpectationReport], started: float
    ) -> None:
        """An append flow's batch counted, shown and logged (`report`: its own target's checks)."""
        result = self.results[0]
        result.batches += 1
        result.output_rows += report.kept
        result.quarantined += report.quarantined + sum(r.quarantined for r in reports)
        result.dropped += report.dropped + sum(r.dropped for r in reports)
        seconds = time.monotonic() - started
        self.runner.progress(
            f"  {flow.target:<40} +{report.kept:,} rows"
            + (f", {report.quarantined:,} quarantined" if report.quarantined else "")
            + (f", {report.dropped:,} dropped" if report.dropped else "")
            + f" ({seconds:.1f}s)"
        )
        self.runner.log_flow(flow, report.dataset, report.kept, [report, *reports], {})

    def _apply_auto_cdc(
        self,
        rows: DataFrame,
        reports: list[exp.ExpectationReport],
        txn: Txn,
        started: float,
        quarantined: DataFrame | None,
    ) -> None:
        """The flows that turn the batch into the same events (gold's SCD1 and SCD2 of a table)
        prepare them once and write their tombstones and stale keys once; then each flow applies
        them in a thread of its own, with a session of its own (the settings that make its MERGE
        idempotent are a session's): a flow's Spark jobs are mostly waiting, so they overlap.
        `quarantined`: the rows of the batch the view quarantined."""
        cached = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            for flows in _by_feed(self.flows, self.results):
                self._apply_feed(flows, cached, reports, txn, started, quarantined)
        finally:
            cached.unpersist()

    def _apply_feed(
        self,
        flows: list[tuple[AutoCdcFlow, FlowResult]],
        rows: DataFrame,
        reports: list[exp.ExpectationReport],
        txn: Txn,
        started: float,
        quarantined: DataFrame | None,
    ) -> None:
        store = self.runner.store
        change = ChangeBatch.prepare(store, flows[0][0], rows)
        stale_keys = self._stale_keys(flows, change)
        if change is None:  # nothing for these flows in this batch but, maybe, what it quarantined
            stale = stale_keys.update(None, quarantined, txn) if stale_keys is not None else None
            for flow, result in flows:
                self._applied(flow, result, ApplyResult(), reports, started, stale)
            return
        try:
            change.state.write(change, txn)
            stale = stale_keys.update(change, quarantined, txn) if stale_keys is not None else None
            if len(flows) == 1:
                self._apply_one(flows[0][0], flows[0][1], change, reports, txn, started, rows.sparkSession, stale)
                return
            with ThreadPoolExecutor(max_workers=len(flows)) as pool:
                running = [
                    pool.submit(self._apply_one, flow, result, change, reports, txn, started, None, stale)
                    for flow, result in flows
                ]
                for future in running:
                    future.result()
        finally:
            change.release()

    def _apply_one(
        self,
        flow: AutoCdcFlow,
        result: FlowResult,
        change: ChangeBatch,
        reports: list[exp.ExpectationReport],
        txn: Txn,
        started: float,
        session: SparkSession | None,
        stale: StaleKeys | None,
    ) -> None:
        dataset = self.runner.graph.dataset(flow.target)
        properties = {**dataset.table_properties, "scd_type": str(flow.stored_as_scd_type)}
        session = session or change.rows.sparkSession.newSession()
        applied = AutoCdcApplier(self.runner.store, flow, properties).apply(change, txn, session)
        self._applied(flow, result, applied, reports, started, stale)

    def _stale_keys(
        self, flows: list[tuple[AutoCdcFlow, FlowResult]], change: ChangeBatch | None
    ) -> StaleKeyState | None:
        """The stale keys of these flows' feed, when it reads a view that can quarantine."""
        view = self.checked_view
        if view is None:
            return None
        store, flow = self.runner.store, flows[0][0]
        feed = change.state if change is not None else FeedState(store, flow)
        current = next((f.target for f, _ in flows if f.stored_as_scd_type == 1), None)
        return StaleKeyState(store, flow, feed, current, lambda: self.runner.view_now(view))

    def _applied(
        self,
        flow: AutoCdcFlow,
        result: FlowResult,
        applied: ApplyResult,
        reports: list[exp.ExpectationReport],
        started: float,
        stale: StaleKeys | None = None,
    ) -> None:
        result.batches += 1
        result.output_rows += applied.upserted
        result.deleted += applied.deleted
        seconds = time.monotonic() - started
        self.runner.progress(
            f"  {flow.target:<40} {applied.upserted:,} upserted, {applied.deleted:,} deleted"
            + (f", {applied.truncates} truncate(s)" if applied.truncates else "")
            + (f", {stale.keys:,} stale key(s)" if stale is not None and stale.keys else "")
            + f" ({seconds:.1f}s)"
        )
        self.runner.log_flow(
            flow,
            flow.target,
            applied.upserted,
            reports,  # each flow reports the checks of the rows it applied
            {"num_upserted_rows": applied.upserted, "num_deleted_rows": applied.deleted},
            stale,
        )


@dataclass
class SharedMember:
    """One member of a shared query (`sharing.py`): its flows' writer, and its query function
    turned into a function of one micro-batch of the shared stream."""

    name: str  # the name of the query it would have of its own (its checkpoint's)
    writer: BatchWriter
    rows: Callable[[DataFrame], DataFrame]
    #: What a batch row must satisfy to yield one of its rows (`sharing.stream_filter`); None: unknown.
    stream_filter: Column | None = None


@dataclass
class SharedBatchWriter:
    """The `foreachBatch` function of a shared query: the batch is read once and cached, and
    each member writes its own rows of it under its own `Txn` (so a replayed batch skips, member
    by member, what committed). One job finds the members whose stream filter some row of the
    batch passes (`fed`); only those, and those without one, build their rows, and those rows may
    still be none. A member that fails leaves the query (`on_failure`) and the others go on."""

    query: str
    members: list[SharedMember]
    on_failure: Callable[[SharedMember, BaseException], None]
    error: BaseException | None = None  # a member's failure is its own: the query's stays None
    last_batch_ended: float | None = None
    batches: int = 0

    @property
    def results(self) -> list[FlowResult]:
        return [result for member in self.members for result in member.writer.results]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        commit_point(f"before batch {batch_id} of {self.query}")  # its offsets are logged already
        self.batches += 1
        cached = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            fed = self.fed(cached)
            for member in list(self.members):
                if member.name not in fed:
                    continue
                try:
                    rows = member.rows(cached)
                    if not rows.isEmpty():
                        member.writer.write(rows, Txn(member.writer.app_id, batch_id))
                except Exception as error:  # its failure is its own: it leaves, the others go on
                    self.members.remove(member)
                    self.on_failure(member, error)
        finally:
            cached.unpersist()
        self.last_batch_ended = time.monotonic()
        commit_point(f"after batch {batch_id} of {self.query}")  # written, not yet in the checkpoint

    def fed(self, batch: DataFrame) -> set[str]:
        """The names of the members `batch` may have rows for: those without a stream filter, and
        those whose filter one of its rows passes. If that one job fails (a filter that raises on
        some row), every member looks for itself, as without filters, so a failure stays its own."""
        filtered = [m for m in self.members if m.stream_filter is not None]
        names = {m.name for m in self.members}
        if len(filtered) < 2:  # the look replaces each member's own, which is as cheap for one
            return names
        try:
            found = batch.select(*[F.bool_or(m.stream_filter).alias(f"m{i}") for i, m in enumerate(filtered)]).first()
        except Exception:
            return names
        assert found is not None  # an aggregate without grouping has one row
        return names - {m.name for m, passed in zip(filtered, found, strict=True) if passed is not True}


def _by_feed(flows: Sequence[AnyFlow], results: Sequence[FlowResult]) -> list[list[tuple[AutoCdcFlow, FlowResult]]]:
    """The flows grouped by what their events and tombstones are made from (`feed_spec`)."""
    groups: dict[object, list[tuple[AutoCdcFlow, FlowResult]]] = {}
    for flow, result in zip(flows, results, strict=True):
        assert isinstance(flow, AutoCdcFlow)
        spec = feed_spec(flow)
        groups.setdefault(spec if spec is not None else ("own", flow.name), []).append((flow, result))
    return list(groups.values())


def _not_already_in(rows: DataFrame, stored: DataFrame) -> DataFrame:
    """`rows` less those whose whole content `stored` holds already."""

    def content(frame: DataFrame) -> Column:
        return F.sha2(F.to_json(F.struct(*[frame[f"`{c}`"] for c in frame.columns])), 256)

    seen = stored.select(content(stored).alias("__content")).distinct()
    return rows.withColumn("__content", content(rows)).join(seen, "__content", "left_anti").drop("__content")


BatchFunction = Callable[[DataFrame, int], None]
