"""Reading the pipeline's Delta tables without a JVM: delta-rs (`deltalake`) and Arrow.

`status`, `show` and the quality report look at tables delta-spark wrote. A Spark session costs
a JVM start, seconds to tens of seconds, for what is a read of a few logs or rows; delta-rs reads
Delta's log and data itself, deletion vectors included (through its DataFusion engine: `scan`
and `QueryBuilder`; its pyarrow dataset refuses them, and its `count()` sums file statistics,
deleted rows included, so neither is used here).

The rule, in this one place (`readable_without_jvm`): a table is read here when it lies on this
machine's file system (a path, not a URI: an object store needs credentials, which Spark's
session holds) and its protocol asks for no reader feature outside `VERIFIED_READER_FEATURES`,
the ones delta-rs reads and tests/test_jvm_free_reads.py compares with Spark on tables the
pipeline wrote. Any other table is read by Spark. delta-rs refuses `typeWidening`, for one,
which `DeltaStore.evolve` turns on when a DDL widens a column.

Rows are read through delta-rs's SQL engine (DataFusion) with `READ_SETTINGS`: Spark wrote
timestamps as Parquet INT96 until `spark.py` asked for microseconds, and DataFusion reads INT96
as nanoseconds by default, which hold only years 1677-2262 (1000-01-01 read as 2169-02-08);
read as microseconds, Spark's own unit, every year 1-9999 reads as Spark reads it, in old files
and new. `python_rows` then gives the values as Spark's `collect()` would.

Nothing here writes: delta-spark writes every table (`delta_store.py`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow as pa
from pyarrow import types as t

from cdc_medallion.lines import lines_of
from cdc_medallion.names import SYSTEM_DIR

if TYPE_CHECKING:
    from deltalake import DeltaTable  # imported when used: a Databricks worker has no deltalake

_COMMIT = re.compile(r"^(\d{20})\.json$")
#: Reader features whose tables delta-rs reads as Spark does (checked by the tests named above).
VERIFIED_READER_FEATURES = frozenset({"deletionVectors", "columnMapping", "timestampNtz"})
#: DataFusion's settings for every read here (see the module docstring).
READ_SETTINGS = {"datafusion.execution.parquet.coerce_int96": "us"}


@dataclass(frozen=True)
class DatasetInfo:
    """What `status` shows about one stored dataset."""

    name: str
    path: str
    rows: int | None
    version: int
    properties: Mapping[str, str]


def commit_versions(table: Path) -> list[int]:
    """The versions whose commit files a Delta table's `_delta_log` holds, in order (none: not
    a table)."""
    try:
        names = os.listdir(table / "_delta_log")
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _COMMIT.match(n)))


def log_version(table: Path) -> int | None:
    """A Delta table's latest version from the names in its `_delta_log` (None: not a table)."""
    versions = commit_versions(table)
    return versions[-1] if versions else None


def commit_actions(table: Path, version: int) -> Iterator[dict[str, Any]]:
    """The actions of one commit (`commitInfo`, `add`, `remove`, `metaData`, ...), from its file:
    one JSON object a line, lines ended by "\\n" only (a value in a file's statistics or a MERGE
    predicate may hold U+2028 as it is: `lines.py`)."""
    entry = table / "_delta_log" / f"{version:020d}.json"
    for line in lines_of(entry.read_bytes()):
        yield json.loads(line)


def is_local(location: str | os.PathLike[str]) -> bool:
    """A path on this machine (or a `file:` URI), not an object store's URI."""
    scheme = urlsplit(os.fspath(location)).scheme
    return scheme in ("", "file") or len(scheme) == 1  # one letter: a Windows drive


def open_table(location: str | os.PathLike[str]) -> DeltaTable:
    from deltalake import DeltaTable

    return DeltaTable(os.fspath(location))


def readable_without_jvm(location: str | os.PathLike[str], table: DeltaTable | None = None) -> bool:
    """Whether delta-rs reads this table's rows here (the rule in the module docstring)."""
    if not is_local(location):
        return False
    features = (table or open_table(location)).protocol().reader_features or []
    return set(features) <= VERIFIED_READER_FEATURES


def table_properties(location: str | os.PathLike[str]) -> dict[str, str]:
    """The table's properties (ours and Delta's), from its log."""
    return dict(open_table(location).metadata().configuration)


def table_id(location: str | os.PathLike[str]) -> str:
    """The table's id (its `metaData` action's): a table dropped and made again has a new one."""
    return open_table(location).metadata().id


def column_names(location: str | os.PathLike[str]) -> list[str]:
    return [field.name for field in open_table(location).schema().fields]


