"""Pipeline configuration: YAML parsed once, strictly, into typed objects.

The files are read through the models of `conf_files.py`: an unknown or misspelled key is an
error that names the file, the key path and what is allowed, because a silently ignored option
in a CDC pipeline means silently wrong data. What the pipeline uses are the objects here, with
paths resolved and included files merged.
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

from cdc_medallion.conf_files import (
    DEFAULT_MAX_BYTES_PER_BATCH,
    DEFAULT_MAX_CONCURRENT_FLOWS,
    DEFAULT_MAX_MESSAGES_PER_BATCH,
    ConfFile,
    IncludedFile,
    InputConf,
    SourceConf,
    TableSection,
    resolve_path,
)
from cdc_medallion.errors import ConfigError
from cdc_medallion.identifiers import dataset_part
from cdc_medallion.names import gold_name
from cdc_medallion.strict import check, load_yaml

__all__ = [
    "SPARK_CONF_KEY",
    "InputConf",
    "PipelineConf",
    "SourceConf",
    "TableConf",
    "active_conf",
    "load_conf",
    "parse_source",
    "parse_table",
    "using_conf",
]

SPARK_CONF_KEY = "cdc_medallion.conf"


@dataclass(frozen=True)
class TableConf:
    """One source table that gets gold tables: its key, and optionally its columns' types."""

    source: str
    table: str
    keys: tuple[str, ...]
    columns: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None
    track_history_except: tuple[str, ...] = ()

    @property
    def gold_name(self) -> str:
        base = self.name or self.table.split(".")[-1]
        return gold_name(dataset_part(base))

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


# --- loading ----------------------------------------------------------------------------------
def load_conf(path: str | os.PathLike[str]) -> PipelineConf:
    """Load and validate a pipeline conf file; relative paths are relative to the file."""
    file = Path(path).resolve()
    if not file.is_file():
        raise ConfigError(f"{file}: configuration file not found")
    base = file.parent
    top = check(ConfFile, load_yaml(file), str(file), base=base)
    sources = list(top.sources)
    tables = [(file, f"tables[{i}]", section) for i, section in enumerate(top.tables)]
    # `include:` globs of fragment files, each with its own `sources:` / `tables:` (one per source).
    for pattern in top.include:
        for fragment in sorted(Path(match) for match in glob.glob(str(base / pattern))):  # relative or absolute
            part = check(IncludedFile, load_yaml(fragment) or {}, str(fragment), base=fragment.parent)
            sources += part.sources
            tables += [(fragment, f"tables[{i}]", section) for i, section in enumerate(part.tables)]
    if not sources:
        raise ConfigError(f"{file}: key 'sources': is required: at least one source (here or in an included file)")
    names = [s.name for s in sources]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ConfigError(f"{file}: key 'sources': duplicate source names {sorted(duplicates)}")
    for where_file, where, section in tables:
        if section.source not in names:
            raise ConfigError(f"{where_file}: key '{where}.source': unknown source {section.source!r}")
    pipeline = top.pipeline
    return PipelineConf(
        name=pipeline.name,
        storage=resolve_path(base, pipeline.storage),
        transformations=resolve_path(base, pipeline.transformations),
        expectations=resolve_path(base, pipeline.expectations),
        max_messages_per_batch=pipeline.max_messages_per_batch,
        max_bytes_per_batch=pipeline.max_bytes_per_batch,
        max_concurrent_flows=pipeline.max_concurrent_flows,
        sources=tuple(sources),
        tables=tuple(_table(section) for _, _, section in tables),
        conf_file=file,
    )


def parse_source(file: Path | str, raw: Any, where: str, base: Path | None = None) -> SourceConf:
    """One entry of `sources:` (`where`, e.g. `sources[0]`), its input relative to `base`."""
    return check(SourceConf, raw, str(file), at=where, base=base or Path(file).parent)


def parse_table(file: Path | str, raw: Any, where: str) -> TableConf:
    """One entry of `tables:` (`where`, e.g. `tables[0]`)."""
    return _table(check(TableSection, raw, str(file), at=where))


def _table(section: TableSection) -> TableConf:
    return TableConf(
        source=section.source,
        table=section.table,
        keys=section.keys,
        columns=dict(section.columns),
        name=section.name,
        track_history_except=section.track_history_except,
    )


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
