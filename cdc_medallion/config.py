"""Pipeline configuration: YAML parsed once, strictly, into typed objects.

An unknown or misspelled key is an error that names the file, the key path and the reason,
because a silently ignored option in a CDC pipeline means silently wrong data.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from cdc_medallion.errors import ConfigError
from cdc_medallion.identifiers import (
    COLUMN_NAME_RULE,
    TABLE_NAME_RULE,
    check_identifier,
    dataset_name,
    dataset_part,
    is_column_name,
    is_safe_identifier,
    is_table_name,
)
from cdc_medallion.sqltypes import spark_type

INPUT_LAYOUTS = ("json-lines", "kafka-dump", "files")
SPARK_CONF_KEY = "cdc_medallion.conf"


# Micro-batch limits, whichever is reached first; the byte bound keeps memory flat however big a
# backlog or a message is (Debezium messages with schemas run to kilobytes).
DEFAULT_MAX_MESSAGES_PER_BATCH = 200_000
DEFAULT_MAX_BYTES_PER_BATCH = 128 * 1024 * 1024
# Streaming queries of one update that run at once (the flows of different tables): a query
# mostly waits on Spark's scheduling and Delta's commits, so a few at a time keep the cores busy.
DEFAULT_MAX_CONCURRENT_FLOWS = 4


@dataclass(frozen=True)
class InputConf:
    """Where a source's messages are read from locally (Kafka on Databricks: see the bundle)."""

    path: Path
    layout: str = "json-lines"
    pattern: str = "*"


@dataclass(frozen=True)
class SourceConf:
    name: str
    format: str
    input: InputConf | None = None
    topic: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    kafka: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TableConf:
    """One source table that gets gold tables: its key, and optionally its columns' types."""

    source: str
    table: str
    keys: tuple[str, ...]
    columns: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None
    track_history_except: tuple[str, ...] = ()
    discovered: bool = False

    @property
    def gold_name(self) -> str:
        base = self.name or self.table.split(".")[-1]
        return dataset_name("gold", dataset_part(base))

    def matches(self, schema: str | None, table: str | None) -> bool:
        """`table` in conf may be `name` or `schema.name`; matching is case-insensitive."""
        if table is None:
            return False
        wanted = self.table.lower()
        return wanted == table.lower() or (schema is not None and wanted == f"{schema}.{table}".lower())


@dataclass(frozen=True)
class PipelineConf:
    name: str
    storage: Path
    transformations: Path | None
    expectations: Path | None
    sources: tuple[SourceConf, ...]
    tables: tuple[TableConf, ...] = ()
    max_messages_per_batch: int = DEFAULT_MAX_MESSAGES_PER_BATCH
    max_bytes_per_batch: int = DEFAULT_MAX_BYTES_PER_BATCH
    max_concurrent_flows: int = DEFAULT_MAX_CONCURRENT_FLOWS
    conf_file: Path | None = None

    def source(self, name: str) -> SourceConf:
        for source in self.sources:
            if source.name == name:
                return source
        raise ConfigError(f"{self.conf_file}: no source named {name!r}")

    def tables_of(self, source: str) -> tuple[TableConf, ...]:
        return tuple(t for t in self.tables if t.source == source)

    def with_tables(self, extra: tuple[TableConf, ...]) -> PipelineConf:
        """This conf plus tables discovered in silver (ad-hoc `ingest`, unkeyed conf tables)."""
        known = {(t.source, t.table.lower()) for t in self.tables}
        added = tuple(t for t in extra if (t.source, t.table.lower()) not in known)
        return replace(self, tables=self.tables + added)

    def with_storage(self, storage: Path) -> PipelineConf:
        return replace(self, storage=storage)


