"""The streaming queries of one update, from their start until each has caught up (or failed).

The runner decides what runs (`streaming.py`); this holds what it started, at most
`max_concurrent_flows` at once, waits for them, starts again one that failed for a transient
reason, and records what each read once it caught up, so that its next update need not start
it when nothing is new (`Checkpoint.caught_up_with`). A failed query's committed batches stay:
each is exactly once, and the other queries go on. In continuous mode the queries keep running
until one fails or the process is interrupted.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from cdc_medallion.config import PipelineConf
from cdc_medallion.declarative.definitions import AnyFlow
from cdc_medallion.errors import TRANSIENT_RETRIES, CdcMedallionError, GraphError, first_line, is_transient
from cdc_medallion.runner.batches import BatchWriter, SharedBatchWriter
from cdc_medallion.runner.checkpoints import Checkpoint
from cdc_medallion.runner.event_log import EventLog
from cdc_medallion.runner.results import Progress, as_flow_error

CONTINUOUS_INTERVAL = "5 seconds"

#: How a failed flow is recorded: dataset, its flows, the error (`LocalRunner.record_failure`).
RecordFailure = Callable[[str, list[str], CdcMedallionError], None]


@dataclass(frozen=True)
class QuerySpec:
    """A streaming query to start: `rows` written through `writer` from `checkpoint`, for
    `flows`; `inputs`, what it will have read once caught up (None: not recorded)."""

    name: str
    rows: DataFrame
    writer: BatchWriter | SharedBatchWriter
    checkpoint: Checkpoint
    flows: list[AnyFlow]
    inputs: dict[str, Any] | None


@dataclass
class _Running:
    """A started query of an update, until it has caught up."""

    spec: QuerySpec
    handle: StreamingQuery
    started: float
    attempt: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def writer(self) -> BatchWriter | SharedBatchWriter:
        return self.spec.writer

    @property
    def flows(self) -> list[AnyFlow]:
        return self.spec.flows


class RunningQueries:
    """The queries one update started and has not seen catch up yet (`running`)."""

    def __init__(
        self,
        conf: PipelineConf,
        continuous: bool,
        progress: Progress,
        log: EventLog | None,
        record_failure: RecordFailure,
    ) -> None:
        self.conf = conf
        self.continuous = continuous
        self.progress = progress
        self.log = log
        self.record_failure = record_failure
        self.running: list[_Running] = []
        self.interrupted = False  # set by Ctrl-C in continuous mode, before Spark cancels the jobs

    def launch(self, spec: QuerySpec) -> None:
        if not self.continuous:  # at most `max_concurrent_flows` at once: make room before starting
            active = [q for q in self.running if q.handle.isActive]
            excess = len(active) - self.conf.max_concurrent_flows + 1
            if excess > 0:
                self.finish(active[:excess])
        started = time.monotonic()
        self.running.append(_Running(spec, self._stream(spec), started))

    def _stream(self, spec: QuerySpec) -> StreamingQuery:
        """Start the streaming query `spec` describes."""
        spec.checkpoint.keep_state_layout()
        stream = spec.rows.writeStream.foreachBatch(spec.writer)
        stream = stream.option("checkpointLocation", str(spec.checkpoint.folder))
        stream = stream.queryName(f"{self.conf.name}.{spec.name}"[:200])
        trigger = {"processingTime": CONTINUOUS_INTERVAL} if self.continuous else {"availableNow": True}
        try:
            return stream.trigger(**trigger).start()
        except AnalysisException as error:  # what Spark refuses in a stream, e.g. a sort
            raise GraphError(f"flow {spec.flows[0].name} cannot run as a stream: {first_line(error)}") from None

    def finish(self, queries: list[_Running]) -> None:
        """Wait for `queries` to catch up; record what each read, or that it failed (its
        committed batches stay: each is exactly once; the other queries go on)."""
        for query in list(queries):  # `queries` may be `self.running`, which shrinks
            try:
                self._await(query)
            except StreamingQueryException as error:
                self.running.remove(query)
                failure = self._failure(query.writer, query.flows, error)
                targets = {f.target for f in query.flows}
                for target in sorted(targets):
                    self.record_failure(target, [f.name for f in query.flows if f.target == target], failure)
                continue
            self.running.remove(query)
            wall = (query.writer.last_batch_ended or time.monotonic()) - query.started
            for result in query.writer.results:  # the query's wall clock, shared by its flows
                result.seconds += wall / len(query.writer.results)
            if query.spec.inputs is not None:
                query.spec.checkpoint.record(query.spec.inputs)
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
        query.handle = self._stream(query.spec)
        query.attempt += 1
        return True

    def _failure(self, writer: BatchWriter | SharedBatchWriter, flows: list[AnyFlow], error: Any) -> CdcMedallionError:
        """What a failed query raises: our own error as raised in its batch, or one naming it."""
        return as_flow_error([f.name for f in flows], writer.error if writer.error is not None else error)

    def await_continuous(self) -> None:
        """Continuous mode: wait until a query stops (fails) or the process is interrupted.

        Ctrl-C makes PySpark cancel every running job, and so fails the batches running then;
        their writes did not commit and run again next time, so those are logged as stopped, not
        as failures (`_noting_interrupts`)."""
        with self._noting_interrupts():
            self._await_running()

    @contextmanager
    def _noting_interrupts(self) -> Iterator[None]:
        """Note Ctrl-C (`interrupted`) before PySpark's own handler cancels the jobs."""
        previous = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is not threading.main_thread() or not callable(previous):
            yield
            return

        def note(signum: int, frame: Any) -> None:
            self.interrupted = True
            previous(signum, frame)

        signal.signal(signal.SIGINT, note)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _await_running(self) -> None:
        try:
            while self.running:
                for query in list(self.running):
                    if not query.handle.isActive:
                        error = query.handle.exception()
                        if error is not None and self._retry(query, error):
                            continue
                        self.stop()
                        raise self._failure(query.writer, query.flows, error or "stopped")
                time.sleep(1)
        except KeyboardInterrupt:
            self.progress("stopping")
            self.stop()

    def stop(self) -> None:
        for query in self.running:
            if query.handle.isActive:
                query.handle.stop()
        self.running = []
