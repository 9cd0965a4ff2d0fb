"""Helpers shared by tests: run the pipeline in-process, read gold, parse expected changelogs."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from cdc_medallion.adhoc import adhoc_conf
from cdc_medallion.catalog import all_rows, dataset_status, gold_dataset
from cdc_medallion.config import PipelineConf
from cdc_medallion.formats import get_format
from cdc_medallion.formats.message import BronzeMessage
from cdc_medallion.generator.renderers import RenderedSource
from cdc_medallion.identifiers import dataset_part
from cdc_medallion.pipeline import RunSummary, run_pipeline
from cdc_medallion.runner.local import LocalRunner


def ingest(
    spark: Any,
    fmt: str,
    input_path: Path,
    storage: Path,
    keys: dict[str, str] | None = None,
    columns: dict[str, str] | None = None,
    layout: str | None = None,
    topic: str | None = None,
    options: dict[str, str] | None = None,
    batch_size: int = 200_000,
    quality: bool = False,
) -> RunSummary:
    """What `cdc-medallion ingest` does, in-process (the CLI itself is tested in test_cli.py)."""
    conf = adhoc_conf(
        fmt=fmt,
        input_path=input_path,
        storage=storage,
        keys=[f"{t}={c}" for t, c in (keys or {}).items()],
        columns=[f"{t}={c}" for t, c in (columns or {}).items()],
        layout=layout,
        topic=topic,
        options=[f"{k}={v}" for k, v in (options or {}).items()],
        max_messages_per_batch=batch_size,
    )
    return run_pipeline(conf, spark=spark, quality=quality)


def land_and_parse(conf: PipelineConf, spark: Any) -> None:
    """Bronze and silver only (a run's first update), for tests that look at nothing after
    silver: gold's applies are most of what a run costs."""
    LocalRunner(dataclasses.replace(conf, tables=()), spark).update(partial_graph=True)


def source_of(fmt: str) -> str:
    """The source name `adhoc_conf` gives a format."""
    return fmt.replace("-", "_")


def gold_of(fmt: str, table: str) -> str:
    """In a pipeline of several rendered sources, each source's gold tables carry its name."""
    return f"{source_of(fmt)}_{dataset_part(table)}"


def rendered_pipeline(rendered: list[RenderedSource], storage: Path) -> PipelineConf:
    """One pipeline with a source per rendered format, its tables named by `gold_of`."""
    sources, tables = [], []
    for one in rendered:
        conf = adhoc_conf(
            fmt=one.format,
            input_path=one.path,
            storage=storage,
            keys=[f"{t}={','.join(k)}" for t, k in one.keys.items()],
            columns=[f"{t}={','.join(f'{c}:{v}' for c, v in cols.items())}" for t, cols in one.columns.items()],
            layout=one.layout,
        )
        [source] = conf.sources
        sources.append(source.model_copy(update={"options": {**source.options, **one.options}}))
        tables += [dataclasses.replace(t, name=gold_of(one.format, t.table)) for t in conf.tables]
    return dataclasses.replace(conf, sources=tuple(sources), tables=tuple(tables))


def datasets(storage: Path) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in dataset_status(storage)}


def gold_name(storage: Path, source_table: str, scd_type: int) -> str:
    status = dataset_status(storage)
    name = gold_dataset(status, source_table, scd_type)
    assert name is not None, f"no SCD{scd_type} gold table for {source_table} in {storage}: {status}"
    return name


def read_rows(spark: Any, storage: Path, name: str) -> list[dict[str, Any]]:
    """The rows the pipeline (on Spark) wrote, read as `show` reads them: by delta-rs where
    test_jvm_free_reads.py shows it reads what Spark reads, else by Spark."""
    return all_rows(storage, name, spark)


def gold_rows(spark: Any, storage: Path, source_table: str, scd_type: int = 1) -> list[dict[str, Any]]:
    return read_rows(spark, storage, gold_name(storage, source_table, scd_type))


_ROW = re.compile(r"^([+-][IUD])\((.*)\)$")


def changelog_state(rows: list[str], columns: list[str], key: str) -> tuple[dict[str, list[str]], int]:
    """Final state implied by Flink-style changelog rows `+I(...)`, and the number of +I/+U.

    Values are split on ',' with surrounding spaces trimmed (SeaTunnel writes ', '); the
    fixtures' values contain no commas except where noted by the caller.
    """
    state: dict[str, list[str]] = {}
    versions = 0
    for row in rows:
        match = _ROW.match(row)
        assert match, row
        kind, body = match.groups()
        values = _split(body, len(columns))
        identity = values[columns.index(key)]
        if kind in ("+I", "+U"):
            state[identity] = values
            versions += 1
        elif kind == "-D":
            state.pop(identity, None)
    return state, versions


def _split(body: str, count: int) -> list[str]:
    parts = body.split(",")
    if len(parts) != count:
        raise AssertionError(f"cannot split {body!r} into {count} values")
    return [p.strip() if p.strip() else p for p in parts]


def timeless(column: str, value: Any) -> Any:
    """A value as two runs of the same messages share it: a heartbeat's `detail` less its lag,
    which is measured from the time it landed."""
    if column == "detail" and isinstance(value, str) and '"lag_seconds"' in value:
        detail = json.loads(value)
        detail.pop("lag_seconds", None)
        return json.dumps(detail, sort_keys=True)
    return value


def load_expected(path: Path) -> dict[str, Any]:
    return json.loads(path.with_name(path.name + ".expected.json").read_text(encoding="utf-8"))


def message(
    value: bytes | str | None, key: bytes | str | None = None, topic: str | None = None, line: int = 0
) -> BronzeMessage:
    """A bronze message as the parser sees it (for parser-level tests)."""
    encode = lambda v: v.encode("utf-8") if isinstance(v, str) else v  # noqa: E731
    return BronzeMessage(
        value=encode(value),
        key=encode(key),
        topic=topic,
        partition=None,
        offset=None,
        timestamp=None,
        headers=(),
        file="test.jsonl",
        line=line,
        ingest_ts=None,
        landing_error=None,
    )


def parse(fmt: str, value: bytes | str | None, **kwargs: Any) -> list[dict[str, Any]]:
    """The events one message becomes (errors included, as the pipeline quarantines them)."""
    options = kwargs.pop("options", None)
    return get_format(fmt)("test", options).events_for(message(value, **kwargs))
