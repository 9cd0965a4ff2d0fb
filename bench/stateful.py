"""Silver's parse of a stateful format as the pipeline runs it: a stream through the state store.

`bench/ours.py` times a stateful format as a batch (`applyInPandas`, nothing kept); this times
the streaming query silver runs, through the format's state store operator, from a fresh
checkpoint each time: bronze landed once into a Delta table of `--files` files, read one file a
micro-batch, parsed, written to `noop`. It prints every run, so the spread on a shared machine
shows, and the best. Run it with another checkout first on `PYTHONPATH` to time that code on
the same input:

    python -m bench.stateful --conf GENERATED/conf.yml --source ibm_qrep_delimited --runs 3
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from cdc_medallion.config import load_conf
from cdc_medallion.formats import get_format
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.parsing.execute import parse
from cdc_medallion.sources.files import FileLanding
from cdc_medallion.spark import get_spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conf", required=True, help="a conf (e.g. `cdc-medallion generate`'s conf.yml)")
    parser.add_argument("--source", required=True, help="the source to parse")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", default="1", help="bronze files, one per micro-batch (a list: 1,10)")
    args = parser.parse_args()
    conf = load_conf(args.conf)
    [source] = [s for s in conf.sources if s.name == args.source]
    spark = get_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-stateful-"))
    try:
        landed = FileLanding(source, max_messages=10_000_000).next_batch().to_arrow()
        for files in (int(n) for n in args.files.split(",")):
            bronze = str(work / f"bronze-{files}")
            rows = spark.createDataFrame(landed, schema=BRONZE_SCHEMA).repartitionByRange(files, "offset", "_line")
            rows.sortWithinPartitions("offset", "_line").write.format("delta").save(bronze)
            times = [_run(spark, source, bronze, work / f"checkpoint-{files}-{n}") for n in range(args.runs)]
            print(f"{source.format}: {landed.num_rows:,} messages, {files} micro-batch(es)", flush=True)
            print("  runs: " + ", ".join(f"{t:.2f}s" for t in times) + f"; best {min(times):.2f}s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(spark, source, bronze: str, checkpoint: Path) -> float:
    parser = get_format(source.format)(source.name, source.options)
    stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(bronze)
    events = parse(parser, stream)
    started = time.monotonic()
    query = (
        events.writeStream.foreachBatch(lambda batch, _: batch.write.format("noop").mode("overwrite").save())
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.monotonic() - started


if __name__ == "__main__":
    main()
