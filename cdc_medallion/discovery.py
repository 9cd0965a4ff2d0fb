"""Which source tables silver has seen: their columns, types and (from messages) keys.

The gold graph is declared per table, so the runner looks at silver before declaring it:
configured tables get their columns from here unless conf lists them; tables not in conf get
gold when the messages themselves name a key (Debezium key messages, Canal pkNames, ...),
and are reported as unconfigured otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from pyspark.sql import functions as F

from cdc_medallion.config import PipelineConf, TableConf
from cdc_medallion.formats.values import widen
from cdc_medallion.layers import silver_name
from cdc_medallion.model import KIND_CHANGE, KIND_KEY
from cdc_medallion.storage.delta_rs import DeltaRsStore


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

    def gold_tables(self) -> set[tuple[str, str]]:
        return {(t.source, t.table.lower()) for t in self.tables if t.keys and t.columns}


def seen_tables(store: DeltaRsStore, conf: PipelineConf) -> list[SeenTable]:
    seen: dict[tuple[str, str | None, str], SeenTable] = {}
    for source in conf.sources:
        name = silver_name(source.name)
        if not store.exists(name):
            continue
        events = (
            store.read(name)
            .filter(F.col("kind").isin(KIND_CHANGE, KIND_KEY) & F.col("source_table").isNotNull())
            .select(
                F.coalesce("source_schema", "source_db").alias("schema"),
                "source_table",
                "key_columns",
                "column_types",
                F.coalesce("after", "before").alias("image"),
            )
        )
        columns = (
            events.select(
                "schema", "source_table", "column_types", F.posexplode(F.map_keys("image")).alias("pos", "column")
            )
            .select("schema", "source_table", "column", "pos", F.col("column_types")[F.col("column")].alias("type"))
            .groupBy("schema", "source_table", "column", "type")
            .agg(F.min("pos").alias("pos"))
            .collect()
        )
        keys = (
            events.filter(F.col("key_columns").isNotNull() & (F.size("key_columns") > 0))
            .groupBy("schema", "source_table")
            .agg(F.first("key_columns").alias("keys"))
            .collect()
        )
        positions: dict[tuple[str | None, str], dict[str, int]] = defaultdict(dict)
        for row in columns:
            ident = (source.name, row["schema"], row["source_table"])
            table = seen.setdefault(ident, SeenTable(source.name, row["schema"], row["source_table"]))
            table.columns[row["column"]] = widen(table.columns.get(row["column"]), row["type"])
            place = positions[(row["schema"], row["source_table"])]
            place[row["column"]] = min(place.get(row["column"], row["pos"]), row["pos"])
        for table in seen.values():
            place = positions[(table.schema, table.table)]
            table.columns = dict(sorted(table.columns.items(), key=lambda item: place.get(item[0], 0)))
        for row in keys:
            ident = (source.name, row["schema"], row["source_table"])
            table = seen.setdefault(ident, SeenTable(source.name, row["schema"], row["source_table"]))
            table.keys = tuple(row["keys"])
    return list(seen.values())


def discover(store: DeltaRsStore, conf: PipelineConf) -> Discovery:
    """Conf tables completed from silver, plus tables the messages key themselves."""
    seen = seen_tables(store, conf)
    names = defaultdict(set)
    for table in seen:
        names[(table.source, table.table.lower())].add(table.schema)
    tables: list[TableConf] = []
    unconfigured: list[str] = []
    matched: set[int] = set()
    for configured in conf.tables:
        found = [
            i for i, t in enumerate(seen) if t.source == configured.source and configured.matches(t.schema, t.table)
        ]
        matched.update(found)
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
                discovered=True,
            )
        )
    return Discovery(tables=tuple(tables), unconfigured=tuple(sorted(unconfigured)))