def row_count(location: str | os.PathLike[str], table: DeltaTable) -> int | None:
    """The rows of the table's current version, deleted rows not counted: the log's file
    statistics less what the deletion vectors delete. None where that does not tell (a file
    without statistics, deletion vectors in a table delta-rs does not read): Spark counts those."""
    records = table.get_add_actions(flatten=True).column("num_records").to_pylist()
    if None in records:
        return None
    if not _has_deletion_vectors(table):
        return sum(records)
    if not readable_without_jvm(location, table):
        return None
    vectors = pa.RecordBatchReader.from_stream(table.deletion_vectors()).read_all()
    return sum(records) - sum(kept.count(False) for kept in vectors.column("selection_vector").to_pylist())


def _has_deletion_vectors(table: DeltaTable) -> bool:
    return "deletionVectors" in (table.protocol().reader_features or [])


def read_table(location: str | os.PathLike[str], columns: list[str] | None = None) -> pa.Table:
    """The table's current rows (deletion vectors applied), in any order; only a table
    `readable_without_jvm` (else delta-rs would refuse it, or we would not know it reads it right)."""
    return _arrow(_select(location, columns))


def read_batches(location: str | os.PathLike[str], columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """`read_table` batch by batch, for a table too large to hold at once."""
    yield from pa.RecordBatchReader.from_stream(_select(location, columns))


def _select(location: str | os.PathLike[str], columns: list[str] | None) -> object:
    picked = ", ".join(_quote(name) for name in columns) if columns else "*"
    return _query(location, f"SELECT {picked} FROM t")


def first_rows(location: str | os.PathLike[str], limit: int) -> pa.Table:
    """The first `limit` rows ordered as `show` orders them (see `ordering_columns`)."""
    schema = pa.schema(open_table(location).schema().to_arrow())
    order = ", ".join(f"{_quote(name)} ASC NULLS FIRST" for name in ordering_columns(schema))
    sql = "SELECT * FROM t" + (f" ORDER BY {order}" if order else "") + f" LIMIT {int(limit)}"
    return _arrow(_query(location, sql))


def _query(location: str | os.PathLike[str], sql: str) -> object:
    """`sql` over the table, registered as `t`, with `READ_SETTINGS`."""
    from deltalake import QueryBuilder

    table = open_table(location)
    _require_readable(location, table)
    return QueryBuilder(session_config=READ_SETTINGS).register("t", table).execute(sql)


def ordering_columns(schema: pa.Schema) -> list[str]:
    """The columns `show` orders rows by, as Spark would: all but map, array, struct and binary."""
    return [f.name for f in schema if not _unordered(f.type)]


def _unordered(kind: pa.DataType) -> bool:
    nested = t.is_map(kind) or t.is_struct(kind) or t.is_fixed_size_list(kind)
    lists = t.is_list(kind) or t.is_large_list(kind) or t.is_list_view(kind) or t.is_large_list_view(kind)
    binary = t.is_binary(kind) or t.is_large_binary(kind) or t.is_binary_view(kind) or t.is_fixed_size_binary(kind)
    return nested or lists or binary


def dataset_paths(root: Path) -> dict[str, Path]:
    """Every user-visible dataset under `root` by name (state tables and checkpoints are
    internal; the event log is under `_system/`): each folder whose Delta log has a version."""
    candidates = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))
    system = root / SYSTEM_DIR
    if system.is_dir():
        candidates += sorted(p for p in system.iterdir() if p.is_dir())
    return {path.name: path for path in candidates if log_version(path) is not None}


def storage_readable_without_jvm(root: Path) -> bool:
    """Whether delta-rs reads every dataset under `root` (what the quality report reads)."""
    return all(readable_without_jvm(path) for path in dataset_paths(root).values())


def stored_datasets(root: Path) -> Iterator[DatasetInfo]:
    """What `status` lists, from the Delta logs (`rows` None where only Spark can count)."""
    for name, path in dataset_paths(root).items():
        table = open_table(path)
        yield DatasetInfo(
            name=name,
            path=str(path),
            rows=row_count(path, table),
            version=table.version(),
            properties=dict(table.metadata().configuration),
        )


def _require_readable(location: str | os.PathLike[str], table: DeltaTable) -> None:
    if not readable_without_jvm(location, table):
        features = sorted(set(table.protocol().reader_features or []) - VERIFIED_READER_FEATURES)
        where = f"reader features {features}" if features else "a location that is not local"
        raise ValueError(f"{location}: not read without a JVM ({where}); read it with Spark")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _arrow(stream: object) -> pa.Table:
    return pa.RecordBatchReader.from_stream(stream).read_all()
