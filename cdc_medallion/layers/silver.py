"""Silver: each source's messages parsed into the unified event model, under expectations.

Rows failing a quarantine rule go to `silver_<source>_quarantine` with the rule names, so
every bronze message is in exactly one of silver (by `kind`) or quarantine.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_medallion import dp
from cdc_medallion.config import PipelineConf, SourceConf
from cdc_medallion.declarative.runtime import current_reader
from cdc_medallion.formats import get_format
from cdc_medallion.layers import bronze_name, silver_name
from cdc_medallion.model import EVENT_SCHEMA, KIND_HEARTBEAT, KIND_HELD, KIND_SCHEMA_CHANGE, bronze_ref_column
from cdc_medallion.quality.rules import load_rules

SCHEMA_CHANGES = "silver_schema_changes"
HEARTBEATS = "silver_heartbeats"


def define_source(conf: PipelineConf, source: SourceConf) -> None:
    parser = get_format(source.format)(source.name, source.options)
    rules = load_rules(conf.expectations, "silver", source.format, EVENT_SCHEMA)

    @dp.table(
        name=silver_name(source.name),
        comment=f"Unified change events parsed from {source.format} (source {source.name})",
        table_properties={"layer": "silver", "source": source.name, "format": source.format},
        schema=EVENT_SCHEMA,
    )
    @dp.expectations_from(rules)
    def parse():
        new = dp.read_stream(bronze_name(source.name))
        if not parser.stateful:
            return parser.parse(new)
        held, context = previous_state(source, parser.context_kinds)
        return parser.parse(new if held is None else new.unionByName(held), context)


def previous_state(source: SourceConf, context_kinds: tuple[str, ...]) -> tuple[DataFrame | None, list[dict]]:
    """For stateful formats: the bronze messages still held, and earlier events as context.

    A message is held while its latest outcome is a `held` event: once a later event names it
    (`bronze_ref` or `related_refs`), or it is quarantined (e.g. timed out), it is resolved.
    """
    reader = current_reader()
    if not hasattr(reader, "read_previous"):
        raise NotImplementedError(
            f"format {source.format} keeps state across batches, which needs the local runner for now"
        )
    silver = silver_name(source.name)
    previous = reader.read_previous(silver)
    if previous is None:
        return None, []
    quarantine = reader.read_previous(f"{silver}_quarantine")

    def refs(events: DataFrame) -> DataFrame:
        every = F.concat(F.array("bronze_ref"), F.coalesce("related_refs", F.array().cast("array<string>")))
        return events.select(F.explode(every).alias("__ref"))

    resolved = refs(previous.filter(F.col("kind") != KIND_HELD))
    if quarantine is not None:
        resolved = resolved.unionByName(refs(quarantine))
    still_held = (
        previous.filter(F.col("kind") == KIND_HELD)
        .select(F.col("bronze_ref").alias("__ref"))
        .distinct()
        .join(resolved, "__ref", "left_anti")
    )
    held = (
        dp.read(bronze_name(source.name))
        .withColumn("__ref", bronze_ref_column())
        .join(still_held, "__ref", "left_semi")
        .drop("__ref")
    )
    context = []
    if context_kinds:
        rows = previous.filter(F.col("kind").isin(*context_kinds)).collect()
        context = [row.asDict(recursive=True) for row in rows]
    return held, context


def define_side_tables(conf: PipelineConf) -> None:
    """Schema changes and heartbeats of all sources, each in one table."""
    for name, kind in ((SCHEMA_CHANGES, KIND_SCHEMA_CHANGE), (HEARTBEATS, KIND_HEARTBEAT)):
        dp.create_streaming_table(name=name, table_properties={"layer": "silver"}, schema=EVENT_SCHEMA)
        for source in conf.sources:
            _append_kind(name, kind, source.name)


def _append_kind(target: str, kind: str, source: str) -> None:
    @dp.append_flow(target=target, name=f"{target}_from_{source}")
    def select():
        return dp.read_stream(silver_name(source)).filter(F.col("kind") == kind)


def define(conf: PipelineConf) -> None:
    for source in conf.sources:
        define_source(conf, source)
    define_side_tables(conf)
