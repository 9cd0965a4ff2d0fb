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
up is not started at all (`_Inputs`), which is most queries of most updates over many tables.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from cdc_medallion.config import PipelineConf, using_conf
from cdc_medallion.declarative.definitions import AnyFlow, AutoCdcFlow, Dataset, DatasetKind, Flow
from cdc_medallion.declarative.runtime import reading_with
from cdc_medallion.errors import (
    TRANSIENT_RETRIES,
    CdcMedallionError,
    ConcurrentRunError,
    FlowFailed,
    GraphError,
    first_line,
    is_transient,
)
from cdc_medallion.parsing.stateful import STATE_LAYOUT, planned_in_layout
from cdc_medallion.quality.events import StaleKeys
from cdc_medallion.runner import expectations as exp
from cdc_medallion.runner.batches import BatchWriter, FlowResult, SharedBatchWriter, SharedMember
from cdc_medallion.runner.event_log import EventLog
from cdc_medallion.runner.graph import Graph, load_graph
from cdc_medallion.runner.reader import BatchReader, Inputs, PlanReader, TableReader
from cdc_medallion.runner.sharing import Members, row_by_row, stream_filter
from cdc_medallion.runner.timers import timers_due
from cdc_medallion.sources.files import FileLanding
from cdc_medallion.spark import get_spark, parse_over_cores
from cdc_medallion.storage.delta_store import DeltaStore

Progress = Callable[[str], None]
#: What one micro-batch of a Delta stream reads at most, in bytes of Parquet files and in files
#: (a fraction of the landing bound: Parquet compresses CDC events about fourfold).
STREAM_BYTES_SHARE = 4
STREAM_MAX_FILES = 64
CONTINUOUS_INTERVAL = "5 seconds"


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class UpdateResult:
    update_id: str
    flows: dict[str, FlowResult] = field(default_factory=dict)
    seconds: float = 0.0
    failures: dict[str, CdcMedallionError] = field(default_factory=dict)  # flow -> why it failed
    skipped: dict[str, str] = field(default_factory=dict)  # flow -> the failed dataset it reads
    #: Its event log entries, when it wrote nothing and was asked to hand them to the next update
    #: of its run (`LocalRunner.update`'s `hand_on_if_idle`) instead of committing them.
    unlogged: list[dict[str, Any]] = field(default_factory=list)

    def error(self) -> CdcMedallionError | None:
        """One error for every failed flow of the update (the first one's type and code)."""
        if not self.failures:
            return None
        first = next(iter(self.failures.values()))
        if len(self.failures) == 1 and not self.skipped:
            return first
        others = list(self.failures)[1:]
        text = str(first).removeprefix(f"[{first.code}] ")
        if others:
            text += f"; {len(others)} other flow(s) failed too: {', '.join(others)}"
        if self.skipped:
            text += f"; {len(self.skipped)} flow(s) reading them did not run: {', '.join(self.skipped)}"
        combined = type(first)(text)
        combined.__cause__ = first.__cause__ or first
        return combined


class _UpstreamFailed(Exception):
    """A dataset a query reads failed in this update: the query is not run (internal)."""

    def __init__(self, dataset: str) -> None:
        super().__init__(dataset)
        self.dataset = dataset


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


