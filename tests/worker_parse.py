"""Silver parse of each conf's sources, run by `tests/test_worker_env.py` in a lean interpreter.

The interpreter (driver and Spark's Python workers alike) has only what a Databricks pipeline
has: the runtime's own packages (pyspark, pyarrow, pandas, numpy) and the project's wheel with
its core dependencies. An import the core does not declare fails the Spark job, so this script
exits non-zero. Prints one JSON object: source name -> sorted [kind, op, source_table, error] rows.

Usage: python worker_parse.py CONF [CONF ...]
"""

from __future__ import annotations

import json
import sys


def main(confs: list[str]) -> int:
    from pyspark.sql import SparkSession

    # What the pipeline's driver imports to declare the graph (transformations/*.py), and what the
    # report job runs (`cdc-medallion report --event-log-table`), with the same environment.
    import cdc_medallion.cli
    import cdc_medallion.layers.bronze
    import cdc_medallion.layers.gold
    import cdc_medallion.layers.silver  # noqa: F401
    from cdc_medallion.config import load_conf
    from cdc_medallion.formats import get_format
    from cdc_medallion.model import BRONZE_SCHEMA
    from cdc_medallion.parsing.execute import parse
    from cdc_medallion.quality.report import render_index
    from cdc_medallion.sources.files import FileLanding

    # The report job renders with the core's jinja2, from the templates the wheel ships.
    if "</html>" not in render_index([], None, "worker environment"):
        raise SystemExit("the quality report rendered no page")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("cdc-medallion-worker-env")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    results: dict[str, list[list[str | None]]] = {}
    for path in confs:
        for source in load_conf(path).sources:
            bronze = spark.createDataFrame(FileLanding(source).next_batch().to_arrow(), schema=BRONZE_SCHEMA)
            events = parse(get_format(source.format)(source.name, source.options), bronze)
            rows = events.select("kind", "op", "source_table", "error").collect()
            results[source.name] = sorted([list(r) for r in rows], key=lambda r: [str(v) for v in r])
    spark.stop()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
