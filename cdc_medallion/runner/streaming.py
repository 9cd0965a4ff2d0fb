"""How the streaming flows of one update are planned and started: each in a query of its own, or
as members of one query shared by every flow reading its Delta stream row by row (`sharing.py`).

A flow's query function runs once per update to plan its query (`_Plan`), after what it reads
is up to date; a query with nothing new since it last caught up is not started (`Checkpoint`).
The auto CDC flows that read one source run as one query, so the view is read and checked once
per batch. A flow new to a shared query runs in its own query beside it until both caught up
with the same version of the stream, then joins it (`settle_joins`); a member that fails a
batch leaves it, taking the shared checkpoint with it (`Checkpoint.take_over`). What is started
is then the business of `RunningQueries` (`queries.py`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from cdc_medallion.config import using_conf
from cdc_medallion.declarative.definitions import AnyFlow, AutoCdcFlow, Flow
from cdc_medallion.declarative.runtime import reading_with
from cdc_medallion.errors import GraphError
from cdc_medallion.names import quarantine_name
from cdc_medallion.parsing.stateful import planned_in_layout
from cdc_medallion.runner import expectations as exp
from cdc_medallion.runner.batches import BatchWriter, SharedBatchWriter, SharedMember
from cdc_medallion.runner.checkpoints import Checkpoint, query_name, query_names, signature
from cdc_medallion.runner.queries import QuerySpec
from cdc_medallion.runner.reader import BatchReader, Inputs, PlanReader
from cdc_medallion.runner.results import as_flow_error
from cdc_medallion.runner.sharing import Members, row_by_row, stream_filter
from cdc_medallion.runner.timers import timers_due
from cdc_medallion.spark import parse_over_cores

if TYPE_CHECKING:
    from cdc_medallion.runner.local import LocalRunner


@dataclass
class _Plan:
    """A flow's (or one source's auto CDC flows') query, planned: its streaming rows, and what
    it read to make them."""

    flows: list[AnyFlow]
    name: str  # of its query when it runs on its own (and of that query's checkpoint)
    reader: PlanReader
    rows: DataFrame


class StreamingFlows:
    """The streaming flows of one update of `runner`, as they are planned and started."""

    def __init__(self, runner: LocalRunner) -> None:
        self.runner = runner
        self._plans: dict[str, _Plan] = {}  # planned while looking for sharers, kept for their turn
        self._joining: list[tuple[str, _Plan]] = []  # (stream, plan) run on their own beside a shared query
        self._members: dict[str, str] | None = None  # query name -> the stream it is a shared member of
        self._shared_run: set[str] = set()  # streams whose shared query this update ran (or found caught up)
        self._idle_members: set[str] = set()  # members not run: their shared query had nothing new

    def together_with(self, flow: AnyFlow) -> list[AnyFlow]:
        """`flow` and the other auto CDC flows reading its source, which share its query."""
        if not isinstance(flow, AutoCdcFlow):
            return [flow]
        return [
            other
            for other in self.runner.graph.auto_cdc_flows(flow.source)
            if other.name == flow.name
            or (other.name not in self.runner.flows_run and other.target not in self.runner.in_progress)
        ]

    def run_query(self, flows: list[AnyFlow]) -> None:
        """Run `flows` (one append flow, or the auto CDC flows of one source) in a query of their
        own, or as members of the query shared by every flow reading their stream (`sharing.py`)."""
        self.runner.flows_run.update(f.name for f in flows)
        if self._caught_up_member(flows):
            return
        plan = self._plans.pop(flows[0].name, None)
        if plan is None or [f.name for f in plan.flows] != [f.name for f in flows]:
            plan = self._plan(flows)
        else:  # planned while looking for sharers, maybe before what it reads was written: wait for it
            for name in [*plan.reader.inputs.streams, *plan.reader.inputs.tables]:
                self.runner.ensure_fresh(name)
        stream = self._shared_stream(plan)
        if stream is not None:
            plans = [plan, *self._sharers(stream)]
            if len(plans) > 1 or Members(self._shared_folder(stream)).exists():
                if not self.runner.partial_graph:
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
        if self.runner.continuous or self.runner.partial_graph:
            return False
        if self._members is None:
            self._members = {}
            for stream in self.runner.graph.datasets:
                members = Members(self._shared_folder(stream))
                if members.exists():
                    self._members.update(dict.fromkeys(members.names(), stream))
        stream = self._members.get(query_name(flows))
        if stream is None:
            return False
        self.runner.ensure_fresh(stream)  # what it reads first, as its query function would
        inputs = signature(self.runner.store, Inputs(streams=[stream]))
        if not Checkpoint(self._shared_folder(stream)).caught_up_with(inputs):
            return False
        self._idle_members.add(query_name(flows))
        return True

    def _plan(self, flows: list[AnyFlow]) -> _Plan:
        """Run the query function of `flows` (after what it reads is fresh) for its streaming rows."""
        first = flows[0]
        query = query_name(flows)
        reader = PlanReader(self.runner, query)
        layout = Checkpoint(self.runner.store.checkpoint(query)).state_layout
        parse_over_cores(self.runner.spark)  # settings the query functions read: they set none (Spark Connect)
        with reading_with(reader), planned_in_layout(self.runner.spark, layout):
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
        for flow in list(self.runner.graph.flows.values()):
            if flow.name in self.runner.flows_run or flow.target in self.runner.in_progress[:-1]:
                continue
            flows = self.together_with(flow)
            plan = self._plans.get(flows[0].name)
            if plan is None or [f.name for f in plan.flows] != [f.name for f in flows]:
                try:
                    plan = self._plan(flows)
                except Exception:  # it fails again in its own turn, and is reported there
                    continue
            if self._shared_stream(plan) == stream:
                self._plans.pop(flows[0].name, None)
                self.runner.flows_run.update(f.name for f in flows)
                found.append(plan)
            else:
                self._plans[flows[0].name] = plan
        return found

    def _shared_folder(self, stream: str) -> Path:
        return self.runner.store.checkpoint(f"shared__{stream}")

    def _run_shared(self, stream: str, plans: list[_Plan]) -> None:
        """One query over `stream` for its members; a flow new to it runs in its own query until
        it can join (`settle_joins`). Once per update: a flow asking after its query started
        runs beside it, as a new one, and a member it starts without goes on from its checkpoint
        (`take_over`); rewriting the member list then would drop the members it serves."""
        runner = self.runner
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
            listed = {p.name for p in plans if not (runner.store.checkpoint(p.name) / "offsets").is_dir()}
        served = [p for p in plans if p.name in listed]
        idle = listed & self._idle_members  # not run, as the stream had nothing new: they stay
        # A member not among `plans` still in the graph (not gathered now) goes on from where the
        # shared query is, in its own query (`take_over`); one that left the graph just leaves.
        for name in (listed - idle - {p.name for p in served}) & query_names(runner.graph):
            Checkpoint(runner.store.checkpoint(name)).take_over(Checkpoint(folder))
        members.write({p.name for p in served} | idle)  # who left, leaves before the query reads a batch
        for plan in plans:
            if plan.name in listed:
                shutil.rmtree(runner.store.checkpoint(plan.name), ignore_errors=True)  # left by a join
            else:
                self._start(plan)
                self._joining.append((stream, plan))
        checkpoint = Checkpoint(folder)
        inputs = signature(runner.store, Inputs(streams=[stream]))
        if not runner.continuous and checkpoint.caught_up_with(inputs):
            return  # nothing new since it last caught up: not started
        fresh = not (folder / "offsets").is_dir()
        rows = runner.stream(stream)
        shared_members = []
        for plan in served:
            first = plan.flows[0]
            if not isinstance(first, AutoCdcFlow):
                self._ensure_target(first, plan.rows, plan.reader.inputs)
            view = plan.reader.inputs.checked_view
            writer = BatchWriter(
                runner,
                plan.flows,
                f"{plan.name}:{checkpoint.app_id}",
                view,
                fresh and view is not None and runner.store.exists(quarantine_name(view.name)),
            )
            member_rows = self._batch_rows(stream, plan.flows)
            shared_members.append(SharedMember(plan.name, writer, member_rows, stream_filter(plan.rows, rows)))
        name = f"shared__{stream}"
        writer = SharedBatchWriter(name, shared_members, lambda member: None)
        writer.on_failure = lambda member, error: self._member_failed(members, checkpoint, member, error)
        flows = [f for plan in served for f in plan.flows]
        try:
            runner.queries.launch(QuerySpec(name, rows, writer, checkpoint, flows, inputs))
        except Exception as error:  # every member fails with it, not only the one that asked
            for plan in served:
                runner.record_failure(
                    plan.flows[0].target, [f.name for f in plan.flows], as_flow_error([f.name for f in flows], error)
                )

    def _batch_rows(self, stream: str, flows: list[AnyFlow]) -> Callable[[DataFrame], DataFrame]:
        """A member's query function, as a function of one micro-batch of the shared stream."""
        first = flows[0]

        def rows(batch: DataFrame) -> DataFrame:
            reader = BatchReader(self.runner, stream, batch)
            with using_conf(self.runner.conf), reading_with(reader):  # a batch runs in a thread of its own
                return reader.read_stream(first.source) if isinstance(first, AutoCdcFlow) else first.query()

        return rows

    def _member_failed(self, members: Members, shared: Checkpoint, member: SharedMember, error: BaseException) -> None:
        """A member of a shared query failed a batch: it leaves before the batch commits, taking
        the shared checkpoint up to that batch (`take_over`: next time its own query replays the
        batch, then joins again), and its failure is recorded."""
        Checkpoint(self.runner.store.checkpoint(member.name)).take_over(shared)
        members.remove(member.name)
        flows = list(member.writer.flows)
        failure = as_flow_error([f.name for f in flows], member.writer.error or error)
        for target in sorted({f.target for f in flows}):
            self.runner.record_failure(target, [f.name for f in flows if f.target == target], failure)

    def settle_joins(self) -> None:
        """Flows that ran in their own query beside a shared one join it once both caught up with
        the same version of the stream (their checkpoint then goes)."""
        for stream, plan in self._joining:
            if any(f.name in self.runner.result.failures for f in plan.flows):
                continue
            inputs = signature(self.runner.store, Inputs(streams=[stream]))
            shared = Checkpoint(self._shared_folder(stream))
            own = Checkpoint(self.runner.store.checkpoint(plan.name))
            members = Members(shared.folder)
            if members.exists() and shared.caught_up_with(inputs) and own.caught_up_with(inputs):
                members.write(members.names() | {plan.name})
                shutil.rmtree(own.folder, ignore_errors=True)
        self._joining = []

    def _start(self, plan: _Plan) -> None:
        """Start `plan` as a query of its own (unless it has nothing new)."""
        runner = self.runner
        first, reader = plan.flows[0], plan.reader
        if reader.inputs.sources and not runner.land:
            return
        if not isinstance(first, AutoCdcFlow):
            self._ensure_target(first, plan.rows, reader.inputs)
        checkpoint = Checkpoint(runner.store.checkpoint(plan.name))
        inputs = signature(runner.store, reader.inputs)
        idle = not runner.continuous and inputs is not None and checkpoint.caught_up_with(inputs)
        if idle and not timers_due(runner.spark, checkpoint.folder):
            return  # nothing new since it last caught up, and no timer due: not started
        view = reader.inputs.checked_view
        fresh = not (checkpoint.folder / "offsets").is_dir()  # a new query, maybe over a view read before
        fresh = fresh and view is not None and runner.store.exists(quarantine_name(view.name))
        app_id = f"{plan.name}:{checkpoint.app_id}"
        writer = BatchWriter(runner, plan.flows, app_id, view, fresh, lands=bool(reader.inputs.sources))
        runner.queries.launch(QuerySpec(plan.name, plan.rows, writer, checkpoint, plan.flows, inputs))

    def _ensure_target(self, flow: Flow, rows: DataFrame, inputs: Inputs) -> None:
        """An append flow's table exists from its first update, empty if nothing came, with the
        schema its query gives (less the expectation marks of a view it read)."""
        schema = rows.drop(exp.FAILED).schema if inputs.checked_view is not None else rows.schema
        dataset = self.runner.graph.dataset(flow.target)
        if self.runner.store.exists(flow.target):
            self.runner.store.check_schema(flow.target, schema)
        else:
            self.runner.store.ensure_table(flow.target, schema, dataset.table_properties)
