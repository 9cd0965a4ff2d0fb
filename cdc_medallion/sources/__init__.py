"""Where bronze messages come from: local files here, Kafka on Databricks."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the conf loader imports `kafka_settings` from here: no import of the conf back
    from pyspark.sql import DataFrame

    from cdc_medallion.config import SourceConf


def landing_stream(source: SourceConf) -> DataFrame:
    """The source's new messages as bronze rows (BRONZE_SCHEMA).

    Locally the runner serves new lines of the input files; on Databricks this is a Kafka
    stream (see `kafka.py`), landing the same columns.
    """
    from cdc_medallion.declarative.runtime import current_reader, is_local

    if is_local():
        return current_reader().read_source(source)  # type: ignore[attr-defined]
    from cdc_medallion.sources.kafka import kafka_stream

    return kafka_stream(source)
