"""The local runner: one update of the declared graph on PySpark and Delta tables.

Streaming tables are incremental: a flow reads only what it has not read yet, and records
how far it has read in the same atomic commit as its output (app transactions), so killing
the process anywhere and running again neither loses nor duplicates rows. Materialized views
are recomputed. Dependencies are resolved as flows read each other, in any declaration order.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_medallion.config import PipelineConf, SourceConf, using_conf
from cdc_medallion.declarative.definitions import AnyFlow, AutoCdcFlow, Dataset, DatasetKind, Flow
from cdc_medallion.declarative.runtime import reading_with
from cdc_medallion.errors import CdcMedallionError, ConcurrentRunError, GraphError
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.runner import expectations as exp
from cdc_medallion.runner.auto_cdc import AutoCdcApplier, driver_may_apply
from cdc_medallion.runner.event_log import EventLog
from cdc_medallion.runner.graph import Graph, load_graph
from cdc_medallion.runner.small_batch import collect_small
from cdc_medallion.sources.files import FileLanding
from cdc_medallion.spark import get_spark
from cdc_medallion.storage.delta_rs import DeltaRsStore, arrow_schema, release_unused_memory, renamed_copy

Progress = Callable[[str], None]
# A view's new input up to this size is read into the driver once and shared (`shared_read`).
SHARED_READ_ROWS = 10_000
SHARED_READ_BYTES = 16 * 2**20


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class FlowResult:
    flow: str
    target: str
    batches: int = 0
    output_rows: int = 0
    quarantined: int = 0
    dropped: int = 0
    deleted: int = 0
    seconds: float = 0.0  # wall clock of this flow's batches in the update (what `bench/` reports per stage)


@dataclass
class UpdateResult:
    update_id: str
    flows: dict[str, FlowResult] = field(default_factory=dict)
    seconds: float = 0.0


class StorageLock:
    """One run at a time per storage root: a second run fails at once, naming the holder."""

    def __init__(self, root: os.PathLike[str] | str) -> None:
        self.path = os.path.join(root, "_lock")
        self.handle: IO[str] | None = None

    def __enter__(self) -> StorageLock:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ConcurrentRunError(
                f"storage {os.path.dirname(self.path)} is in use by {holder}; retry when it ends"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self.handle = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()


Range = tuple[str, int | None, int]  # (table, after version, up to version) of one incremental read


@dataclass
class ReadRecord:
    """What a query read: the ranges of the tables it streamed, and whether it read anything else."""

    ranges: list[Range] = field(default_factory=list)
    snapshot: bool = False  # read a whole table, or landed files: what was read is not named by `ranges`


@dataclass
class SharedView:
    """A view's checked batch, kept for the other flows that read the same range of its input."""

    marked: DataFrame | None  # cached by Spark; None when the batch was split in the driver
    split: exp.Split
    readers: int  # flows still to read it
    #: What its auto CDC flows collected of it, for a flow whose events are the same
    #: (`AutoCdcApplier.collected_events`).
    collected_events: list[tuple[DataFrame, pa.Table | None]] = field(default_factory=list)


@dataclass
class IdleView:
    """A view whose query found nothing new in any stream it read, kept for its other readers.

    With many tables, most views have nothing new in an update, and building each view's query
    (tens of columns, each a JVM call) was most of what they cost: an update with nothing new
    over 134 tables took 10.7 s, 9.8 s of it building views for both flows of every table. A
    second reader checks the same streams for itself, and when it too has read them all, takes
    this empty batch instead of building the query again.
    """

    streams: tuple[str, ...]
    rows: DataFrame


