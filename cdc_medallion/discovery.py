"""Which source tables silver has seen: their columns, types and (from messages) keys.

The gold graph is declared per table, so the runner looks at silver before declaring it:
configured tables get their columns from here unless conf lists them; tables not in conf get
gold when the messages themselves name a key (Debezium key messages, Canal pkNames, ...),
and are reported as unconfigured otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion.config import PipelineConf, TableConf
from cdc_medallion.formats.values import widen
from cdc_medallion.model import KIND_CHANGE, KIND_KEY
from cdc_medallion.names import STATE_DIR, silver_name
from cdc_medallion.storage.delta_store import DeltaStore

Columns = dict[tuple[str | None, str], dict[str, tuple[str | None, int]]]
Keys = dict[tuple[str | None, str], tuple[str, ...]]
_SCANNED = ["kind", "source_schema", "source_db", "source_table", "key_columns", "column_types", "before", "after"]


@dataclass
class SeenTable:
    source: str
    schema: str | None
    table: str
    columns: dict[str, str | None] = field(default_factory=dict)
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Discovery:
    tables: tuple[TableConf, ...]  # configured or keyed by their messages: they get gold
    unconfigured: tuple[str, ...]  # seen in silver, no key known: silver only
    unseen: tuple[str, ...] = ()  # configured, but no message of theirs has arrived: "source:table"
    seen: tuple[str, ...] = ()  # every table silver has seen: "source:table"

    def gold_tables(self) -> set[tuple[str, str]]:
        return {(t.source, t.table.lower()) for t in self.tables if t.keys and t.columns}


def seen_tables(store: DeltaStore, conf: PipelineConf) -> list[SeenTable]:
    seen: list[SeenTable] = []
    for source in conf.sources:
        name = silver_name(source.name)
        if store.exists(name):
            seen += _SourceScan.load(store, source.name, name).advance().tables()
    return seen


@dataclass
class _SourceScan:
    """What one source's silver has shown so far.

    Kept in `_state/_discovery/`, and advanced by a streaming query over silver (its checkpoint
    beside the others), so each update scans only the silver rows appended since the last one:
    discovery then costs what a batch adds, not what silver holds. The file records the last
    batch folded in, so a batch replayed after a crash is not counted twice, and the silver
    version it has seen, so an update with nothing new starts no query.
    """

    store: DeltaStore
    source: str
    silver: str
    table_id: str | None = None
    version: int | None = None
    batch: int = -1
    columns: Columns = field(default_factory=dict)
    keys: Keys = field(default_factory=dict)

    @classmethod
    def load(cls, store: DeltaStore, source: str, silver: str) -> _SourceScan:
        """The saved scan, or a new one (and its stream from the start) when the saved one is
        missing, unreadable or of another silver table (one that was dropped and made again)."""
        scan = cls(store, source, silver)
        try:
            saved = json.loads(scan.path.read_text(encoding="utf-8"))
            for entry in saved["tables"]:
                ident = (entry["schema"], entry["table"])
                scan.columns[ident] = {c: (t, pos) for c, t, pos in entry["columns"]}
                if entry["keys"]:
                    scan.keys[ident] = tuple(entry["keys"])
            scan.table_id, scan.version, scan.batch = saved["table_id"], saved["version"], saved["batch"]
            if scan.table_id != _table_id(store, silver):
                raise ValueError("another silver table")
        except (OSError, ValueError, KeyError, TypeError):
            shutil.rmtree(scan.checkpoint, ignore_errors=True)
            return cls(store, source, silver, table_id=_table_id(store, silver))
        return scan

    @property
    def checkpoint(self) -> Path:
        return self.store.checkpoint(f"_discovery_{self.silver}")

    @property
    def path(self) -> Path:
        return self.store.root / STATE_DIR / "_discovery" / f"{self.silver}.json"

    def advance(self) -> _SourceScan:
        """Fold in what silver added since the last scan."""
        current = self.store.version(self.silver)
        if current is None or current == self.version:
            return self

        def fold(rows: DataFrame, batch_id: int) -> None:
            if batch_id <= self.batch:  # replayed after a crash: already counted
                return
            self._scan(rows)
            self.batch = batch_id
            self.save()

        checkpoint = self.checkpoint
        query = (
            self.store.read_stream(self.silver)
            .select(*_SCANNED)
            .writeStream.foreachBatch(fold)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        self.version = current
        return self.save()

    def _scan(self, silver: DataFrame) -> None:
        fold_events(silver, self.columns, self.keys)

    def save(self) -> _SourceScan:
        saved = {
            "table_id": self.table_id,
            "version": self.version,
            "batch": self.batch,
            "tables": [
                {
                    "schema": schema,
                    "table": table,
                    "columns": [[c, t, pos] for c, (t, pos) in self.columns.get((schema, table), {}).items()],
                    "keys": list(self.keys.get((schema, table), ())),
                }
                for schema, table in self._idents()
            ],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(saved), encoding="utf-8")
        os.replace(partial, self.path)  # a crash leaves the old file or the new one, never half
        return self

    def _idents(self) -> list[tuple[str | None, str]]:
        """Every (schema, table) seen, in a stable order (gold is declared in this order)."""
        return sorted(set(self.columns) | set(self.keys), key=lambda i: (i[0] or "", i[1]))

    def tables(self) -> list[SeenTable]:
        return seen_in(self.source, self.columns, self.keys)


def fold_events(silver: DataFrame, columns: Columns, keys: Keys) -> None:
    """Fold silver events into what is known per (schema, table): each column's widest type and
    first position, and the key the messages name (the first one seen wins)."""
    events = silver.filter(F.col("kind").isin(KIND_CHANGE, KIND_KEY) & F.col("source_table").isNotNull()).select(
        F.coalesce("source_schema", "source_db").alias("schema"),
        "source_table",
        "key_columns",
        "column_types",
        F.coalesce("after", "before").alias("image"),
    )
    found = (
        events.select(
            "schema", "source_table", "column_types", F.posexplode(F.map_keys("image")).alias("pos", "column")
        )
        .select("schema", "source_table", "column", "pos", F.col("column_types")[F.col("column")].alias("type"))
        .groupBy("schema", "source_table", "column", "type")
        .agg(F.min("pos").alias("pos"))
        .collect()
    )
    named = (
        events.filter(F.col("key_columns").isNotNull() & (F.size("key_columns") > 0))
        .groupBy("schema", "source_table")
        .agg(F.first("key_columns").alias("keys"))
        .collect()
    )
    for row in sorted(found, key=lambda r: (r["schema"] or "", r["source_table"], r["pos"], r["column"])):
        known = columns.setdefault((row["schema"], row["source_table"]), {})
        old_type, old_pos = known.get(row["column"], (None, row["pos"]))
        known[row["column"]] = (widen(old_type, row["type"]), min(old_pos, row["pos"]))
    for row in named:
        keys.setdefault((row["schema"], row["source_table"]), tuple(row["keys"]))


def seen_in(source: str, columns: Columns, keys: Keys) -> list[SeenTable]:
    """Every (schema, table) folded in, in a stable order (gold is declared in this order)."""
    found = []
    for ident in sorted(set(columns) | set(keys), key=lambda i: (i[0] or "", i[1])):
        ordered = sorted(columns.get(ident, {}).items(), key=lambda item: item[1][1])
        found.append(SeenTable(source, ident[0], ident[1], {c: t for c, (t, _) in ordered}, keys.get(ident, ())))
    return found


def tables_in(silver: DataFrame, source: str) -> list[SeenTable]:
    """The tables a set of silver events shows, scanned once (`cdc-medallion discover`)."""
    columns: Columns = {}
    keys: Keys = {}
    fold_events(silver, columns, keys)
    return seen_in(source, columns, keys)


def _table_id(store: DeltaStore, name: str) -> str:
    from deltalake import DeltaTable as LogReader

    return str(LogReader(str(store.path(name))).metadata().id)


def discover(store: DeltaStore, conf: PipelineConf) -> Discovery:
    """Conf tables completed from silver, plus tables the messages key themselves."""
    seen = seen_tables(store, conf)
    names = defaultdict(set)
    for table in seen:
        names[(table.source, table.table.lower())].add(table.schema)
    tables: list[TableConf] = []
    unconfigured: list[str] = []
    unseen: list[str] = []
    matched: set[int] = set()
    for configured in conf.tables:
        found = [
            i for i, t in enumerate(seen) if t.source == configured.source and configured.matches(t.schema, t.table)
        ]
        matched.update(found)
        if not found:
            unseen.append(f"{configured.source}:{configured.table}")
        columns: dict[str, str] = dict(configured.columns)
        keys = configured.keys
        for i in found:
            for column, spark_type in seen[i].columns.items():
                columns.setdefault(column, spark_type or "string")
            keys = keys or seen[i].keys
        tables.append(replace(configured, columns=columns, keys=keys))
    for i, table in enumerate(seen):
        if i in matched:
            continue
        ambiguous = len(names[(table.source, table.table.lower())]) > 1 and table.schema
        qualified = f"{table.schema}.{table.table}" if ambiguous else table.table
        if not table.keys:
            unconfigured.append(f"{table.source}:{qualified}")
            continue
        tables.append(
            TableConf(
                source=table.source,
                table=qualified,
                keys=table.keys,
                columns={c: t or "string" for c, t in table.columns.items()},
                name=f"{table.schema}_{table.table}" if ambiguous else None,
            )
        )
    return Discovery(
        tables=tuple(tables),
        unconfigured=tuple(sorted(unconfigured)),
        unseen=tuple(unseen),
        seen=tuple(sorted({f"{t.source}:{t.schema}.{t.table}" if t.schema else f"{t.source}:{t.table}" for t in seen})),
    )