# --- strict unpacking -------------------------------------------------------------------------
class _Reader:
    """Walks a YAML mapping, remembering the key path for error messages."""

    def __init__(self, file: Path | str, data: Any, path: str) -> None:
        self.file = file
        self.path = path
        if not isinstance(data, Mapping):
            raise ConfigError(f"{file}: {path or 'top level'} must be a mapping, got {type(data).__name__}")
        self.data = dict(data)
        self.used: set[str] = set()

    def _where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, reason: str) -> ConfigError:
        return ConfigError(f"{self.file}: key '{self._where(key)}': {reason}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., required: bool = False) -> Any:
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            if required or default is ...:
                raise self.error(key, "is required")
            return default
        value = self.data[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.error(key, f"must be {names}, got {type(value).__name__} {value!r}")
        return value

    def child(self, key: str, required: bool = False) -> _Reader | None:
        value = self.get(key, dict, default=None, required=required)
        return None if value is None else _Reader(self.file, value, self._where(key))

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self.error(unknown[0], f"unknown key (known: {', '.join(sorted(self.used))})")


def _at_least_one(pipeline: _Reader, key: str, default: int) -> int:
    value = pipeline.get(key, int, default=default)
    if value < 1:
        raise pipeline.error(key, f"must be 1 or more, got {value}")
    return value


def _resolve(base: Path, value: str) -> Path:
    path = Path(os.path.expandvars(value)).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _string_list(reader: _Reader, key: str) -> tuple[str, ...]:
    values = reader.get(key, list, default=[])
    if not all(isinstance(v, str) for v in values):
        raise reader.error(key, "must be a list of strings")
    return tuple(values)


def _parse_source(file: Path, base: Path, raw: Any, index: int) -> SourceConf:
    reader = _Reader(file, raw, f"sources[{index}]")
    name = reader.get("name", str, required=True)
    if not is_safe_identifier(name):
        raise reader.error("name", f"{name!r} is not a safe identifier")
    fmt = reader.get("format", str, required=True)
    from cdc_medallion.formats import format_names

    if fmt not in format_names():
        raise reader.error("format", f"unknown format {fmt!r} (known: {', '.join(format_names())})")
    input_conf = None
    input_reader = reader.child("input")
    if input_reader is not None:
        layout = input_reader.get("layout", str, default="json-lines")
        if layout not in INPUT_LAYOUTS:
            raise input_reader.error("layout", f"must be one of {', '.join(INPUT_LAYOUTS)}, got {layout!r}")
        input_conf = InputConf(
            path=_resolve(base, input_reader.get("path", str, required=True)),
            layout=layout,
            pattern=input_reader.get("pattern", str, default="*"),
        )
        input_reader.finish()
    options = reader.get("options", dict, default={})
    kafka = reader.get("kafka", dict, default={})
    source = SourceConf(
        name=name,
        format=fmt,
        input=input_conf,
        topic=reader.get("topic", str, default=None),
        options=options,
        kafka=kafka,
    )
    reader.finish()
    return source


def parse_table(file: Path | str, raw: Any, where: str) -> TableConf:
    reader = _Reader(file, raw, where)
    table = reader.get("table", str, required=True)
    for part in table.split("."):  # `schema.table`: each part a table name
        if not is_table_name(part):
            raise reader.error("table", f"{table!r} is not a table name ({TABLE_NAME_RULE} in a part)")
    keys = _string_list(reader, "keys")
    for key in keys:
        if not is_column_name(key):
            raise reader.error("keys", f"{key!r} is not a column name ({COLUMN_NAME_RULE})")
    columns = reader.get("columns", dict, default={})
    for column, sql_type in columns.items():
        if not is_column_name(column) or not isinstance(sql_type, str):
            raise reader.error("columns", f"{column!r}: {sql_type!r} must be a column name and a type name")
        try:
            columns[column] = spark_type(sql_type)
        except ConfigError as error:
            raise reader.error("columns", f"{column}: {error}") from None
    name = reader.get("name", str, default=None)
    if name is not None and not is_safe_identifier(name):
        raise reader.error("name", f"{name!r} is not a safe identifier")
    conf = TableConf(
        source=reader.get("source", str, required=True),
        table=table,
        keys=keys,
        columns=dict(columns),
        name=name,
        track_history_except=_string_list(reader, "track_history_except"),
    )
    reader.finish()
    return conf


def load_conf(path: str | os.PathLike[str]) -> PipelineConf:
    """Load and validate a pipeline conf file; relative paths are relative to the file."""
    file = Path(path).resolve()
    if not file.is_file():
        raise ConfigError(f"{file}: configuration file not found")
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError(f"{file}: not valid YAML: {error}") from error
    base = file.parent
    top = _Reader(file, raw, "")
    pipeline = top.child("pipeline", required=True)
    assert pipeline is not None
    name = pipeline.get("name", str, required=True)
    check_identifier(name, "pipeline name")
    raw_sources = list(top.get("sources", list, default=[]))
    raw_tables = [(file, t, f"tables[{i}]") for i, t in enumerate(top.get("tables", list, default=[]))]
    sources = [_parse_source(file, base, s, i) for i, s in enumerate(raw_sources)]
    # `include:` globs of fragment files, each with its own `sources:` / `tables:` (one per source).
    for pattern in top.get("include", list, default=[]):
        if not isinstance(pattern, str):
            raise top.error("include", "must be a list of glob patterns")
        for fragment in sorted(Path(match) for match in glob.glob(str(base / pattern))):  # relative or absolute
            part = _Reader(fragment, yaml.safe_load(fragment.read_text(encoding="utf-8")) or {}, "")
            sources += [
                _parse_source(fragment, fragment.parent, s, i)
                for i, s in enumerate(part.get("sources", list, default=[]))
            ]
            raw_tables += [(fragment, t, f"tables[{i}]") for i, t in enumerate(part.get("tables", list, default=[]))]
            part.finish()
    if not sources:
        raise top.error("sources", "is required: at least one source (here or in an included file)")
    names = [s.name for s in sources]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise top.error("sources", f"duplicate source names {sorted(duplicates)}")
    tables = tuple(parse_table(where_file, t, where) for where_file, t, where in raw_tables)
    for (where_file, _, where), table in zip(raw_tables, tables, strict=True):
        if table.source not in names:
            raise ConfigError(f"{where_file}: key '{where}.source': unknown source {table.source!r}")
    conf = PipelineConf(
        name=name,
        storage=_resolve(base, pipeline.get("storage", str, required=True)),
        transformations=_resolve(base, pipeline.get("transformations", str, default="../transformations")),
        expectations=_resolve(base, pipeline.get("expectations", str, default="../expectations")),
        max_messages_per_batch=pipeline.get("max_messages_per_batch", int, default=DEFAULT_MAX_MESSAGES_PER_BATCH),
        max_bytes_per_batch=pipeline.get("max_bytes_per_batch", int, default=DEFAULT_MAX_BYTES_PER_BATCH),
        max_concurrent_flows=_at_least_one(pipeline, "max_concurrent_flows", DEFAULT_MAX_CONCURRENT_FLOWS),
        sources=tuple(sources),
        tables=tables,
        conf_file=file,
    )
    pipeline.finish()
    top.finish()
    return conf


# --- the conf the transformations see ---------------------------------------------------------
_active: ContextVar[PipelineConf | None] = ContextVar("cdc_medallion_conf", default=None)


def active_conf() -> PipelineConf:
    """The conf of the pipeline being defined: set by the local runner, or on Databricks read
    from the pipeline configuration key `cdc_medallion.conf` (a path to the YAML file)."""
    conf = _active.get()
    if conf is not None:
        return conf
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    path = spark.conf.get(SPARK_CONF_KEY, None) if spark is not None else None
    if not path:
        raise ConfigError(f"no active pipeline conf: set the pipeline configuration key {SPARK_CONF_KEY}")
    return load_conf(path)


@contextmanager
def using_conf(conf: PipelineConf) -> Iterator[PipelineConf]:
    token = _active.set(conf)
    try:
        yield conf
    finally:
        _active.reset(token)
