"""The pipeline conf files as typed models: what a user may write, key by key.

`config.py` loads a file through these models once. Sources are used as they are read (their
paths resolved against the file that wrote them); the pipeline section, the tables and the
included fragments become `PipelineConf` and `TableConf`. Names that become paths, dataset names or SQL are
checked here with the identifier rules, so a bad one fails at startup naming its key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, ValidationInfo, field_validator, model_validator

from cdc_medallion.errors import ConfigError
from cdc_medallion.identifiers import (
    COLUMN_NAME_RULE,
    TABLE_NAME_RULE,
    is_column_name,
    is_safe_identifier,
    is_table_name,
)
from cdc_medallion.sources.kafka_settings import KafkaSettings
from cdc_medallion.sqltypes import spark_type
from cdc_medallion.strict import KeyProblem, NullMeansAbsent, nested_problem

# Micro-batch limits, whichever is reached first; the byte bound keeps memory flat however big a
# backlog or a message is (Debezium messages with schemas run to kilobytes).
DEFAULT_MAX_MESSAGES_PER_BATCH = 200_000
DEFAULT_MAX_BYTES_PER_BATCH = 128 * 1024 * 1024
# Streaming queries of one update that run at once (the flows of different tables): a query
# mostly waits on Spark's scheduling and Delta's commits, so a few at a time keep the cores busy.
DEFAULT_MAX_CONCURRENT_FLOWS = 4


def resolve_path(base: Path, value: str) -> Path:
    """`value` as written in a file in `base`: `$VARS` and `~` expanded, relative to `base`."""
    path = Path(os.path.expandvars(value)).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _safe_identifier(name: str) -> str:
    if not is_safe_identifier(name):
        raise ValueError(f"{name!r} is not a safe identifier (letters, digits, _ $ or #, not starting with a digit)")
    return name


def _column_name(name: str) -> str:
    if not is_column_name(name):
        raise ValueError(f"{name!r} is not a column name ({COLUMN_NAME_RULE})")
    return name


def _table_name(name: str) -> str:
    """`name` or `schema.name`: each part a table name."""
    if not all(is_table_name(part) for part in name.split(".")):
        raise ValueError(f"{name!r} is not a table name ({TABLE_NAME_RULE} in a part)")
    return name


def _spark_type(sql_type: str) -> str:
    try:
        return spark_type(sql_type)
    except ConfigError as error:
        raise ValueError(str(error).removeprefix(f"[{error.code}] ")) from None


SafeIdentifier = Annotated[str, AfterValidator(_safe_identifier)]
ColumnName = Annotated[str, AfterValidator(_column_name)]
TableName = Annotated[str, AfterValidator(_table_name)]
#: A source SQL type name (`DECIMAL(9,2)`, `VARCHAR(20)`), read as its Spark type.
SqlType = Annotated[str, AfterValidator(_spark_type)]
AtLeastOne = Annotated[int, Field(ge=1, strict=True)]


class PipelineSection(NullMeansAbsent):
    """`pipeline:`. Folders are relative to the file."""

    name: SafeIdentifier
    storage: str
    transformations: str = "../transformations"
    expectations: str = "../expectations"
    max_messages_per_batch: AtLeastOne = DEFAULT_MAX_MESSAGES_PER_BATCH
    max_bytes_per_batch: AtLeastOne = DEFAULT_MAX_BYTES_PER_BATCH
    max_concurrent_flows: AtLeastOne = DEFAULT_MAX_CONCURRENT_FLOWS


InputLayout = Literal["json-lines", "kafka-dump", "files"]


class InputConf(NullMeansAbsent):
    """A source's `input:`: its files, read locally (Kafka on Databricks: see the bundle).

    A relative `path` in a file is relative to that file: `check(..., base=folder)` resolves it.
    """

    path: Path
    layout: InputLayout = "json-lines"
    pattern: str = "*"

    @field_validator("path")
    @classmethod
    def _relative_to_its_file(cls, path: Path, info: ValidationInfo) -> Path:
        base = (info.context or {}).get("base")
        return path if base is None else resolve_path(base, str(path))


class SourceConf(NullMeansAbsent):
    """One of `sources:`: its format (and the format's options, checked by the format's options
    model), its files or its Kafka topics."""

    name: SafeIdentifier
    format: str
    input: InputConf | None = None
    topic: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    kafka: KafkaSettings | None = None

    @field_validator("format")
    @classmethod
    def _registered(cls, name: str) -> str:
        from cdc_medallion.formats import format_names

        if name not in format_names():
            raise ValueError(f"unknown format {name!r} (known: {', '.join(format_names())})")
        return name

    @model_validator(mode="after")
    def _options_and_topics(self) -> SourceConf:
        from cdc_medallion.formats import get_format

        model = get_format(self.format).options
        try:
            model.model_validate(self.options)
        except ValidationError as error:
            raise nested_problem(error, model, "options") from None
        if self.kafka is not None and self.kafka.subscription(self.topic) is None:
            raise KeyProblem("kafka.subscribe", "is required (or subscribe_pattern, assign, or the source's topic)")
        return self


class TableSection(NullMeansAbsent):
    """One of `tables:`: a source table that gets gold tables."""

    source: str
    table: TableName
    keys: tuple[ColumnName, ...] = ()
    columns: dict[ColumnName, SqlType] = Field(default_factory=dict)
    name: SafeIdentifier | None = None
    track_history_except: tuple[ColumnName, ...] = ()


class IncludedFile(NullMeansAbsent):
    """A file named by `include:`: sources and tables (one source per file, usually)."""

    sources: tuple[SourceConf, ...] = ()
    tables: tuple[TableSection, ...] = ()


class ConfFile(IncludedFile):
    """A pipeline conf file."""

    pipeline: PipelineSection
    #: Globs of included files, relative to this file (or absolute).
    include: tuple[str, ...] = ()
