"""The conf behind `cdc-medallion ingest`: one source, tables from --key/--columns."""

from __future__ import annotations

import json
from pathlib import Path

from cdc_medallion.config import DEFAULT_MAX_MESSAGES_PER_BATCH, InputConf, PipelineConf, SourceConf, TableConf
from cdc_medallion.errors import ConfigError
from cdc_medallion.formats import format_names, get_format
from cdc_medallion.identifiers import TABLE_NAME_RULE, is_column_name, is_table_name
from cdc_medallion.sqltypes import spark_type as sql_to_spark

REPO_EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations"


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for value in values:
        table, sep, rest = value.partition("=")
        if not sep or not table or not rest:
            raise ConfigError(f"{flag} {value!r}: expected TABLE=...")
        parsed[table] = rest
    return parsed


def detect_layout(path: Path) -> str:
    """Kafka-dump lines are JSON objects with topic/partition/offset and value or value_base64."""
    first = path if path.is_file() else next((p for p in sorted(path.rglob("*")) if p.is_file()), None)
    if first is None:
        return "json-lines"
    with first.open("rb") as handle:
        head = handle.readline(1 << 20)
    try:
        record = json.loads(head)
    except ValueError:
        return "json-lines" if path.is_file() else "files"
    if (
        isinstance(record, dict)
        and {"partition", "offset"} <= set(record)
        and ("value" in record or "value_base64" in record)
    ):
        return "kafka-dump"
    return "json-lines"


def adhoc_conf(
    fmt: str,
    input_path: Path,
    storage: Path,
    keys: list[str],
    columns: list[str],
    layout: str | None = None,
    topic: str | None = None,
    options: list[str] | None = None,
    max_messages_per_batch: int = DEFAULT_MAX_MESSAGES_PER_BATCH,
) -> PipelineConf:
    if fmt not in format_names():
        raise ConfigError(f"--format {fmt!r}: unknown format (known: {', '.join(format_names())})")
    if not input_path.exists():
        raise ConfigError(f"--input {input_path}: no such file or directory")
    source_name = fmt.replace("-", "_")
    option_values = {}
    for option in options or []:
        name, sep, value = option.partition("=")
        if not sep:
            raise ConfigError(f"--option {option!r}: expected NAME=VALUE")
        option_values[name] = value
    # Formats whose messages carry no column names (ibm-qrep-delimited) read --columns as an option.
    specs_option = getattr(get_format(fmt), "column_specs_option", None)
    if specs_option and columns and specs_option not in option_values:
        option_values[specs_option] = {t: _split_columns(c) for t, c in _pairs(columns, "--columns").items()}
    get_format(fmt)(source_name, option_values)  # unknown options fail here, before any work
    key_map = _pairs(keys, "--key")
    column_map = _pairs(columns, "--columns")
    tables = []
    for table in sorted(set(key_map) | set(column_map)):
        if not all(is_table_name(p) for p in table.split(".")):
            raise ConfigError(f"--key/--columns: {table!r} is not a table name ({TABLE_NAME_RULE} in a part)")
        key_columns = tuple(k.strip() for k in key_map.get(table, "").split(",") if k.strip())
        typed: dict[str, str] = {}
        for spec in _split_columns(column_map.get(table, "")):
            name, sep, spark_type = spec.partition(":")
            if not sep or not is_column_name(name.strip()):
                raise ConfigError(f"--columns {table}: {spec!r} must be COL:TYPE")
            try:
                typed[name.strip()] = sql_to_spark(spark_type)
            except ConfigError as error:
                raise ConfigError(f"--columns {table}: {name.strip()}: {error}") from None
        tables.append(TableConf(source=source_name, table=table, keys=key_columns, columns=typed))
    return PipelineConf(
        name="ingest",
        storage=storage.resolve(),
        transformations=None,
        expectations=REPO_EXPECTATIONS if REPO_EXPECTATIONS.is_dir() else None,
        sources=(
            SourceConf(
                name=source_name,
                format=fmt,
                input=InputConf(path=input_path.resolve(), layout=layout or detect_layout(input_path)),
                topic=topic,
                options=option_values,
            ),
        ),
        tables=tuple(tables),
        max_messages_per_batch=max_messages_per_batch,
    )


def _split_columns(spec: str) -> list[str]:
    """Split COL:TYPE,COL:TYPE where a type may contain commas inside parentheses (DECIMAL(9,2))."""
    parts, depth, current = [], 0, ""
    for char in spec:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return [p for p in parts if p.strip()]
