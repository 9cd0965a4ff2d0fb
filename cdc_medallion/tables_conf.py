"""`cdc-medallion discover`: a conf's `tables:` section from sample messages.

A Lakeflow pipeline declares gold before any message arrives, so on Databricks every table must
be listed with its key and columns (conf/databricks.yml). Nobody lists 200 tables by hand: this
parses sample messages of one format with that format's parser, scans the events with the same
discovery the local runner uses (`discovery.tables_in`), and writes each table's key, its columns
in message order and their Spark types. Where the messages do not say, it guesses and says so in
a YAML comment: a column without a type is `string`, a table whose messages name no key gets its
first column as key. Merging into a conf adds the tables it does not list yet and leaves every
listed one as written (with its comments): the file is edited as text, then loaded to check it.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_medallion.config import InputConf, PipelineConf, SourceConf, TableConf, load_conf
from cdc_medallion.errors import ConfigError
from cdc_medallion.formats import format_names, get_format
from cdc_medallion.parsing.execute import parse

GUESSED_TYPE = "guessed: the messages give no type"
GUESSED_KEY = "guessed: the messages name no key; check it"


@dataclass(frozen=True)
class TableEntry:
    """One table as the conf will list it, with the reasons for what was guessed."""

    source: str
    table: str
    keys: tuple[str, ...]
    columns: dict[str, str]
    name: str | None = None
    guessed_key: bool = False
    guessed_types: frozenset[str] = frozenset()


def sample_source(
    fmt: str,
    path: Path,
    conf: PipelineConf | None = None,
    source_name: str | None = None,
    layout: str | None = None,
    topic: str | None = None,
    options: dict[str, str] | None = None,
) -> SourceConf:
    """The source the samples are read as: the conf's source of that name or format (its format
    options, such as IBM's column lists, apply), with the sample file as its input."""
    from cdc_medallion.adhoc import detect_layout

    if fmt not in format_names():
        raise ConfigError(f"--format {fmt!r}: unknown format (known: {', '.join(format_names())})")
    if not path.exists():
        raise ConfigError(f"--input {path}: no such file or directory")
    configured = _conf_source(conf, fmt, source_name) if conf is not None else None
    merged = {**(configured.options if configured else {}), **(options or {})}
    name = configured.name if configured else source_name or fmt.replace("-", "_")
    get_format(fmt)(name, merged)  # unknown options fail here, before Spark starts
    return SourceConf(
        name=name,
        format=fmt,
        input=InputConf(path=path.resolve(), layout=layout or detect_layout(path)),
        topic=topic or (configured.topic if configured else None),
        options=merged,
    )


def _conf_source(conf: PipelineConf, fmt: str, name: str | None) -> SourceConf:
    if name is not None:
        source = next((s for s in conf.sources if s.name == name), None)
        if source is None:
            raise ConfigError(f"--source {name!r}: {conf.conf_file} has no such source")
        if source.format != fmt:
            raise ConfigError(f"--source {name!r} is {source.format}, not {fmt}")
        return source
    matching = [s for s in conf.sources if s.format == fmt]
    if len(matching) != 1:
        found = ", ".join(s.name for s in matching) or "none"
        raise ConfigError(
            f"{conf.conf_file}: sources of format {fmt}: {found}; add the source to the conf first, "
            "or name one with --source"
        )
    return matching[0]


def discover_tables(spark: Any, source: SourceConf) -> list[TableEntry]:
    """Every table the samples hold, with key, ordered columns and types (guesses marked)."""
    from cdc_medallion.discovery import tables_in
    from cdc_medallion.model import BRONZE_SCHEMA
    from cdc_medallion.sources.files import FileLanding

    landing = FileLanding(source)
    batch = landing.next_batch()
    bronze = spark.createDataFrame(batch.to_arrow(), schema=BRONZE_SCHEMA)
    while True:  # everything the input holds, however many landing batches that is
        following = landing.next_batch(batch.offset)
        if not following.messages:
            break
        bronze = bronze.unionByName(spark.createDataFrame(following.to_arrow(), schema=BRONZE_SCHEMA))
        batch = following
    events = parse(get_format(source.format)(source.name, source.options), bronze)
    seen = tables_in(events, source.name)
    schemas = Counter(t.table.lower() for t in seen)
    entries = []
    for table in seen:
        if not table.columns:
            continue  # only key messages: nothing to type
        ambiguous = table.schema is not None and schemas[table.table.lower()] > 1  # one name, several schemas
        qualified = f"{table.schema}.{table.table}" if ambiguous else table.table
        columns = {c: t or "string" for c, t in table.columns.items()}
        entries.append(
            TableEntry(
                source=source.name,
                table=qualified,
                keys=table.keys or (next(iter(columns)),),
                columns=columns,
                guessed_key=not table.keys,
                guessed_types=frozenset(c for c, t in table.columns.items() if not t),
            )
        )
    return entries


