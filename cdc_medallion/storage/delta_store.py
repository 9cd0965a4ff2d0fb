"""Every dataset of a pipeline is a Delta table under one storage root, written by delta-spark.

Exactly-once comes from Delta and Spark themselves: a flow is a Structured Streaming query whose
checkpoint records what it read, and each of its writes carries the query's application id and
the micro-batch id (`txnAppId` / `txnVersion`). A batch replayed after a crash therefore skips
every write that committed before the crash, table by table, and makes the others.

The one seam between the runner and storage: nothing else writes a table.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from delta.tables import DeltaTable
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_medallion.errors import SchemaMismatch
from cdc_medallion.faults import commit_point
from cdc_medallion.identifiers import COLUMN_MAPPING, dataset_name, needs_column_mapping, quote
from cdc_medallion.names import CHECKPOINT_DIR, LOCK_FILE, STATE_DIR, SYSTEM_DIR
from cdc_medallion.sqltypes import widens
from cdc_medallion.storage.delta_rs import (
    DatasetInfo,
    commit_actions,
    commit_versions,
    log_version,
    stored_datasets,
    table_id,
    table_properties,
)

#: Delta table properties our layers carry, besides Delta's own (`delta.*`). Gold's change data
#: feed is what downstream users stream; deletion vectors let a MERGE mark the rows it replaces
#: instead of rewriting their files, so a small batch into a big table costs what it touches.
GOLD_FEATURES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
#: The session's default for new tables' deletion vectors (Delta's own setting, as on
#: Databricks): when a session sets it, gold follows it instead of `GOLD_FEATURES`.
DELETION_VECTORS_DEFAULT = "spark.databricks.delta.properties.defaults.enableDeletionVectors"


#: The most commits a stream new to a table replays from version 0 rather than start from the
#: table's snapshot (Delta writes a checkpoint every 10 commits by default).
REPLAYED_COMMITS = 20


def starts_like_its_snapshot(table: Path) -> bool:
    """Whether a stream reading `table` from version 0 reads what one started at its snapshot
    reads, at no more cost: every commit is still in the log (none cleaned up), there are at most
    REPLAYED_COMMITS of them and no checkpoint yet, and none after the first removed rows or
    changed the schema (a snapshot start never sees either; a replay would stop on a removal).
    Appends to a young bronze or silver table pass; anything else starts from the snapshot."""
    versions = commit_versions(table)
    if not versions or versions != list(range(len(versions))) or len(versions) > REPLAYED_COMMITS:
        return False
    if (table / "_delta_log" / "_last_checkpoint").exists():
        return False
    return not any(
        "metaData" in action or ("remove" in action and action["remove"].get("dataChange", True))
        for version in versions[1:]
        for action in commit_actions(table, version)
    )


def gold_features(spark: SparkSession) -> dict[str, str]:
    """`GOLD_FEATURES`, with deletion vectors as the session says when it says."""
    chosen = spark.conf.get(DELETION_VECTORS_DEFAULT, None)
    return GOLD_FEATURES | ({} if chosen is None else {"delta.enableDeletionVectors": chosen.strip().lower()})


@dataclass(frozen=True)
class Txn:
    """A write's idempotency key: the writing query's application id and its batch id."""

    app_id: str
    version: int


def _output_rows(actions: Iterable[dict[str, Any]]) -> int:
    """The rows one commit wrote, from its `commitInfo`'s `numOutputRows` (0 if it has none)."""
    return sum(
        int((action["commitInfo"].get("operationMetrics") or {}).get("numOutputRows", 0))
        for action in actions
        if "commitInfo" in action
    )


