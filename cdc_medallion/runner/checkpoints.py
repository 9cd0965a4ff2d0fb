"""What the local runner keeps on disk beside Spark's own files: the lock of a storage root, and
the bookkeeping of each streaming query's checkpoint.

A query is not started at all when its inputs have not changed since it last caught up (most
queries of most updates over many tables): that needs what its inputs held when it did
(`signature`, written down by `Checkpoint.record`) and whether it left a batch unfinished. Both
live in the query's checkpoint folder, named after its flows (`query_name`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from cdc_medallion.declarative.definitions import AnyFlow, AutoCdcFlow
from cdc_medallion.errors import ConcurrentRunError
from cdc_medallion.names import LOCK_FILE
from cdc_medallion.parsing.stateful import STATE_LAYOUT
from cdc_medallion.sources.files import FileLanding

if TYPE_CHECKING:
    from cdc_medallion.runner.graph import Graph
    from cdc_medallion.runner.reader import Inputs
    from cdc_medallion.storage.delta_store import DeltaStore


class StorageLock:
    """One run at a time per storage root: a second run fails at once, naming the holder."""

    def __init__(self, root: os.PathLike[str] | str) -> None:
        self.path = os.path.join(root, LOCK_FILE)
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


class Checkpoint:
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

    def take_over(self, shared: Checkpoint) -> None:
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


def query_name(flows: list[AnyFlow]) -> str:
    """The name of the query `flows` run in on their own (and of its checkpoint); the name a
    shared query lists them by."""
    first = flows[0]
    if isinstance(first, AutoCdcFlow):
        return "__".join([first.source, *(f.name for f in flows)])
    return first.name


def query_names(graph: Graph) -> set[str]:
    """The names of the graph's streaming queries when each runs on its own (`query_name`)."""
    names = set()
    for flow in graph.flows.values():
        names.add(query_name(graph.auto_cdc_flows(flow.source) if isinstance(flow, AutoCdcFlow) else [flow]))
    return names


def signature(store: DeltaStore, inputs: Inputs) -> dict[str, Any] | None:
    """What a query's inputs hold now: table versions and landed files' sizes. None when
    that cannot be known without reading (Kafka): such a query always runs."""
    signature: dict[str, Any] = {}
    for name in [*inputs.streams, *inputs.tables]:
        signature[f"table:{name}"] = store.version(name)
    for source in inputs.sources:
        if source.input is None:
            return None
        signature[f"source:{source.name}"] = FileLanding(source).sizes()
    return signature


def _last(folder: Path) -> int | None:
    try:
        return max((int(n) for n in os.listdir(folder) if n.isdigit()), default=None)
    except OSError:
        return None


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
