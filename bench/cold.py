"""A cold start: `cdc-medallion ingest` of ten Debezium messages in a fresh process, as a user
runs it once on a file. The ten messages cost next to nothing: what is timed is starting the JVM
and Spark, then every flow's first run (its queries, Delta's first commits).

The wall clock of the whole process, from before Python starts to its exit, into an empty storage
each time; `RUNS` times, the median reported. Beside it, the same for a process that only starts
the engine's Spark session and counts one row (`spark_start_s`): the part of a cold ingest that
no change to the pipeline can remove. The engine is the one at `root` (its code first on
PYTHONPATH, this virtualenv's Python), so the old engine is timed the same way.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cdc_medallion.lines import lines_of

MESSAGES = 10
RUNS = 3
FORMAT = "debezium-json"


def ten_messages(folder: Path) -> Path:
    """The first ten messages of a small generated Debezium stream (one table), made once."""
    from bench.workloads import input_files, workload

    messages = folder / f"{FORMAT}-{MESSAGES}.jsonl"
    if not messages.is_file():
        work = workload(folder / "inputs", FORMAT, 4 * MESSAGES, tables=1, say=lambda _line: None)
        lines = lines_of(input_files(work.rendered.path)[0].read_bytes(), keepends=True)[:MESSAGES]
        folder.mkdir(parents=True, exist_ok=True)
        messages.write_bytes(b"".join(lines))
    return messages


def command(messages: Path, storage: Path) -> list[str]:
    ingest = [sys.executable, "-m", "cdc_medallion.cli", "ingest", "--format", FORMAT]
    return [*ingest, "--input", str(messages), "--storage", str(storage), "--quiet"]


SPARK_ONLY = "from cdc_medallion.spark import get_spark; get_spark().range(1).count()"


def measure(root: Path, folder: Path, runs: int = RUNS, say=print, timeout: float = 900) -> dict[str, Any]:
    from bench.engine import environment

    messages = ten_messages(folder.resolve())
    storage = folder.resolve() / "storage"
    env = environment(root)

    def timed(argv: list[str]) -> float:
        shutil.rmtree(storage, ignore_errors=True)
        started = time.monotonic()
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{argv[1:4]} at {root} exited {done.returncode}: {tail[:300]}")
        return seconds

    ingest = [timed(command(messages, storage)) for _ in range(runs)]
    spark = [timed([sys.executable, "-c", SPARK_ONLY]) for _ in range(runs)]
    shutil.rmtree(storage, ignore_errors=True)
    result = {
        "messages": MESSAGES,
        "format": FORMAT,
        "seconds": round(statistics.median(ingest), 2),
        "runs_s": [round(s, 2) for s in ingest],
        "spark_start_s": round(statistics.median(spark), 2),
        "spark_start_runs_s": [round(s, 2) for s in spark],
    }
    say(
        f"cold: ingest of {MESSAGES} messages in a fresh process {result['seconds']}s (median of {result['runs_s']}); "
        f"a process that only starts Spark {result['spark_start_s']}s (of {result['spark_start_runs_s']})"
    )
    return result
