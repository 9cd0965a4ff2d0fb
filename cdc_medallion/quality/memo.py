"""What a quality step takes from the last one: the results of a check whose inputs are as they
were.

A source's accounting and a table's Great Expectations suite read whole tables, so a quality step
cost what the storage holds, even after an update that wrote nothing (a `run` with nothing new
spent 97 % of its time there: bench/HISTORY.md, 2026-12-02). Their results depend on nothing but
the tables they read, the suite's definition (its expectations, with the counts the event log
gives them) and the code that evaluates them. So each result is remembered under a key of all
three: the Delta versions of the tables read, the definition's text and a fingerprint of the
quality modules and of Great Expectations' version. A check whose key is unchanged is not run
again: its last results are recorded again, marked as taken from the update that computed them.
Any commit to a table it reads (a new version), a changed rule or count, or new code runs it.

The memo is a JSON file under `_system/quality/`, replaced whole (write, then rename): a crash
leaves the old one or the new one, and one that does not read is ignored (everything runs).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from cdc_medallion.storage.delta_store import DeltaStore

MEMO_FILE = "memo.json"  # under <storage>/_system/quality
#: The modules whose code decides a check's result.
_CODE = ("accounting.py", "checks.py", "suites.py", "memo.py", "table_figures.py", "figures_step.py", "figures.py")


def code_fingerprint() -> str:
    """The quality modules' source and Great Expectations' version, hashed."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in _CODE:
        digest.update((here / name).read_bytes())
    try:
        digest.update(metadata.version("great_expectations").encode())
    except metadata.PackageNotFoundError:
        digest.update(b"no great_expectations")
    return digest.hexdigest()


class QualityMemo:
    """The remembered results of one storage's checks, by check."""

    def __init__(self, store: DeltaStore, folder: Path) -> None:
        self.store = store
        self.path = folder / MEMO_FILE
        self.fingerprint = code_fingerprint()
        self.entries: dict[str, dict[str, Any]] = {}
        self._read()

    def _read(self) -> None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(raw, dict) and raw.get("fingerprint") == self.fingerprint:
            entries = raw.get("entries")
            self.entries = entries if isinstance(entries, dict) else {}

    def key(self, check: str, reads: Iterable[str], definition: object) -> str:
        """The key of a check (`check`: its kind and dataset) over the tables it `reads` as
        they are now, and its `definition` (anything whose repr states it)."""
        versions = {name: self.store.version(name) for name in sorted(set(reads))}
        text = json.dumps([check, versions, repr(definition)], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def recall(self, check: str, key: str) -> Mapping[str, Any] | None:
        """The results remembered for `check` under `key`, with the update that computed them."""
        entry = self.entries.get(check)
        return entry if entry is not None and entry.get("key") == key else None

    def remember(self, check: str, key: str, update_id: str, results: Any) -> None:
        self.entries[check] = {"key": key, "update_id": update_id, "results": results}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps({"fingerprint": self.fingerprint, "entries": self.entries}), encoding="utf-8")
        partial.replace(self.path)
