"""Bronze: every message lands, byte-exact, with its transport metadata. Nothing is dropped here."""

from __future__ import annotations

from cdc_medallion import dp
from cdc_medallion.config import PipelineConf, SourceConf
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.names import bronze_name
from cdc_medallion.sources import landing_stream


def define_source(source: SourceConf) -> None:
    @dp.table(
        name=bronze_name(source.name),
        comment=f"Raw {source.format} messages of source {source.name}, byte-exact",
        table_properties={"layer": "bronze", "source": source.name, "format": source.format},
        schema=BRONZE_SCHEMA,
    )
    def land():
        return landing_stream(source)


def define(conf: PipelineConf) -> None:
    for source in conf.sources:
        define_source(source)