class _Checkpoint:
    """A query's checkpoint folder, plus two files of ours beside Spark's: the application id
    its writes carry (new with a new checkpoint, so a fresh query never mistakes another's
    batch ids for its own), and the inputs it had when it last caught up."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def app_id(self) -> str:
        path = self.folder / "cdc_medallion_app_id"
        if not path.is_file():
            self.folder.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, uuid.uuid4().hex)
        return path.read_text(encoding="utf-8").strip()

    def caught_up_with(self, inputs: dict[str, Any]) -> bool:
        """Whether the query read everything `inputs` describe, with no batch left unfinished."""
        try:
            recorded = json.loads((self.folder / "cdc_medallion_inputs.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return recorded == inputs and _last(self.folder / "offsets") == _last(self.folder / "commits")

    def record(self, inputs: dict[str, Any]) -> None:
        _write_atomically(self.folder / "cdc_medallion_inputs.json", json.dumps(inputs, sort_keys=True))

    @property
    def state_layout(self) -> int:
        """How its stateful operators split their messages (`stateful.STATE_LAYOUT`): as when it
        was made; a checkpoint that ran before layouts were written down has layout 1."""
        try:
            return int((self.folder / "cdc_medallion_state_layout").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return 1 if (self.folder / "offsets").is_dir() else STATE_LAYOUT

    def take_over(self, shared: _Checkpoint) -> None:
        """Become, for one member, the continuation of shared query `shared`: its log of batches
        up to the first it has not committed (that batch's offsets included, so this query
        replays it over the same rows), its application id and state layout, under a query id
        of its own. The member's query then goes on from the batch it left the shared one at,
        and each write of a replayed batch names the `Txn` the shared query's did: what
        committed is skipped, not written twice. A shared query that read nothing yet leaves
        nothing to take over: the member starts at the stream's start, as the shared one would."""
        shutil.rmtree(self.folder, ignore_errors=True)
        committed = _last(shared.folder / "commits")
        committed = -1 if committed is None else committed
        logged = _last(shared.folder / "offsets")
        if logged is None:
            return
        self.folder.mkdir(parents=True)
        for log, last in (("offsets", min(committed + 1, logged)), ("commits", committed)):
            (self.folder / log).mkdir()
            for batch in range(last + 1):
                for file in (str(batch), f".{batch}.crc"):
                    if (shared.folder / log / file).is_file():
                        shutil.copyfile(shared.folder / log / file, self.folder / log / file)
        (self.folder / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}), encoding="utf-8")
        for own in ("cdc_medallion_app_id", "cdc_medallion_state_layout"):
            if (shared.folder / own).is_file():
                shutil.copyfile(shared.folder / own, self.folder / own)

    def keep_state_layout(self) -> None:
        """Write down the layout of a query about to start from it (once: it never changes)."""
        path = self.folder / "cdc_medallion_state_layout"
        if not path.is_file():
            layout = self.state_layout
            self.folder.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, str(layout))


def _query_name(flows: list[AnyFlow]) -> str:
    """The name of the query `flows` run in on their own (and of its checkpoint); the name a
    shared query lists them by."""
    first = flows[0]
    if isinstance(first, AutoCdcFlow):
        return "__".join([first.source, *(f.name for f in flows)])
    return first.name


def _last(folder: Path) -> int | None:
    try:
        return max((int(n) for n in os.listdir(folder) if n.isdigit()), default=None)
    except OSError:
        return None


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


@dataclass
class _Plan:
    """A flow's (or one source's auto CDC flows') query, planned: its streaming rows, and what
    it read to make them."""

    flows: list[AnyFlow]
    name: str  # of its query when it runs on its own (and of that query's checkpoint)
    reader: PlanReader
    rows: DataFrame


@dataclass
class _Running:
    """A started query of an update, until it has caught up."""

    handle: StreamingQuery
    writer: BatchWriter | SharedBatchWriter
    flows: list[AnyFlow]
    checkpoint: _Checkpoint
    inputs: dict[str, Any] | None
    name: str
    started: float
    rows: DataFrame
    attempt: int = 0