def named_apart(entries: list[TableEntry], listed: tuple[TableConf, ...]) -> list[TableEntry]:
    """Entries whose gold table name is taken (by a listed table or an earlier entry) get
    `name: <source>_<table>`, since two tables may not share gold tables."""
    taken = {t.gold_name for t in listed}
    named = []
    for entry in entries:
        gold = TableConf(entry.source, entry.table, entry.keys).gold_name
        if gold in taken:
            entry = TableEntry(**{**entry.__dict__, "name": f"{entry.source}_{entry.table.split('.')[-1]}"})
            gold = TableConf(entry.source, entry.table, entry.keys, name=entry.name).gold_name
        taken.add(gold)
        named.append(entry)
    return named


# --- YAML text ----------------------------------------------------------------------------------
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.()$#]*(?:,[0-9]+\))?$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def scalar(value: str) -> str:
    """A string as YAML: plain when that reads back as the same string, JSON-quoted otherwise."""
    if _PLAIN.match(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value, ensure_ascii=False)


def render(entries: list[TableEntry]) -> str:
    """The entries as items of a `tables:` list (indented two spaces), with the guesses commented."""
    lines = []
    for entry in entries:
        lines.append(f"  - source: {scalar(entry.source)}")
        lines.append(f"    table: {scalar(entry.table)}")
        if entry.name:
            lines.append(f"    name: {scalar(entry.name)} # its plain name is another table's")
        keys = "[" + ", ".join(scalar(k) for k in entry.keys) + "]"
        lines.append(f"    keys: {keys}" + (f" # {GUESSED_KEY}" if entry.guessed_key else ""))
        lines.append("    columns:")
        for column, spark_type in entry.columns.items():
            comment = f" # {GUESSED_TYPE}" if column in entry.guessed_types else ""
            lines.append(f"      {scalar(column)}: {scalar(spark_type)}{comment}")
    return "\n".join(lines) + "\n"


_TABLES_KEY = re.compile(r"^tables:[ \t]*(#.*)?$", re.MULTILINE)
_TOP_LEVEL = re.compile(r"^[^\s#-]", re.MULTILINE)


def merge_into(conf_path: Path, entries: list[TableEntry]) -> tuple[list[TableEntry], list[TableEntry]]:
    """Add the entries the conf does not list yet at the end of its `tables:` section.

    Returns (added, already listed). The conf is loaded again before it replaces the file, so a
    merge never leaves a conf that does not load."""
    conf = load_conf(conf_path)
    listed = [e for e in entries if any(t.source == e.source and t.matches(None, e.table) for t in conf.tables)]
    added = named_apart([e for e in entries if e not in listed], conf.tables)
    if not added:
        return [], listed
    text = conf_path.read_text(encoding="utf-8")
    block = render(added)
    match = _TABLES_KEY.search(text)
    if match is None:
        text = text.rstrip("\n") + "\n\ntables:\n" + block
    else:
        following = _TOP_LEVEL.search(text, match.end())
        end = following.start() if following else len(text)
        section = text[:end].rstrip("\n")
        text = section + "\n" + block + ("\n" + text[end:] if following else "")
    partial = conf_path.with_name(f".{conf_path.name}.discover")
    partial.write_text(text, encoding="utf-8")
    try:
        load_conf(partial)
    except ConfigError as error:
        partial.unlink()
        raise ConfigError(f"{conf_path}: the merged tables would not load ({error}); the conf is unchanged") from None
    os.replace(partial, conf_path)
    return added, listed