class FlowReader:
    """What `dp.read_stream` / `dp.read` / `landing_stream` mean while one flow runs."""

    def __init__(self, runner: LocalRunner, flow: AnyFlow) -> None:
        self.runner = runner
        self.flow = flow
        self.txns: dict[str, int] = {}
        self.has_new = False
        self.more = False
        self.bytes_read = 0
        self.rows_read: int | None = 0  # new input rows, None when unknown (a commit's log is gone)
        self.view_reports: list[exp.ExpectationReport] = []
        self.view_quarantines: list[tuple[str, DataFrame, int]] = []
        self.records: list[ReadRecord] = [ReadRecord()]  # the flow's, then one per view being evaluated
        self.persisted: list[DataFrame] = []  # views cached for this batch only
        self.empty: list[DataFrame] = []  # view batches their expectations' counts found without a valid row
        self.landed: tuple[DataFrame, pa.Table] | None = None  # landed rows, as served and as read
        self.view: SharedView | None = None  # the last view batch served

    def _read_range(self, read: Range) -> None:
        for record in self.records:
            record.ranges.append(read)

    def _read_snapshot(self) -> None:
        for record in self.records:
            record.snapshot = True

    def small(self, limit: int) -> bool:
        """The new input read so far has at most `limit` rows."""
        return self.rows_read is not None and self.rows_read <= limit

    def collect_if_small(self, rows: DataFrame, limit: int) -> pa.Table | None:
        """`rows` in the driver when the new input is small (see `small_batch.py`); None: Spark.

        Only a small new input is collected: a large one would be computed twice (collect, then
        Spark). Rows derived from it alone are about as many as it, whatever the format: a
        message's events carry its own values. A query that also read a whole table (a join,
        held messages) may give more, so its rows are collected under the limit.
        """
        if not self.small(limit):
            return None
        return collect_small(rows, limit, few=not self.records[0].snapshot)

    def known_empty(self, rows: DataFrame) -> bool:
        """`rows` is a view batch already counted empty, so no job needs to look at it again.

        With many tables, most tables' views find none of a small batch's rows; asking Spark
        again cost each of their two flows a job (bench: 134 tables, 10 new messages).
        """
        return any(rows is empty for empty in self.empty)

    def _count_read(self, rows: int | None) -> None:
        self.rows_read = None if rows is None or self.rows_read is None else self.rows_read + rows

    def _app_id(self, source: str) -> str:
        return f"{self.flow.name}<-{source}"

    def read_stream(self, name: str) -> DataFrame:
        dataset = self.runner.graph.dataset(name)
        if dataset.is_view:
            return self._view(dataset)
        app_id, done, current = self._position(name)
        store = self.runner.store
        if done is not None and done >= current:
            self._read_nothing_new(app_id, name, done, current)
            return store.empty(name)
        # A backlog is read in batches of about max_bytes/max_messages_per_batch, as bronze lands it, so
        # memory stays bounded downstream too; the flow loops while `more` is set.
        conf = self.runner.conf
        upto, rows, size = store.bounded_range(
            name, done, current, conf.max_bytes_per_batch, conf.max_messages_per_batch
        )
        self.txns[app_id] = upto
        self.more = self.more or upto < current
        self.has_new = True
        self._count_read(rows)
        self._read_range((name, done, upto))
        if self._shared(rows, size):
            return self.runner.shared_read((name, done, upto))
        return store.read_appended(name, done, upto)

    def _position(self, name: str) -> tuple[str, int | None, int]:
        """This flow's checkpoint in stream `name` (None: never read) and the stream's version,
        once the stream is up to date in this update."""
        self.runner.ensure_fresh(name)
        store = self.runner.store
        if not store.exists(name):
            raise GraphError(f"{self.flow.name} reads {name}, which has never been written")
        current = store.version(name)
        assert current is not None
        app_id = self._app_id(name)
        return app_id, store.txn_version(self.flow.target, app_id), current

    def _read_nothing_new(self, app_id: str, name: str, done: int, current: int) -> None:
        self.txns[app_id] = current
        self._read_range((name, done, current))

    def _caught_up(self, streams: tuple[str, ...]) -> bool:
        """This flow has read each of `streams` to its latest version; if so, recorded as reads
        with nothing new, as `read_stream` records them."""
        positions = []
        for name in streams:
            app_id, done, current = self._position(name)
            if done is None or done < current:
                return False
            positions.append((app_id, name, done, current))
        for position in positions:
            self._read_nothing_new(*position)
        return True

    def _shared(self, rows: int | None, size: int | None) -> bool:
        """A view (a record of its own on the stack) reading a range known to be small."""
        if len(self.records) < 2 or rows is None or size is None:
            return False
        return rows <= min(SHARED_READ_ROWS, self.runner.conf.driver_apply_max_rows) and size <= SHARED_READ_BYTES

    def read(self, name: str) -> DataFrame:
        dataset = self.runner.graph.dataset(name)
        if dataset.is_view:
            return self._view(dataset)
        self.runner.ensure_fresh(name)
        self._read_snapshot()
        return self.runner.store.read(name)

    def read_previous(self, name: str) -> DataFrame | None:
        """A table as committed before this batch (a flow reading its own earlier output)."""
        store = self.runner.store
        self._read_snapshot()
        return store.read(name) if store.exists(name) else None

    def read_source(self, source: SourceConf) -> DataFrame:
        landing = FileLanding(source, self.runner.conf.max_messages_per_batch, self.runner.conf.max_bytes_per_batch)
        if source.input is not None and not source.input.path.exists():
            missing = source.input.path
            self.runner.progress(f"  source {source.name}: input {missing} does not exist (yet): nothing to land")
        target = self.flow.target
        store = self.runner.store
        batch = landing.next_batch(lambda app_id: store.txn_version(target, app_id))
        self.txns.update(batch.txns)
        self.more = self.more or batch.more
        self.bytes_read += batch.bytes_read
        self._count_read(batch.messages)
        if batch.messages:
            self.has_new = True
        self._read_snapshot()  # landed input is named by file offsets, not table versions
        if not batch.messages:
            return self.runner.spark.createDataFrame([], schema=BRONZE_SCHEMA)
        landed = batch.to_arrow()
        served = self.runner.store.stage(landed, BRONZE_SCHEMA)
        self.landed = (served, landed)
        return served

    def _view(self, dataset: Dataset) -> DataFrame:
        """The view's rows that pass its expectations, split and counted once per input range.

        Gold's SCD1 and SCD2 flows read the same view, batch by batch in turn
        (`LocalRunner._in_step_with`); when both read the same range of its input (the usual
        case), the second reuses the first's split instead of parsing and checking the batch
        again. A split is kept only until the view's last reader has read it, and a view keeps
        one: a newer range replaces it (readers out of step after a crash between their
        commits never meet again in that update), so the cache holds about one batch a view.
        """
        assert dataset.query is not None
        idle = self.runner.idle_views.get(dataset.name)
        if idle is not None and self._caught_up(idle.streams):
            return renamed_copy(idle.rows)  # a query may join two reads of one view
        record = ReadRecord()
        self.records.append(record)
        try:
            df = dataset.query()
        finally:
            self.records.pop()
        if _nothing_new(record):
            self.runner.idle_views[dataset.name] = IdleView(tuple(name for name, _, _ in record.ranges), df)
            return df
        if not dataset.expectations:
            return df
        readers = self.runner.graph.auto_cdc_readers(dataset.name)
        shareable = not record.snapshot
        key = (dataset.name, tuple(record.ranges))
        shared = self.runner.shared_views.get(key) if shareable and readers > 1 else None
        if shared is None:
            marked = exp.mark(df, dataset.expectations, dataset.name)
            split = None if record.snapshot else self._split_view_in_driver(marked, dataset)
            cached = None
            if split is None:
                cached = marked.persist(StorageLevel.MEMORY_AND_DISK)
                split = exp.split(cached, dataset.expectations, dataset.name)
            shared = SharedView(cached, split, readers=readers - 1)
            if shareable and shared.readers > 0:
                self.runner.forget_shared_views(dataset.name)
                self.runner.shared_views[key] = shared
            elif cached is not None:
                self.persisted.append(cached)
        else:
            shared.readers -= 1
            if shared.readers <= 0:  # the last flow to read it: released after this batch
                del self.runner.shared_views[key]
                if shared.marked is not None:
                    self.persisted.append(shared.marked)
        self.view = shared
        split = shared.split
        if split.report.rows == split.report.quarantined + split.report.dropped:
            self.empty.append(split.valid)
        self.view_reports.append(split.report)
        if split.quarantine is not None:
            self.view_quarantines.append((f"{dataset.name}_quarantine", split.quarantine, split.report.quarantined))
        return split.valid

    def _split_view_in_driver(self, marked: DataFrame, dataset: Dataset) -> exp.Split | None:
        """A small view batch collected once and split with Arrow; its rows go on as a local
        DataFrame, so its readers' collects cost a tenth of a second instead of re-reading a
        cache (see `small_batch.py`). None: too big, or read by a flow whose batch goes to Spark
        (`driver_may_apply`), which reads a cached scan faster than a local relation."""
        limit, store = self.runner.conf.driver_apply_max_rows, self.runner.store
        readers = self.runner.graph.auto_cdc_flows(dataset.name)
        if not all(driver_may_apply(store, flow.target, self.rows_read, limit) for flow in readers):
            return None
        collected = self.collect_if_small(marked, limit)
        if collected is None:
            return None
        split = exp.split_arrow(collected, dataset.expectations, dataset.name)
        spark = self.runner.spark
        valid = local_frame(spark, split.valid, marked.drop(exp.FAILED).schema)
        quarantine = local_frame(spark, split.quarantine, marked.schema) if split.report.quarantined else None
        return exp.Split(valid=valid, quarantine=quarantine, report=split.report)