class LocalRunner:
    """Runs updates of one pipeline conf against its storage."""

    def __init__(self, conf: PipelineConf, spark: SparkSession | None = None, progress: Progress | None = None) -> None:
        self.conf = conf
        self.spark = spark or get_spark()
        self.store = DeltaStore(conf.storage, self.spark)
        self.progress = progress or (lambda _line: None)
        self.graph: Graph = Graph({}, {})
        self._done: set[str] = set()
        self._flows_run: set[str] = set()
        self._running: list[str] = []
        self.result = UpdateResult(update_id="")
        self.log: EventLog | None = None
        self.continuous = False
        self._running_queries: list[_Running] = []
        self._failed: dict[str, str] = {}  # dataset -> the failed dataset it is (or reads)
        self._plans: dict[str, _Plan] = {}  # planned while looking for sharers, kept for their turn
        self._joining: list[tuple[str, _Plan]] = []  # (stream, plan) run on their own beside a shared query
        self._members: dict[str, str] | None = None  # query name -> the stream it is a shared member of
        self._shared_run: set[str] = set()  # streams whose shared query this update ran (or found caught up)
        self._idle_members: set[str] = set()  # members not run: their shared query had nothing new
        self._streams: dict[str, DataFrame] = {}  # Delta streams as this update's queries read them (`stream`)
        self.partial_graph = False
        self.land = True
        self._interrupted = False  # set by Ctrl-C in continuous mode, before Spark cancels the jobs

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
            self._done, self._flows_run, self.continuous, self._running_queries = set(), set(), continuous, []
            self._interrupted = False
            self._failed, self._plans, self._joining, self._members, self._streams = {}, {}, [], None, {}
            self._shared_run, self._idle_members = set(), set()
            self.partial_graph, self.land = partial_graph, land or continuous
            try:
                with using_conf(self.conf):  # query functions may read the conf while they run
                    for name, dataset in self.graph.datasets.items():
                        if not dataset.is_view:
                            self.ensure_fresh(name)
                    if continuous:
                        self._await_continuous()
                    else:
                        self._finish(self._running_queries)
                        self._settle_joins()
            except CdcMedallionError as error:
                self._stop_queries()
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
        of a dataset that failed gets `_UpstreamFailed` and does not run; the update goes on."""
        if name in self._done:
            if not self.continuous:
                self._finish([q for q in self._running_queries if any(f.target == name for f in q.flows)])
            if name in self._failed and self._running:  # asked by a reader
                raise _UpstreamFailed(self._failed[name])
            return
        if name in self._running:
            cycle = " -> ".join([*self._running[self._running.index(name) :], name])
            raise GraphError(f"dependency cycle: {cycle}")
        self._running.append(name)
        dataset = self.graph.dataset(name)
        try:
            if dataset.kind is DatasetKind.MATERIALIZED_VIEW:
                self._isolated(name, [dataset.name], lambda: self._run_materialized_view(dataset))
            elif dataset.kind is DatasetKind.STREAMING_TABLE:
                for flow in self.graph.flows_into(name):
                    if flow.name not in self._flows_run:
                        flows = self._together_with(flow)
                        self._isolated(name, [f.name for f in flows], lambda flows=flows: self._run_query(flows))
        finally:
            self._running.pop()
            self._done.add(name)  # its query may still run: a reader waits for it, others overlap
        if self._running and not self.continuous:  # asked by a reader: it reads what this update wrote
            self._finish([q for q in self._running_queries if any(f.target == name for f in q.flows)])
        if name in self._failed and self._running:
            raise _UpstreamFailed(self._failed[name])  # the query reading it does not run either

    def _isolated(self, dataset: str, flows: list[str], run: Callable[[], None]) -> None:
        """Run one dataset's flow(s); a failure is recorded against them, not raised."""
        try:
            run()
        except _UpstreamFailed as upstream:
            self._failed[dataset] = upstream.dataset
            for flow in flows:
                self._flows_run.add(flow)
                self.result.skipped[flow] = upstream.dataset
                self._log_failure(flow, dataset, f"not run: it reads {upstream.dataset}, which failed", "SKIPPED")
        except ConcurrentRunError:
            raise
        except Exception as error:  # one flow's failure, whatever raised it, stops only its readers
            self._record_failure(dataset, flows, as_flow_error(flows, error))

    def _record_failure(self, dataset: str, flows: list[str], error: CdcMedallionError) -> None:
        if self._interrupted:  # Ctrl-C cancelled its batch's jobs: not a failure of the flow
            for flow in flows:
                self._log_failure(flow, dataset, f"stopped mid-batch ({first_line(error)})", "STOPPED")
            self.progress(f"  {', '.join(flows):<40} stopped mid-batch: that batch runs again next time")
            return
        self._failed[dataset] = dataset
        for flow in flows:
            self._flows_run.add(flow)
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

    def _together_with(self, flow: AnyFlow) -> list[AnyFlow]:
        """`flow` and the other auto CDC flows reading its source, which share its query."""
        if not isinstance(flow, AutoCdcFlow):
            return [flow]
        return [
            other
            for other in self.graph.auto_cdc_flows(flow.source)
            if other.name == flow.name or (other.name not in self._flows_run and other.target not in self._running)
        ]

    # --- streaming flows -----------------------------------------------------------------------
    def _run_query(self, flows: list[AnyFlow]) -> None:
        """Run `flows` (one append flow, or the auto CDC flows of one source) in a query of their
        own, or as members of the query shared by every flow reading their stream (`sharing.py`)."""
        self._flows_run.update(f.name for f in flows)
        if self._caught_up_member(flows):
            return
        plan = self._plans.pop(flows[0].name, None)
        if plan is None or [f.name for f in plan.flows] != [f.name for f in flows]:
            plan = self._plan(flows)
        else:  # planned while looking for sharers, maybe before what it reads was written: wait for it
            for name in [*plan.reader.inputs.streams, *plan.reader.inputs.tables]:
                self.ensure_fresh(name)
        stream = self._shared_stream(plan)
        if stream is not None:
            plans = [plan, *self._sharers(stream)]
            if len(plans) > 1 or Members(self._shared_folder(stream)).exists():
                if not self.partial_graph:
                    self._run_shared(stream, plans)
                return
        self._start(plan)

    def _caught_up_member(self, flows: list[AnyFlow]) -> bool:
        """Whether `flows` are members of a shared query with nothing new to read: then nothing
        runs, and their query function is not even built. With hundreds of tables, building every
        gold view only to find that its stream had nothing new was most of such an update.

        A member that left the graph stays listed until its stream has a new batch (the shared
        query then lists only the flows it serves); it missed nothing meanwhile, so it may come
        back as a member."""
        if self.continuous or self.partial_graph:
            return False
        if self._members is None:
            self._members = {}
            for stream in self.graph.datasets:
                members = Members(self._shared_folder(stream))
                if members.exists():
                    self._members.update(dict.fromkeys(members.names(), stream))
        stream = self._members.get(_query_name(flows))
        if stream is None:
            return False
        self.ensure_fresh(stream)  # what it reads first, as its query function would
        inputs = self._signature(Inputs(streams=[stream]))
        if not _Checkpoint(self._shared_folder(stream)).caught_up_with(inputs):
            return False
        self._idle_members.add(_query_name(flows))
        return True

    def _plan(self, flows: list[AnyFlow]) -> _Plan:
        """Run the query function of `flows` (after what it reads is fresh) for its streaming rows."""
        first = flows[0]
        query = _query_name(flows)
        reader = PlanReader(self, query)
        layout = _Checkpoint(self.store.checkpoint(query)).state_layout
        parse_over_cores(self.spark)  # settings the query functions read: they set none (Spark Connect)
        with reading_with(reader), planned_in_layout(self.spark, layout):
            rows = reader.read_stream(first.source) if isinstance(first, AutoCdcFlow) else first.query()
        if not rows.isStreaming:
            raise GraphError(f"flow {first.name} must read a stream (dp.read_stream or a source), it read only tables")
        return _Plan(flows, query, reader, rows)

    def _shared_stream(self, plan: _Plan) -> str | None:
        """The Delta stream `plan` reads, if that is all it reads and it reads it row by row."""
        inputs = plan.reader.inputs
        if len(inputs.streams) != 1 or inputs.tables or inputs.sources or not row_by_row(plan.rows):
            return None
        return inputs.streams[0]

    def _sharers(self, stream: str) -> list[_Plan]:
        """The other flows not run yet whose query could share the one over `stream`. The plans
        of those that cannot are kept for their own turn. A flow into a dataset being brought up
        to date is left for its turn (planning it could read that dataset: a cycle that is not
        one), except into the one whose flows run now: its other flows are next anyway, and one
        of them reading a dataset in progress is a real cycle."""
        found: list[_Plan] = []
        for flow in list(self.graph.flows.values()):
            if flow.name in self._flows_run or flow.target in self._running[:-1]:
                continue
            flows = self._together_with(flow)
            plan = self._plans.get(flows[0].name)
            if plan is None or [f.name for f in plan.flows] != [f.name for f in flows]:
                try:
                    plan = self._plan(flows)
                except Exception:  # it fails again in its own turn, and is reported there
                    continue
            if self._shared_stream(plan) == stream:
                self._plans.pop(flows[0].name, None)
                self._flows_run.update(f.name for f in flows)
                found.append(plan)
            else:
                self._plans[flows[0].name] = plan
        return found

    def stream(self, name: str) -> DataFrame:
        """Delta table `name` as a stream, one DataFrame for every query of this update that reads
        it (once): their plans then name its columns alike, as does a batch of a query over it,
        so a shared query can tell from its members' plans which of them a batch feeds
        (`sharing.stream_filter`)."""
        rows = self._streams.get(name)
        if rows is None:
            rows = self._streams[name] = self.store.read_stream(name, self.stream_options())
        return rows

    def _query_names(self) -> set[str]:
        """The names of the graph's streaming queries when each runs on its own (`_query_name`)."""
        names = set()
        for flow in self.graph.flows.values():
            names.add(_query_name(self.graph.auto_cdc_flows(flow.source) if isinstance(flow, AutoCdcFlow) else [flow]))
        return names

    def _shared_folder(self, stream: str) -> Path:
        return self.store.checkpoint(f"shared__{stream}")

    def _run_shared(self, stream: str, plans: list[_Plan]) -> None:
        """One query over `stream` for its members; a flow new to it runs in its own query until
        it can join (`_settle_joins`). Once per update: a flow asking after its query started
        runs beside it, as a new one, and a member it starts without goes on from its checkpoint
        (`take_over`); rewriting the member list then would drop the members it serves."""
        folder = self._shared_folder(stream)
        if stream in self._shared_run:  # its shared query is under way: these run beside it, then join
            for plan in plans:
                self._start(plan)
                self._joining.append((stream, plan))
            return
        self._shared_run.add(stream)
        members = Members(folder)
        if members.exists():
            listed = members.names()
        else:  # a new shared query: the flows that have read nothing yet start in it
            shutil.rmtree(folder, ignore_errors=True)
            listed = {p.name for p in plans if not (self.store.checkpoint(p.name) / "offsets").is_dir()}
        served = [p for p in plans if p.name in listed]
        idle = listed & self._idle_members  # not run, as the stream had nothing new: they stay
        # A member not among `plans` still in the graph (not gathered now) goes on from where the
        # shared query is, in its own query (`take_over`); one that left the graph just leaves.
        for name in (listed - idle - {p.name for p in served}) & self._query_names():
            _Checkpoint(self.store.checkpoint(name)).take_over(_Checkpoint(folder))
        members.write({p.name for p in served} | idle)  # who left, leaves before the query reads a batch
        for plan in plans:
            if plan.name in listed:
                shutil.rmtree(self.store.checkpoint(plan.name), ignore_errors=True)  # left by a join
            else:
                self._start(plan)
                self._joining.append((stream, plan))
        checkpoint = _Checkpoint(folder)
        inputs = self._signature(Inputs(streams=[stream]))
        if not self.continuous and checkpoint.caught_up_with(inputs):
            return  # nothing new since it last caught up: not started
        fresh = not (folder / "offsets").is_dir()
        rows = self.stream(stream)
        shared_members = []
        for plan in served:
            first = plan.flows[0]
            if not isinstance(first, AutoCdcFlow):
                self._ensure_target(first, plan.rows, plan.reader.inputs)
            view = plan.reader.inputs.checked_view
            writer = BatchWriter(
                self,
                plan.flows,
                f"{plan.name}:{checkpoint.app_id}",
                view,
                fresh and view is not None and self.store.exists(f"{view.name}_quarantine"),
            )
            member_rows = self._batch_rows(stream, plan.flows)
            shared_members.append(SharedMember(plan.name, writer, member_rows, stream_filter(plan.rows, rows)))
        name = f"shared__{stream}"
        writer = SharedBatchWriter(name, shared_members, lambda member: None)
        writer.on_failure = lambda member, error: self._member_failed(members, checkpoint, member, error)
        flows = [f for plan in served for f in plan.flows]
        try:
            self._launch(name, rows, writer, checkpoint, flows, inputs)
        except Exception as error:  # every member fails with it, not only the one that asked
            for plan in served:
                self._record_failure(
                    plan.flows[0].target, [f.name for f in plan.flows], as_flow_error([f.name for f in flows], error)
                )

    def _batch_rows(self, stream: str, flows: list[AnyFlow]) -> Callable[[DataFrame], DataFrame]:
        """A member's query function, as a function of one micro-batch of the shared stream."""
        first = flows[0]

        def rows(batch: DataFrame) -> DataFrame:
            reader = BatchReader(self, stream, batch)
            with using_conf(self.conf), reading_with(reader):  # a batch runs in a thread of its own
                return reader.read_stream(first.source) if isinstance(first, AutoCdcFlow) else first.query()

        return rows

    def view_now(self, view: Dataset) -> DataFrame:
        """The rows `view` keeps (failing none of its drop or quarantine rules) over what its
        input tables hold now, read whole: what every batch of its stream so far kept, and what
        later batches will."""
        reader = TableReader(self)
        with using_conf(self.conf), reading_with(reader):
            rows = reader.read(view.name)
        return exp.kept(rows, view.expectations) if view.expectations else rows

    def _member_failed(self, members: Members, shared: _Checkpoint, member: SharedMember, error: BaseException) -> None:
        """A member of a shared query failed a batch: it leaves before the batch commits, taking
        the shared checkpoint up to that batch (`take_over`: next time its own query replays the
        batch, then joins again), and its failure is recorded."""
        _Checkpoint(self.store.checkpoint(member.name)).take_over(shared)
        members.remove(member.name)
        flows = list(member.writer.flows)
        failure = as_flow_error([f.name for f in flows], member.writer.error or error)
        for target in sorted({f.target for f in flows}):
            self._record_failure(target, [f.name for f in flows if f.target == target], failure)

    def _settle_joins(self) -> None:
        """Flows that ran in their own query beside a shared one join it once both caught up with
        the same version of the stream (their checkpoint then goes)."""
        for stream, plan in self._joining:
            if any(f.name in self.result.failures for f in plan.flows):
                continue
            inputs = self._signature(Inputs(streams=[stream]))
            shared, own = _Checkpoint(self._shared_folder(stream)), _Checkpoint(self.store.checkpoint(plan.name))
            members = Members(shared.folder)
            if members.exists() and shared.caught_up_with(inputs) and own.caught_up_with(inputs):
                members.write(members.names() | {plan.name})
                shutil.rmtree(own.folder, ignore_errors=True)
        self._joining = []

    def _start(self, plan: _Plan) -> None:
        """Start `plan` as a query of its own (unless it has nothing new)."""
        first, reader = plan.flows[0], plan.reader
        if reader.inputs.sources and not self.land:
            return
        if not isinstance(first, AutoCdcFlow):
            self._ensure_target(first, plan.rows, reader.inputs)
        checkpoint = _Checkpoint(self.store.checkpoint(plan.name))
        inputs = self._signature(reader.inputs)
        idle = not self.continuous and inputs is not None and checkpoint.caught_up_with(inputs)
        if idle and not timers_due(self.spark, checkpoint.folder):
            return  # nothing new since it last caught up, and no timer due: not started
        view = reader.inputs.checked_view
        fresh = not (checkpoint.folder / "offsets").is_dir()  # a new query, maybe over a view read before
        fresh = fresh and view is not None and self.store.exists(f"{view.name}_quarantine")
        app_id = f"{plan.name}:{checkpoint.app_id}"
        writer = BatchWriter(self, plan.flows, app_id, view, fresh, lands=bool(reader.inputs.sources))
        self._launch(plan.name, plan.rows, writer, checkpoint, plan.flows, inputs)

    def _launch(
        self,
        name: str,
        rows: DataFrame,
        writer: BatchWriter | SharedBatchWriter,
        checkpoint: _Checkpoint,
        flows: list[AnyFlow],
        inputs: dict[str, Any] | None,
    ) -> None:
        if not self.continuous:  # at most `max_concurrent_flows` at once: make room before starting
            active = [q for q in self._running_queries if q.handle.isActive]
            excess = len(active) - self.conf.max_concurrent_flows + 1
            if excess > 0:
                self._finish(active[:excess])
        started = time.monotonic()
        handle = self._stream(name, rows, writer, checkpoint, flows)
        self._running_queries.append(_Running(handle, writer, flows, checkpoint, inputs, name, started, rows))

    def _stream(
        self,
        name: str,
        rows: DataFrame,
        writer: BatchWriter | SharedBatchWriter,
        checkpoint: _Checkpoint,
        flows: list[AnyFlow],
    ) -> StreamingQuery:
        """Start the streaming query writing `rows` through `writer` from `checkpoint`."""
        checkpoint.keep_state_layout()
        stream = rows.writeStream.foreachBatch(writer).option("checkpointLocation", str(checkpoint.folder))
        stream = stream.queryName(f"{self.conf.name}.{name}"[:200])
        trigger = {"processingTime": CONTINUOUS_INTERVAL} if self.continuous else {"availableNow": True}
        try:
            return stream.trigger(**trigger).start()
        except AnalysisException as error:  # what Spark refuses in a stream, e.g. a sort
            raise GraphError(f"flow {flows[0].name} cannot run as a stream: {first_line(error)}") from None

    def _finish(self, queries: list[_Running]) -> None:
        """Wait for `queries` to catch up; record what each read, or that it failed (its
        committed batches stay: each is exactly once; the other queries go on)."""
        for query in list(queries):  # `queries` may be `self._running_queries`, which shrinks
            try:
                self._await(query)
            except StreamingQueryException as error:
                self._running_queries.remove(query)
                failure = self._failure(query.writer, query.flows, error)
                targets = {f.target for f in query.flows}
                for target in sorted(targets):
                    self._record_failure(target, [f.name for f in query.flows if f.target == target], failure)
                continue
            self._running_queries.remove(query)
            wall = (query.writer.last_batch_ended or time.monotonic()) - query.started
            for result in query.writer.results:  # the query's wall clock, shared by its flows
                result.seconds += wall / len(query.writer.results)
            if query.inputs is not None:
                query.checkpoint.record(query.inputs)
            if not query.writer.batches:
                self.progress(f"  {query.name:<40} nothing new ({time.monotonic() - query.started:.1f}s)")

    def _await(self, query: _Running) -> None:
        """Wait for `query`, starting it again while it fails for a transient reason (`_retry`)."""
        while True:
            try:
                query.handle.awaitTermination()
                return
            except StreamingQueryException as error:
                if not self._retry(query, error):
                    raise

    def _retry(self, query: _Running, error: BaseException) -> bool:
        """Start `query` again from its checkpoint if it failed for a transient reason
        (`is_transient`) and has tries left (TRANSIENT_RETRIES), after a pause that doubles with
        each try; its committed batches are not written again (each write names its batch).
        Whether it was started again."""
        if query.writer.error is not None or query.attempt >= TRANSIENT_RETRIES or not is_transient(error):
            return False
        reason = first_line(error).partition("terminated with exception: ")[2] or first_line(error)
        self.log.emit(
            "flow_progress",
            f"{query.name}: {reason}; starting it again",
            {"retry": {"attempt": query.attempt + 1, "reason": reason}},
            level="WARN",
        )
        self.progress(f"  {query.name:<40} failed ({reason[:80]}); starting it again")
        time.sleep(2**query.attempt)
        query.handle = self._stream(query.name, query.rows, query.writer, query.checkpoint, query.flows)
        query.attempt += 1
        return True

    def _failure(self, writer: BatchWriter | SharedBatchWriter, flows: list[AnyFlow], error: Any) -> CdcMedallionError:
        """What a failed query raises: our own error as raised in its batch, or one naming it."""
        return as_flow_error([f.name for f in flows], writer.error if writer.error is not None else error)

    def _await_continuous(self) -> None:
        """Continuous mode: wait until a query stops (fails) or the process is interrupted.

        Ctrl-C makes PySpark cancel every running job, and so fails the batches running then;
        their writes did not commit and run again next time, so those are logged as stopped, not
        as failures (`_noting_interrupts`)."""
        with self._noting_interrupts():
            self._await_running()

    @contextmanager
    def _noting_interrupts(self) -> Iterator[None]:
        """Note Ctrl-C (`_interrupted`) before PySpark's own handler cancels the jobs."""
        previous = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is not threading.main_thread() or not callable(previous):
            yield
            return

        def note(signum: int, frame: Any) -> None:
            self._interrupted = True
            previous(signum, frame)

        signal.signal(signal.SIGINT, note)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _await_running(self) -> None:
        try:
            while self._running_queries:
                for query in list(self._running_queries):
                    if not query.handle.isActive:
                        error = query.handle.exception()
                        if error is not None and self._retry(query, error):
                            continue
                        self._stop_queries()
                        raise self._failure(query.writer, query.flows, error or "stopped")
                time.sleep(1)
        except KeyboardInterrupt:
            self.progress("stopping")
            self._stop_queries()

    def _stop_queries(self) -> None:
        for query in self._running_queries:
            if query.handle.isActive:
                query.handle.stop()
        self._running_queries = []

    def _ensure_target(self, flow: Flow, rows: DataFrame, inputs: Inputs) -> None:
        """An append flow's table exists from its first update, empty if nothing came, with the
        schema its query gives (less the expectation marks of a view it read)."""
        schema = rows.drop(exp.FAILED).schema if inputs.checked_view is not None else rows.schema
        dataset = self.graph.dataset(flow.target)
        if self.store.exists(flow.target):
            self.store.check_schema(flow.target, schema)
        else:
            self.store.ensure_table(flow.target, schema, dataset.table_properties)

    def _signature(self, inputs: Inputs) -> dict[str, Any] | None:
        """What a query's inputs hold now: table versions and landed files' sizes. None when
        that cannot be known without reading (Kafka): such a query always runs."""
        signature: dict[str, Any] = {}
        for name in [*inputs.streams, *inputs.tables]:
            signature[f"table:{name}"] = self.store.version(name)
        for source in inputs.sources:
            if source.input is None:
                return None
            signature[f"source:{source.name}"] = FileLanding(source).sizes()
        return signature

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


def as_flow_error(flows: list[str], error: BaseException) -> CdcMedallionError:
    """A failure of `flows` as one of our errors: ours as raised, anything else named by them."""
    if isinstance(error, CdcMedallionError):
        return error
    failed = FlowFailed(f"flow {', '.join(flows)} failed: {first_line(error)}")
    failed.__cause__ = error  # the traceback behind the one line, for CDC_MEDALLION_DEBUG=1
    return failed
