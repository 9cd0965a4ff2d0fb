"""What an update of the local runner hands back: each flow's result, and its failures as our
errors (`as_flow_error`); and how it reports progress while it runs (`Progress`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cdc_medallion.errors import CdcMedallionError, FlowFailed, first_line
from cdc_medallion.runner.batches import FlowResult

Progress = Callable[[str], None]


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


class UpstreamFailed(Exception):
    """A dataset a query reads failed in this update: the query is not run (internal)."""

    def __init__(self, dataset: str) -> None:
        super().__init__(dataset)
        self.dataset = dataset


def as_flow_error(flows: list[str], error: BaseException) -> CdcMedallionError:
    """A failure of `flows` as one of our errors: ours as raised, anything else named by them."""
    if isinstance(error, CdcMedallionError):
        return error
    failed = FlowFailed(f"flow {', '.join(flows)} failed: {first_line(error)}")
    failed.__cause__ = error  # the traceback behind the one line, for CDC_MEDALLION_DEBUG=1
    return failed
