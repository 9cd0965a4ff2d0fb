"""Silver: each source's messages parsed into the unified event model, under expectations.

Rows failing a quarantine rule go to `silver_<source>_quarantine` with the rule names, so
every bronze message is in exactly one of silver (by `kind`) or quarantine.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from cdc_medallion import dp
from cdc_medallion.config import PipelineConf, SourceConf
from cdc_medallion.formats import get_format
from cdc_medallion.model import EVENT_SCHEMA, KIND_HEARTBEAT, KIND_SCHEMA_CHANGE
from cdc_medallion.names import HEARTBEATS, SCHEMA_CHANGES, bronze_name, silver_name
from cdc_medallion.parsing import execute
from cdc_medallion.quality.rules import load_rules


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
        return execute.parse(parser, dp.read_stream(bronze_name(source.name)))


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
