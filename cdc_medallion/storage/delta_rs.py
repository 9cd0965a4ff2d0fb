"""Delta tables through delta-rs, with Spark doing the compute.

Spark writes a batch as parquet into a staging folder inside the table; the files are moved
into the table and delta-rs commits them as add actions together with *app transactions*
(`txnAppId -> version`). A flow records in the same atomic commit how far it has read each of
its inputs, so a run killed at any point and re-run neither loses nor duplicates a row: the
commit either happened (and the progress with it) or did not (DESIGN §3, verified here).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.transaction import AddAction
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from cdc_medallion.errors import SchemaMismatch
from cdc_medallion.faults import commit_point
from cdc_medallion.identifiers import dataset_name

PROPERTIES_FILE = "_cdc_medallion.json"
SYSTEM_DIR = "_system"
STATE_DIR = "_state"
LANDING_DIR = "_landing"  # landed batches staged as Parquet while a flow reads them


@dataclass(frozen=True)
class DatasetInfo:
    """What `status` shows about one stored dataset."""

    name: str
    path: str
    rows: int
    version: int
    properties: Mapping[str, str]


def _comparable(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def release_unused_memory() -> None:
    """Hand Arrow's freed memory back to the system between batches and before each MERGE,
    once the process holds more than RELEASE_ABOVE_BYTES.

    Arrow's pool keeps what a batch freed for the next one; with delta-rs's MERGE on top, a
    1M-row load's driver crept to 2.3 GiB (bench; 1.8 GiB with this, same wall time). Below
    the threshold it is not worth it: a release costs about 7 ms, and the next batch pays
    again for the pages it gets back.
    """
    if _resident_bytes() > RELEASE_ABOVE_BYTES:
        pa.default_memory_pool().release_unused()


RELEASE_ABOVE_BYTES = 1 << 30


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: release every time, as the measured runs did
        return RELEASE_ABOVE_BYTES + 1


def arrow_schema(schema: StructType) -> pa.Schema:
    """Arrow schema for a Spark schema, every field nullable (Spark output is nullable anyway)."""
    converted = to_arrow_schema(schema, timezone="UTC")
    return pa.schema([f.with_nullable(True) for f in converted])


def renamed_copy(frame: DataFrame) -> DataFrame:
    """`frame` under new column identities, for handing one kept DataFrame to several reads: a
    query may join two reads as it joins two tables, and the same DataFrame twice in one join
    is ambiguous to Spark (`Column ... are ambiguous`)."""
    return frame.toDF(*frame.columns)


class BoundedRange(NamedTuple):
    version: int  # the last version to read
    rows: int | None  # the rows appended up to it; None when a commit's log is gone
    size: int | None = None  # the bytes of their files; None when a commit's log is gone


class DeltaRsStore:
    """All datasets of one pipeline live as Delta tables under one storage root."""

    def __init__(self, root: str | os.PathLike[str], spark: SparkSession) -> None:
        self.root = Path(root).resolve()
        self.spark = spark
        self.root.mkdir(parents=True, exist_ok=True)
        self._empty_frames: dict[str, DataFrame] = {}

    # --- locations ------------------------------------------------------------------------
    def path(self, name: str) -> Path:
        """Directory of a dataset; names are validated so they cannot leave the root."""
        if name.startswith(f"{SYSTEM_DIR}/") or name.startswith(f"{STATE_DIR}/"):
            folder, _, rest = name.partition("/")
            return self.root / folder / dataset_name(rest)
        return self.root / dataset_name(name)

    def exists(self, name: str) -> bool:
        return DeltaTable.is_deltatable(str(self.path(name)))

    def table(self, name: str, version: int | None = None) -> DeltaTable:
        return DeltaTable(str(self.path(name)), version=version)

    def version(self, name: str) -> int | None:
        return self.table(name).version() if self.exists(name) else None

    def txn_version(self, name: str, app_id: str) -> int | None:
        """How far the flow `app_id` has committed into `name` (None: never)."""
        if not self.exists(name):
            return None
        return self.table(name).transaction_version(app_id)

    def spark_schema(self, name: str) -> StructType:
        return from_arrow_schema(pa.schema(self.table(name).schema().to_arrow()), prefer_timestamp_ntz=False)

    def properties(self, name: str) -> dict[str, str]:
        return _read_properties(self.path(name))

    # --- reads ----------------------------------------------------------------------------
    def _read_files(self, uris: list[str], schema: StructType) -> DataFrame:
        if not uris:
            return self._no_rows(schema)
        return self.spark.read.schema(schema).parquet(*uris)

    def _no_rows(self, schema: StructType) -> DataFrame:
        """An empty DataFrame of `schema`. Making one takes Spark 10-14 ms, which a stream read
        with nothing new paid for every view of every table, so one is made per schema and
        each read gets a `renamed_copy` (3.5 ms)."""
        key = schema.json()
        empty = self._empty_frames.get(key)
        if empty is None:
            empty = self._empty_frames[key] = self.spark.createDataFrame([], schema)
        return renamed_copy(empty)

    def read(self, name: str, schema: StructType | None = None, version: int | None = None) -> DataFrame:
        """The table's snapshot (at `version`) as a Spark DataFrame."""
        table = self.table(name, version)
        schema = schema or self.spark_schema(name)
        return self._read_files(table.file_uris(), schema)

    def empty(self, name: str) -> DataFrame:
        """No rows, in the table's schema: a stream read with nothing new. Not a scan of the
        table's files with a limit of 0, which lists every file the table has."""
        return self._read_files([], self.spark_schema(name))

    def read_appended(self, name: str, after_version: int | None, up_to: int) -> DataFrame:
        """Rows appended after `after_version` up to `up_to`: the incremental input of a stream.

        Streaming tables are append-only, so the new rows are exactly the files in `up_to`
        that were not in `after_version`.
        """
        return self._read_files(self._appended_files(name, after_version, up_to), self.spark_schema(name))

    def read_appended_arrow(self, name: str, after_version: int | None, up_to: int, columns: list[str]) -> pa.Table:
        """`columns` of the rows `read_appended` serves, read into the driver by Arrow (for a
        range known to be small: no Spark job), in the table's Spark types."""
        schema = arrow_schema(self.spark_schema(name))
        wanted = pa.schema([schema.field(c) for c in columns])
        files = [uri.removeprefix("file://") for uri in self._appended_files(name, after_version, up_to)]
        return ds.dataset(files, schema=wanted, format="parquet").to_table() if files else wanted.empty_table()

    def _appended_files(self, name: str, after_version: int | None, up_to: int) -> list[str]:
        new_files = set(self.table(name, up_to).file_uris())
        if after_version is not None and after_version >= 0:
            new_files -= set(self.table(name, after_version).file_uris())
        return sorted(new_files)

    def bounded_range(
        self, name: str, after_version: int | None, up_to: int, max_bytes: int, max_rows: int | None = None
    ) -> BoundedRange:
        """The last version in (after_version, up_to] whose appended files, counted from
        after_version, stay within `max_bytes` and `max_rows` (at least one version), and the
        rows they hold: a downstream flow reads a backlog in bounded batches, as bronze lands
        it, instead of all at once, and knows how big its input is. Rows count as well as bytes
        because Parquet compresses well: 1M silver rows fitted in 128 MiB of files and ran the
        2 GiB heap out of memory in gold (bench)."""
        first = 0 if after_version is None or after_version < 0 else after_version + 1
        total_bytes = total_rows = 0
        for version in range(first, up_to + 1):
            added = self._added(name, version)
            if added is None:  # commit file cleaned up: no sizes to go by, read everything
                return BoundedRange(up_to, None)
            size, rows = added
            over = total_bytes + size > max_bytes or (max_rows is not None and total_rows + rows > max_rows)
            if over and version > first:
                return BoundedRange(version - 1, total_rows, total_bytes)
            total_bytes += size
            total_rows += rows
        return BoundedRange(up_to, total_rows, total_bytes)

    def appended_rows(self, name: str, after_version: int | None, up_to: int) -> int | None:
        """Rows the commits in (after_version, up_to] added, from their log; None when a commit
        file is gone."""
        return self.bounded_range(name, after_version, up_to, max_bytes=sys.maxsize).rows

    def _added(self, name: str, version: int) -> tuple[int, int] | None:
        """Bytes and rows one commit added, or None when its log file is gone."""
        commit = self.path(name) / "_delta_log" / f"{version:020d}.json"
        try:
            lines = commit.read_text(encoding="utf-8").splitlines()
        except OSError:
            return None
        size = rows = 0
        for line in lines:
            if '"add"' not in line:
                continue
            add = json.loads(line).get("add", {})
            size += add.get("size", 0)
            rows += json.loads(add.get("stats") or "{}").get("numRecords", 0)
        return size, rows

    def count(self, name: str) -> int:
        return self.table(name).count() if self.exists(name) else 0

    # --- writes ---------------------------------------------------------------------------
    def ensure_table(self, name: str, schema: StructType, properties: Mapping[str, str] | None = None) -> None:
        """Create an empty table with `schema` (and our properties) if it does not exist."""
        if self.exists(name):
            return
        path = self.path(name)
        path.mkdir(parents=True, exist_ok=True)
        # delta-rs refuses unknown table properties, so ours live in a sidecar file that Delta
        # readers ignore (names starting with '_' are not data).
        sidecar = path / PROPERTIES_FILE
        staged = sidecar.with_suffix(".tmp")
        staged.write_text(json.dumps(dict(properties or {}), sort_keys=True), encoding="utf-8")
        os.replace(staged, sidecar)
        DeltaTable.create(str(path), schema=arrow_schema(schema), mode="ignore")

    def check_schema(self, name: str, schema: StructType) -> None:
        """Refuse a batch whose columns or types differ from the table's (delta-rs would not check)."""
        have = _comparable(self.spark_schema(name))
        want = _comparable(schema)
        if have != want:
            raise SchemaMismatch(f"batch for {name} has columns {want}, table has {have}")

    def append(
        self,
        name: str,
        df: DataFrame,
        txns: Mapping[str, int],
        properties: Mapping[str, str] | None = None,
    ) -> int:
        """Append `df` and record `txns` in one atomic commit; returns the rows written.

        The caller skips batches already committed (see `txn_version`); this method only
        guarantees the all-or-nothing commit.
        """
        self.ensure_table(name, df.schema, properties)
        self.check_schema(name, df.schema)
        path = self.path(name)
        stage = path / "_staging" / uuid.uuid4().hex
        df.write.mode("overwrite").parquet(str(stage))
        actions, rows = self._adopt_staged_files(path, stage)
        table = self.table(name)
        commit_point(f"before append to {name}")
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            commit_properties=_commit(txns),
        )
        commit_point(f"after append to {name}")
        shutil.rmtree(stage, ignore_errors=True)
        return rows

    def append_arrow(
        self,
        name: str,
        data: pa.Table,
        schema: StructType,
        txns: Mapping[str, int],
        properties: Mapping[str, str] | None = None,
    ) -> int:
        """Append an Arrow table directly (used where the batch already lives in the driver)."""
        self.ensure_table(name, schema, properties)
        self.check_schema(name, schema)
        commit_point(f"before append to {name}")
        write_deltalake(
            str(self.path(name)),
            data.cast(arrow_schema(schema)),
            mode="append",
            commit_properties=_commit(txns),
        )
        commit_point(f"after append to {name}")
        return data.num_rows

    def overwrite(self, name: str, df: DataFrame, properties: Mapping[str, str] | None = None) -> int:
        """Replace a materialized view's content (recomputed each update; small by nature)."""
        data = df.toArrow().cast(arrow_schema(df.schema))
        self.ensure_table(name, df.schema, properties)
        write_deltalake(str(self.path(name)), data, mode="overwrite", schema_mode="overwrite")
        return data.num_rows

    def merge(
        self,
        name: str,
        source: pa.RecordBatchReader,
        predicate: str,
        txns: Mapping[str, int],
        *,
        assignments: Mapping[str, str],
        delete_when: str,
        update_when: str,
        insert_when: str,
    ) -> dict[str, Any]:
        """MERGE `source` (alias `s`) into `name` (alias `t`), in one commit that records `txns`.

        `predicate` is DataFusion SQL. A matched row is deleted or updated, an unmatched one
        inserted, each when its condition holds; both writes set the `assignments`. Arrow's
        freed memory is handed back first: the MERGE is the driver's largest allocation.
        """
        release_unused_memory()
        commit_point(f"before merge into {name}")
        metrics = (
            self.table(name)
            .merge(source, predicate=predicate, source_alias="s", target_alias="t", commit_properties=_commit(txns))
            .when_matched_delete(predicate=delete_when)
            .when_matched_update(updates=dict(assignments), predicate=update_when)
            .when_not_matched_insert(updates=dict(assignments), predicate=insert_when)
            .execute()
        )
        commit_point(f"after merge into {name}")
        return metrics

    def commit_progress(self, name: str, txns: Mapping[str, int]) -> None:
        """Record progress without data (a batch that produced no rows) so it is not re-read."""
        table = self.table(name)
        commit_point(f"before progress of {name}")
        table.create_write_transaction([], mode="append", schema=table.schema(), commit_properties=_commit(txns))
        commit_point(f"after progress of {name}")

    def _adopt_staged_files(self, path: Path, stage: Path) -> tuple[list[AddAction], int]:
        import pyarrow.parquet as pq

        actions: list[AddAction] = []
        rows = 0
        for staged in sorted(stage.glob("*.parquet")):
            metadata = pq.read_metadata(staged)
            if metadata.num_rows == 0:
                continue
            final = path / f"part-{uuid.uuid4().hex}.snappy.parquet"
            os.replace(staged, final)
            stat = final.stat()
            rows += metadata.num_rows
            actions.append(
                AddAction(
                    path=final.name,
                    size=stat.st_size,
                    partition_values={},
                    modification_time=int(stat.st_mtime * 1000),
                    data_change=True,
                    stats=json.dumps({"numRecords": metadata.num_rows}),
                )
            )
        return actions, rows

    def drop(self, name: str) -> None:
        shutil.rmtree(self.path(name), ignore_errors=True)

    def stage(self, data: pa.Table, schema: StructType) -> DataFrame:
        """Rows held in Python as a DataFrame, through a Parquet file under `_landing/`.

        `createDataFrame` would copy the rows into the JVM heap and then into every task it
        ships; at a 128 MiB batch that ran the 2 GiB heap out of memory (bench: a 1M-row
        snapshot). A file is read by tasks in streaming fashion instead. `clear_staged` removes
        the files once the batch that read them has committed.
        """
        import pyarrow.parquet as pq

        folder = self.root / LANDING_DIR
        folder.mkdir(exist_ok=True)
        staged = folder / f"{uuid.uuid4().hex}.parquet"
        pq.write_table(data, staged)
        return self.spark.read.schema(schema).parquet(str(staged))

    def spill(self, df: DataFrame) -> ds.Dataset:
        """A DataFrame's rows as Parquet files under `_landing/`, for delta-rs to stream from.

        Collecting them instead (`toArrow`) holds every row in the JVM heap, each task's share
        as one serialized block, and again in Python. A batch that touches every key (a
        TRUNCATE) then holds the whole table: at 10M changes that ran the 2 GiB heap out of
        memory. Tasks write files as they go; `clear_staged` removes them after the batch.
        """
        folder = self.root / LANDING_DIR / uuid.uuid4().hex
        df.write.parquet(str(folder))
        return ds.dataset(str(folder), format="parquet")

    def clear_staged(self) -> None:
        shutil.rmtree(self.root / LANDING_DIR, ignore_errors=True)

    def drop_all(self) -> None:
        """Full refresh: every dataset, state table and the event log go."""
        for child in self.root.iterdir():
            if child.name == "_lock":
                continue
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)

    # --- catalog --------------------------------------------------------------------------
    def datasets(self) -> Iterable[DatasetInfo]:
        """Every user-visible dataset (state tables under _state are internal)."""
        candidates = sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("_"))
        system = self.root / SYSTEM_DIR
        if system.is_dir():
            candidates += sorted(p for p in system.iterdir() if p.is_dir())
        for path in candidates:
            if not DeltaTable.is_deltatable(str(path)):
                continue
            table = DeltaTable(str(path))
            yield DatasetInfo(
                name=path.name,
                path=str(path),
                rows=table.count(),
                version=table.version(),
                properties=_read_properties(path),
            )


def _read_properties(path: Path) -> dict[str, str]:
    sidecar = path / PROPERTIES_FILE
    if not sidecar.is_file():
        return {}
    return {str(k): str(v) for k, v in json.loads(sidecar.read_text(encoding="utf-8")).items()}


def _commit(txns: Mapping[str, int]) -> CommitProperties:
    return CommitProperties(
        app_transactions=[
            Transaction(app_id, int(version), int(time.time() * 1000)) for app_id, version in txns.items()
        ],
    )