def local_frame(spark: SparkSession, rows: pa.Table, schema: StructType) -> DataFrame:
    """Rows in the driver as a DataFrame Spark holds in memory (a local relation)."""
    if rows.num_rows == 0:  # pyspark cannot take a table of no chunks (what a filter leaves)
        rows = pa.Table.from_pylist([], schema=rows.schema)
    return spark.createDataFrame(rows, schema=schema)


def _nothing_new(record: ReadRecord) -> bool:
    """A view's query read only streams, and none had anything new: its batch is empty.

    Its expectations then have nothing to check, and checking cost a job per view per update
    (bench: an update with nothing new over 134 tables took 16.8 s).
    """
    done = all(after is not None and after >= upto for _, after, upto in record.ranges)
    return bool(record.ranges) and not record.snapshot and done


class LocalRunner:
    """Runs updates of one pipeline conf against its storage."""

    def __init__(self, conf: PipelineConf, spark: SparkSession | None = None, progress: Progress | None = None) -> None:
        self.conf = conf
        self.spark = spark or get_spark()
        self.store = DeltaRsStore(conf.storage, self.spark)
        self.progress = progress or (lambda _line: None)
        self.graph: Graph = Graph({}, {})
        self._done: set[str] = set()
        self._flows_run: set[str] = set()
        self._running: list[str] = []
        self.result = UpdateResult(update_id="")
        self.log: EventLog | None = None
        self.shared_views: dict[tuple[str, tuple[Range, ...]], SharedView] = {}
        self._shared_reads: dict[str, tuple[Range, DataFrame]] = {}  # table -> its last shared read
        self.idle_views: dict[str, IdleView] = {}  # for this update only

    # --- reads -------------------------------------------------------------------------------
    def shared_read(self, read: Range) -> DataFrame:
        """A view's small new input, read into the driver once and served to every view reading
        the same range: one table's view per source table, and usually every one of them reads
        the same silver range. Spark scanning those few rows' files again for each view was most
        of what a table cost (bench: 10 new messages over 134 tables took 33 s, 18.5 s with
        this). Only the last range of each table is kept, and only for this update. Each read
        gets a renamed copy, so that a query can still join two reads of one range."""
        name = read[0]
        kept = self._shared_reads.get(name)
        if kept is None or kept[0] != read:
            schema = self.store.spark_schema(name)
            rows = self.store.read_appended_arrow(name, read[1], read[2], schema.fieldNames())
            kept = (read, local_frame(self.spark, rows, schema))
            self._shared_reads[name] = kept
        return renamed_copy(kept[1])

    def forget_shared_views(self, view: str | None = None) -> None:
        """Drops the split `view` keeps for its other readers, if any (see `FlowReader._view`);
        every view's when `view` is None."""
        for key in [k for k in self.shared_views if view is None or k[0] == view]:
            marked = self.shared_views.pop(key).marked
            if marked is not None:
                marked.unpersist()

    # --- update -------------------------------------------------------------------------------
    def update(self, full_refresh: bool = False, lock: bool = True) -> UpdateResult:
        """Run every flow once; `lock=False` when the caller already holds the storage lock."""
        started = time.monotonic()
        with StorageLock(self.store.root) if lock else nullcontext():
            if full_refresh:
                self.progress(f"full refresh: clearing {self.store.root}")
                self.store.drop_all()
            self.store.clear_staged()  # left by a run that crashed: its batch lands again
            self.graph = load_graph(self.conf)
            update_id = uuid.uuid4().hex
            self.result = UpdateResult(update_id=update_id)
            self.log = EventLog(self.store, self.conf.name, update_id)
            self.log.emit("create_update", f"update {update_id} started", {"full_refresh": full_refresh})
            self._done = set()
            self._flows_run = set()
            try:
                with using_conf(self.conf):  # query functions may read the conf while they run
                    for name, dataset in self.graph.datasets.items():
                        if not dataset.is_view:
                            self.ensure_fresh(name)
            except CdcMedallionError as error:
                self.log.emit("update_progress", str(error), {"update_progress": {"state": "FAILED"}}, level="ERROR")
                self.log.flush()
                raise
            finally:
                self.forget_shared_views()  # kept for a reader that did not run (failed, no input)
                self._shared_reads.clear()
                self.idle_views.clear()
            self.result.seconds = time.monotonic() - started
            self.log.emit(
                "update_progress",
                f"update {update_id} completed in {self.result.seconds:.1f}s",
                {"update_progress": {"state": "COMPLETED"}},
            )
            self.log.flush()
        return self.result

    def ensure_fresh(self, name: str) -> None:
        """Bring dataset `name` up to date in this update (once), running what feeds it."""
        if name in self._done:
            return
        if name in self._running:
            cycle = " -> ".join([*self._running[self._running.index(name) :], name])
            raise GraphError(f"dependency cycle: {cycle}")
        self._running.append(name)
        try:
            dataset = self.graph.dataset(name)
            if dataset.kind is DatasetKind.MATERIALIZED_VIEW:
                self._run_materialized_view(dataset)
            elif dataset.kind is DatasetKind.STREAMING_TABLE:
                for flow in self.graph.flows_into(name):
                    if flow.name not in self._flows_run:
                        self._run_flows(self._in_step_with(flow))
        finally:
            self._running.pop()
        self._done.add(name)

    # --- flows --------------------------------------------------------------------------------
    def _in_step_with(self, flow: AnyFlow) -> list[AnyFlow]:
        """`flow` and the other auto CDC flows reading its view, not yet run in this update.

        Gold's SCD1 and SCD2 flows read one view. Run one after the other through a backlog,
        the first took every batch before the second began, so each view batch was split
        twice (at 1M changes, 16 view batches were split 30 times). Run batch by batch, the
        second reads the split the first just made, as `_view` shares it.
        """
        if not isinstance(flow, AutoCdcFlow) or not self.graph.dataset(flow.source).is_view:
            return [flow]
        partners = [
            other
            for other in self.graph.auto_cdc_flows(flow.source)
            if other.name != flow.name and other.name not in self._flows_run and other.target not in self._running
        ]
        return [flow, *partners]

    def _run_flows(self, flows: list[AnyFlow]) -> None:
        """Each flow's backlog, a batch of each in turn until every one has run out."""
        going = list(flows)
        while going:
            going = [flow for flow in going if self._run_batch(flow)]
        self._flows_run.update(flow.name for flow in flows)

    def _run_batch(self, flow: AnyFlow) -> bool:
        """One batch of `flow`; whether more of its input is waiting."""
        result = self.result.flows.setdefault(flow.name, FlowResult(flow=flow.name, target=flow.target))
        started = time.monotonic()
        reader = FlowReader(self, flow)
        try:
            with reading_with(reader):
                batch = reader.read_stream(flow.source) if isinstance(flow, AutoCdcFlow) else flow.query()
                if not reader.has_new:
                    self._ensure_exists(flow.target, batch)
                    return False
                if isinstance(flow, AutoCdcFlow):
                    self._apply_auto_cdc(flow, batch, reader, result)
                else:
                    self._append(flow, batch, reader, result)
        finally:
            result.seconds += time.monotonic() - started
            for view in reader.persisted:
                view.unpersist()
            self.store.clear_staged()  # the batch committed or failed: its staged input goes
            release_unused_memory()
        return reader.more

    def _ensure_exists(self, target: str, batch: DataFrame) -> None:
        dataset = self.graph.dataset(target)
        if isinstance(self.graph.flows_into(target)[0], AutoCdcFlow):
            return  # auto CDC targets are created with their first changes
        self.store.ensure_table(target, batch.schema, dataset.table_properties)

    def _append(self, flow: Flow, batch: DataFrame, reader: FlowReader, result: FlowResult) -> None:
        dataset = self.graph.dataset(flow.target)
        started = time.monotonic()
        marked = exp.mark(batch, dataset.expectations, dataset.name)
        split = self._split_in_driver(batch, marked, dataset, reader)
        cached = None
        try:
            if split is None:
                cached = marked.persist(StorageLevel.MEMORY_AND_DISK)
                split = exp.split(cached, dataset.expectations, dataset.name)
            self._write_quarantines(reader, split, dataset, marked.schema)
            written = self._append_once(flow.target, split.valid, reader.txns, dataset.table_properties, batch.schema)
        finally:
            if cached is not None:
                cached.unpersist()
        result.batches += 1
        result.output_rows += written
        result.quarantined += split.report.quarantined
        result.dropped += split.report.dropped
        seconds = time.monotonic() - started
        size = f", {reader.bytes_read / 1e6:.1f} MB" if reader.bytes_read else ""
        self.progress(
            f"  {flow.target:<40} +{written:,} rows{size}"
            + (f", {split.report.quarantined:,} quarantined" if split.report.quarantined else "")
            + (f", {split.report.dropped:,} dropped" if split.report.dropped else "")
            + f" ({seconds:.1f}s)"
        )
        self._log_flow(flow, dataset.name, written, [split.report, *reader.view_reports], {})

    def _split_in_driver(
        self, batch: DataFrame, marked: DataFrame, dataset: Dataset, reader: FlowReader
    ) -> exp.Split | None:
        """A small batch collected and split in the driver (see `small_batch.py`); None: by Spark."""
        limit = self.conf.driver_apply_max_rows
        landed = reader.landed
        if landed is not None and batch is landed[0] and not dataset.expectations and reader.small(limit):
            # Landed rows written as they landed (bronze): they are in the driver already.
            rows = landed[1]
            return exp.Split(valid=rows, quarantine=None, report=exp.ExpectationReport(dataset.name, rows.num_rows))
        collected = reader.collect_if_small(marked, limit)
        return None if collected is None else exp.split_arrow(collected, dataset.expectations, dataset.name)

    def _append_once(self, name: str, rows: exp.Rows, txns: dict[str, int], properties: Any, schema: StructType) -> int:
        """Append unless this exact batch is already committed (a re-run after a crash)."""
        if (
            self.store.exists(name)
            and txns
            and all((self.store.txn_version(name, app) or -1) >= version for app, version in txns.items())
        ):
            return 0
        if isinstance(rows, pa.Table):
            return self.store.append_arrow(name, rows, schema, txns, properties)
        return self.store.append(name, rows, txns, properties)

    def _append_quarantine(
        self,
        name: str,
        rows: exp.Rows,
        txns: dict[str, int],
        properties: Any,
        schema: StructType,
        target: str | None = None,
    ) -> int:
        """Quarantine rows exactly once, even when a batch is retried over a longer input range.

        The quarantine commit precedes the dataset's; a run killed between the two and re-run
        after more input arrived re-reads a range that includes rows already quarantined, so rows
        whose content is already there are left out. With `target`, only on such a retry (rows of
        a user's table need not be unique); view quarantines carry bronze references, so always.
        """
        if self.store.exists(name) and (target is None or self._partly_committed(name, target, txns)):
            if isinstance(rows, pa.Table):  # a retry, rare: compared by Spark
                rows = self.store.stage(rows.cast(arrow_schema(schema)), schema)

            def content(df: DataFrame) -> Column:
                return F.sha2(F.to_json(F.struct(*[df[f"`{c}`"] for c in df.columns])), 256)

            seen = self.store.read(name)
            seen = seen.select(content(seen).alias("__content")).distinct()
            rows = rows.withColumn("__content", content(rows)).join(seen, "__content", "left_anti").drop("__content")
        return self._append_once(name, rows, txns, properties, schema)

    def _partly_committed(self, side: str, target: str, txns: dict[str, int]) -> bool:
        """True when `side` holds a batch of these inputs that `target` has not committed yet."""
        return any(
            (self.store.txn_version(side, app) or -1) > (self.store.txn_version(target, app) or -1) for app in txns
        )

    def _write_quarantines(
        self, reader: FlowReader, split: exp.Split, dataset: Dataset, marked_schema: StructType
    ) -> None:
        pending = [(name, rows, count, rows.schema, None) for name, rows, count in reader.view_quarantines]
        if split.quarantine is not None:
            quarantine = (f"{dataset.name}_quarantine", split.quarantine, split.report.quarantined)
            pending.append((*quarantine, marked_schema, dataset.name))
        for name, rows, count, schema, target in pending:
            if count:  # no empty quarantine tables
                properties = {"layer": "quarantine", "quarantine_of": dataset.name}
                self._append_quarantine(name, rows, reader.txns, properties, schema, target)

    def _apply_auto_cdc(self, flow: AutoCdcFlow, batch: DataFrame, reader: FlowReader, result: FlowResult) -> None:
        dataset = self.graph.dataset(flow.target)
        started = time.monotonic()
        for name, rows, count in reader.view_quarantines:
            if count:  # both SCD flows read the view: its quarantine is committed once, as the view's
                view = name.removesuffix("_quarantine")
                txns = {f"{view}<-{app.split('<-', 1)[1]}": v for app, v in reader.txns.items() if "<-" in app}
                properties = {"layer": "quarantine", "quarantine_of": flow.source}
                self._append_quarantine(name, rows, txns, properties, rows.schema)
        properties = {**dataset.table_properties, "scd_type": str(flow.stored_as_scd_type)}
        limit = self.conf.driver_apply_max_rows
        applier = AutoCdcApplier(
            self.store,
            flow,
            properties,
            driver_rows=limit if driver_may_apply(self.store, flow.target, reader.rows_read, limit) else 0,
            input_over_driver_rows=not reader.small(limit),
            collected_events=None if reader.view is None else reader.view.collected_events,
        )
        applied = applier.apply(batch, reader.txns, known_empty=reader.known_empty(batch))
        result.batches += 1
        result.output_rows += applied.upserted
        result.deleted += applied.deleted
        self.progress(
            f"  {flow.target:<40} {applied.upserted:,} upserted, {applied.deleted:,} deleted"
            + (f", {applied.truncates} truncate(s)" if applied.truncates else "")
            + (" in the driver" if applied.in_driver else "")
            + f" ({time.monotonic() - started:.1f}s)"
        )
        self._log_flow(
            flow,
            dataset.name,
            applied.upserted,
            reader.view_reports,
            {"num_upserted_rows": applied.upserted, "num_deleted_rows": applied.deleted},
        )

    def _run_materialized_view(self, dataset: Dataset) -> None:
        assert dataset.query is not None
        flow = Flow(name=dataset.name, target=dataset.name, query=dataset.query)
        reader = FlowReader(self, flow)
        with reading_with(reader):
            df = dataset.query()
            marked = exp.mark(df, dataset.expectations, dataset.name).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                split = exp.split(marked, dataset.expectations, dataset.name)
                written = self.store.overwrite(dataset.name, split.valid, dataset.table_properties)
            finally:
                marked.unpersist()
        self._log_flow(flow, dataset.name, written, [split.report, *reader.view_reports], {})

    def _log_flow(
        self,
        flow: AnyFlow,
        dataset: str,
        rows: int,
        reports: list[exp.ExpectationReport],
        metrics: dict[str, int],
    ) -> None:
        assert self.log is not None
        quality = {
            "dropped_records": sum(r.dropped for r in reports),
            "quarantined_records": sum(r.quarantined for r in reports),
            "expectations": [e for r in reports for e in r.as_event_log()["expectations"]],  # type: ignore[union-attr]
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