class DeltaStore:
    """All datasets of one pipeline live as Delta tables under one storage root."""

    def __init__(self, root: str | os.PathLike[str], spark: SparkSession) -> None:
        self.root = Path(root).resolve()
        self.spark = spark
        self.root.mkdir(parents=True, exist_ok=True)

    # --- locations ------------------------------------------------------------------------
    def path(self, name: str) -> Path:
        """Directory of a dataset; names are validated so they cannot leave the root."""
        if name.startswith(f"{SYSTEM_DIR}/") or name.startswith(f"{STATE_DIR}/"):
            folder, _, rest = name.partition("/")
            return self.root / folder / dataset_name(rest)
        return self.root / dataset_name(name)

    def checkpoint(self, query: str) -> Path:
        """Where the streaming query named `query` keeps its checkpoint."""
        return self.root / CHECKPOINT_DIR / dataset_name(query)

    def exists(self, name: str) -> bool:
        return self.version(name) is not None

    def version(self, name: str) -> int | None:
        """The table's latest version, from its log's file names (no JVM call); None: no table."""
        return log_version(self.path(name))

    # --- reads ----------------------------------------------------------------------------
    def read(self, name: str) -> DataFrame:
        """The table's current snapshot."""
        return self.spark.read.format("delta").load(str(self.path(name)))

    def table_id(self, name: str) -> str:
        return table_id(self.path(name))

    def appended_since(self, name: str, version: int) -> DataFrame | None:
        """The rows committed to `name` after `version`, read from the files those commits added,
        when every one of them only appended (no removed file, no new schema or protocol, no
        deletion vector, no column mapping) and is still in the log; else None: read the table.
        So a reader that remembers what it folded of an append-only table (the event log) reads
        what came since, not the whole table."""
        path = self.path(name)
        latest = log_version(path)
        if latest is None or latest < version or "delta.columnMapping.mode" in table_properties(path):
            return None
        added = []
        for commit in range(version + 1, latest + 1):
            try:
                actions = list(commit_actions(path, commit))
            except OSError:  # cleaned from the log
                return None
            for action in actions:
                if action.keys() - {"commitInfo", "add"} or (action.get("add") or {}).get("deletionVector"):
                    return None
                if "add" in action:
                    added.append(str(path / unquote(action["add"]["path"])))
        schema = self.schema(name)
        if not added:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).parquet(*added)

    def read_stream(self, name: str, options: Mapping[str, str] | None = None) -> DataFrame:
        """The table as a stream: what a streaming query has not read yet, batch by batch.

        A query new to the table starts from its first commit instead of its snapshot when both
        give the same rows (`starts_like_its_snapshot`): a snapshot start runs three Spark jobs to
        list and order the snapshot's files, which is most of what starting a query over a young
        table costs. A query with a checkpoint goes on from it either way (Delta ignores
        `startingVersion` then)."""
        settings = dict(options or {})
        path = self.path(name)
        if not settings.keys() & {"startingVersion", "startingTimestamp"} and starts_like_its_snapshot(path):
            settings["startingVersion"] = "0"
        return self.spark.readStream.format("delta").options(**settings).load(str(path))

    def schema(self, name: str) -> StructType:
        return self.read(name).schema

    def properties(self, name: str) -> dict[str, str]:
        """The table's properties (ours and Delta's), read from its log without the JVM."""
        return table_properties(self.path(name))

    def rows_written_since(self, name: str, version: int | None) -> int:
        """How many rows the commits after `version` wrote (their `numOutputRows`), read from the
        log's entries without a job. A write Delta skipped as already committed (`Txn`) made no
        commit, and so counts none."""
        latest = self.version(name)
        if latest is None:
            return 0
        return sum(
            _output_rows(commit_actions(self.path(name), commit))
            for commit in range(0 if version is None else version + 1, latest + 1)
        )

    def rows_committed(self, name: str, txn: Txn) -> int:
        """How many rows the commit of `txn` wrote (its `numOutputRows`), whether it committed
        just now or in a run that crashed before its checkpoint did. Read from the log's entries,
        newest first, without a job, up to the first commit of an earlier batch of its query.
        0 if no commit carries `txn`."""
        latest = self.version(name)
        if latest is None:
            return 0
        for commit in range(latest, -1, -1):
            try:
                actions = list(commit_actions(self.path(name), commit))
            except FileNotFoundError:  # the log's older entries were cleaned up
                return 0
            mine = [a["txn"] for a in actions if a.get("txn", {}).get("appId") == txn.app_id]
            if mine and mine[0].get("version") == txn.version:
                return _output_rows(actions)
            if mine and mine[0].get("version", 0) < txn.version:
                return 0
        return 0

    def count(self, name: str) -> int:
        return self.read(name).count() if self.exists(name) else 0

    # --- writes ---------------------------------------------------------------------------
    def ensure_table(self, name: str, schema: StructType, properties: Mapping[str, str] | None = None) -> None:
        """Create an empty table with `schema` and our properties (as Delta table properties)."""
        if self.exists(name):
            return
        self._clear_uncommitted(name)
        builder = DeltaTable.createIfNotExists(self.spark).location(str(self.path(name))).addColumns(schema)
        for key, value in self._settings(schema, properties).items():
            builder = builder.property(key, str(value))
        commit_point(f"before create of {name}")
        builder.execute()
        commit_point(f"after create of {name}")

    def _clear_uncommitted(self, name: str) -> None:
        """A create killed before its first commit leaves a folder with no version in its log
        (data files, an empty log folder). Delta takes a log folder for a table, so every later
        create would do nothing and every read fail, and it refuses to create a table where files
        are: nothing was committed there, so it goes (one run per storage holds the lock)."""
        if self.path(name).is_dir():
            shutil.rmtree(self.path(name))

    def _settings(self, schema: StructType, properties: Mapping[str, str] | None) -> dict[str, str]:
        """A new table's properties: ours, gold's Delta features, column mapping where a name needs it."""
        settings = dict(properties or {})
        if settings.get("layer") == "gold":
            settings = {**gold_features(self.spark), **settings}
        if needs_column_mapping(schema.fieldNames()):
            settings = {**COLUMN_MAPPING, **settings}
        return settings

    def check_schema(self, name: str, schema: StructType) -> None:
        """Refuse rows whose columns or types differ from the table's (never a silent cast)."""
        have = [(f.name, f.dataType.simpleString()) for f in self.schema(name).fields]
        want = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        if have != want:
            raise SchemaMismatch(f"rows for {name} have columns {want}, the table has {have}")

    def append(self, name: str, rows: DataFrame, txn: Txn | None, properties: Mapping[str, str] | None = None) -> None:
        """Append `rows` in one commit, unless `txn` (or a later batch of its app) committed.

        A table's first rows create it, in the same commit (`_create_with`): a create and then an
        idempotent append would be two commits, and the append's check of `txn` a Spark job that
        rebuilds the new table's state to find no transaction in it."""
        if not self.exists(name):
            if self._create_with(name, rows, txn, properties):
                return
            self.ensure_table(name, rows.schema, properties)
        commit_point(f"before append to {name}")
        writer = rows.write.format("delta").mode("append")
        if txn is not None:
            writer = writer.option("txnAppId", txn.app_id).option("txnVersion", txn.version)
        writer.save(str(self.path(name)))
        commit_point(f"after append to {name}")

    def _create_with(self, name: str, rows: DataFrame, txn: Txn | None, properties: Mapping[str, str] | None) -> bool:
        """Create the table from its first rows, with its properties and `txn`, in one commit
        (a CREATE TABLE AS SELECT; Delta makes its columns nullable, as our creates do for
        gold). False when another writer created it first, or when Delta refuses such a create:
        with both column mapping and the change data feed on (DELTA_BLOCK_COLUMN_MAPPING_AND_CDC_OPERATION);
        the caller then creates the table empty if need be and appends."""
        settings = self._settings(rows.schema, properties)
        if "delta.columnMapping.mode" in settings and settings.get("delta.enableChangeDataFeed") == "true":
            return False
        self._clear_uncommitted(name)
        writer = rows.writeTo(f"delta.`{self.path(name)}`").using("delta")
        if txn is not None:
            writer = writer.option("txnAppId", txn.app_id).option("txnVersion", str(txn.version))
        for key, value in settings.items():
            writer = writer.tableProperty(key, str(value))
        commit_point(f"before append to {name}")
        try:
            writer.create()
        except AnalysisException as error:
            if error.getCondition() == "TABLE_OR_VIEW_ALREADY_EXISTS":
                return False
            raise
        commit_point(f"after append to {name}")
        return True

    def overwrite(self, name: str, rows: DataFrame, properties: Mapping[str, str] | None = None) -> None:
        """Replace a materialized view's content (recomputed each update), schema included."""
        self.ensure_table(name, rows.schema, properties)
        commit_point(f"before overwrite of {name}")
        rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(str(self.path(name)))
        commit_point(f"after overwrite of {name}")

    def evolve(self, name: str, schema: StructType) -> StructType:
        """Make table `name` hold rows of `schema`: columns it lacks are added (NULL in old rows),
        and a column whose type the rows widen is widened in place with Delta's type widening
        (int to bigint, float to double, a decimal to more digits), keeping every stored value.
        A column the table already holds in a wider type stays so. Any other change is refused,
        naming the table, the column and both types. Returns the table's schema after."""
        current = self.schema(name)
        have = {f.name: f.dataType.simpleString() for f in current.fields}
        missing = [f for f in schema.fields if f.name not in have]
        widened = []
        for field in schema.fields:
            new, old = field.dataType.simpleString(), have.get(field.name)
            if old is None or widens(new, old):
                continue
            if not widens(old, new):
                reason = f"the table holds {old}, new rows bring {new}, which is not a widening"
                raise SchemaMismatch(f"{name}.{field.name}: {reason}")
            widened.append((field.name, new))
        if widened:
            table = f"delta.`{self.path(name)}`"
            self.spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
            for column, new in widened:
                self.spark.sql(f"ALTER TABLE {table} ALTER COLUMN {quote(column)} TYPE {new}")
        if missing:
            self.add_columns(name, StructType(missing))
        return self.schema(name) if widened or missing else current

    def conform(self, name: str, rows: DataFrame) -> DataFrame:
        """`rows` as table `name` (if it exists) holds them, after `evolve`: the table's columns in
        its order and types, a column the rows lack as NULL."""
        if not self.exists(name):
            return rows
        return rows.select(
            *[
                (F.col(quote(f.name)) if f.name in rows.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                for f in self.evolve(name, rows.schema).fields
            ]
        )

    def add_columns(self, name: str, fields: StructType) -> None:
        """Schema evolution: columns a source added (by DDL) join the table, NULL in old rows.
        A name Delta stores only mapped (a space, a comma, ...) turns column mapping on first."""
        if needs_column_mapping(fields.fieldNames()) and "delta.columnMapping.mode" not in self.properties(name):
            mapping = ", ".join(f"'{k}' = '{v}'" for k, v in COLUMN_MAPPING.items())
            self.spark.sql(f"ALTER TABLE delta.`{self.path(name)}` SET TBLPROPERTIES ({mapping})")
        columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in fields)
        self.spark.sql(f"ALTER TABLE delta.`{self.path(name)}` ADD COLUMNS ({columns})")

    @contextmanager
    def idempotent(self, session: SparkSession, txn: Txn) -> Iterator[None]:
        """SQL DML (MERGE) in this block commits once per `txn`, as `append` does: Delta reads
        the application id and version from these session settings (delta-io/delta#1555)."""
        session.conf.set("spark.databricks.delta.write.txnAppId", txn.app_id)
        session.conf.set("spark.databricks.delta.write.txnVersion", str(txn.version))
        try:
            yield
        finally:
            session.conf.unset("spark.databricks.delta.write.txnAppId")
            session.conf.unset("spark.databricks.delta.write.txnVersion")

    @contextmanager
    def merging(self, session: SparkSession) -> Iterator[None]:
        """Settings for our MERGEs: their source is already computed once and detached
        (`auto_cdc.target.detached`), so Delta need not copy it again."""
        settings = {"spark.databricks.delta.merge.materializeSource": "none"}
        previous = {key: session.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            session.conf.set(key, value)
        try:
            yield
        finally:
            for key, value in previous.items():
                if value is None:
                    session.conf.unset(key)
                else:
                    session.conf.set(key, value)

    def merge_table(self, name: str, session: SparkSession) -> DeltaTable:
        return DeltaTable.forPath(session, str(self.path(name)))

    def drop(self, name: str) -> None:
        shutil.rmtree(self.path(name), ignore_errors=True)

    def drop_all(self) -> None:
        """Full refresh: every dataset, state table, checkpoint and the event log go."""
        for child in self.root.iterdir():
            if child.name == LOCK_FILE:
                continue
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)

    # --- catalog --------------------------------------------------------------------------
    def datasets(self) -> Iterable[DatasetInfo]:
        return stored_datasets(self.root)
