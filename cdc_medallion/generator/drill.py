"""Kill drill: `cdc-medallion ingest` SIGKILLed at random commit points while its stream grows.

A history is rendered, garbage lines are mixed in, and the stream is fed in pieces; after each
piece `ingest` runs in a subprocess with CDC_MEDALLION_KILL_AT set to a random commit point
(bronze, silver or gold). A last clean run finishes the work. `check` then holds the storage to
what a crash-safe pipeline owes: gold equal to the history's truth, every line in bronze exactly
once, every garbage line quarantined exactly once. The CI test runs it small; `bench/crash.py`
runs it on a few hundred thousand messages.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_medallion.generator import chaos
from cdc_medallion.generator.compare import diff_scd1, diff_scd2
from cdc_medallion.generator.history import History
from cdc_medallion.generator.renderers import RenderedSource, render
from cdc_medallion.names import bronze_name, quarantine_name, silver_name

SOURCE = "debezium_json"  # the source `ingest --format debezium-json` names
# Every run is a fresh JVM on a batch of a few hundred lines, where compiling each query's
# generated code costs more than running it, so the drill runs interpreted. What it tests,
# commits under SIGKILL, is the same either way.
INTERPRETED = "spark.sql.codegen.wholeStage=false spark.sql.codegen.factoryMode=NO_CODEGEN"


@dataclass
class DrillResult:
    rendered: RenderedSource
    storage: Path
    lines: int
    garbage: int
    kills: list[str] = field(default_factory=list)  # "<commit point> (<where>)" per killed run
    clean_runs: int = 0  # runs that ended before their kill point came
    seconds: float = 0.0

    def stages(self) -> Counter[str]:
        """Kills per layer: bronze, silver, gold (from the dataset each kill point names)."""

        from cdc_medallion.names import layer_of

        return Counter(layer_of(kill.split()[-1].strip("()")) for kill in self.kills)


def kill_drill(
    history: History,
    out: Path,
    pieces: int = 22,
    seed: int = 42,
    batch_size: int = 300,
    max_point: int = 24,
    timeout: float = 900,
    say: Callable[[str], None] = lambda _line: None,
) -> DrillResult:
    started = time.monotonic()
    rendered = render(history, "debezium-json", out / "clean")
    rnd = random.Random(seed)
    clean = rendered.path.read_text(encoding="utf-8").split("\n")[:-1]
    lines, garbage = chaos.malform(clean, rnd)
    feed = out / "feed.jsonl"
    feed.unlink(missing_ok=True)
    storage = out / "storage"
    command = [sys.executable, "-m", "cdc_medallion.cli", "ingest", "--format", "debezium-json"]
    command += ["--input", str(feed), "--storage", str(storage), "--layout", rendered.layout]
    command += ["--batch-size", str(batch_size), "--quiet"]
    for table, keys in rendered.keys.items():
        command += ["--key", f"{table}={','.join(keys)}"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "CDC_MEDALLION_SPARK_CONF": INTERPRETED}
    result = DrillResult(rendered, storage, len(lines), garbage)
    for number, piece in enumerate(chaos.cuts(lines, rnd, pieces), start=1):
        with feed.open("a", encoding="utf-8") as handle:  # the stream goes on between crashes
            handle.write("".join(line + "\n" for line in piece))
        point = rnd.randint(1, max_point)
        # Half the kills come a moment after their point: inside the MERGE or the write that
        # follows it, or between a batch's writes and its checkpoint's commit.
        delay = rnd.choice([0, 0, 200, 800, 1500])
        kill = {"CDC_MEDALLION_KILL_AT": str(point), "CDC_MEDALLION_KILL_DELAY_MS": str(delay)}
        run = subprocess.run(command, env={**env, **kill}, capture_output=True, text=True, timeout=timeout)
        if run.returncode not in (0, -9):
            raise RuntimeError(f"ingest run {number} exited {run.returncode}: {run.stderr[-3000:]}")
        if run.returncode == -9:
            [line] = [x for x in run.stdout.splitlines() if x.startswith("[fault injection]")][-1:]
            result.kills.append(line.rsplit("commit point ", 1)[-1])
            say(f"run {number}/{pieces}: +{len(piece):,} lines, killed at commit point {result.kills[-1]}")
        else:
            result.clean_runs += 1
            say(f"run {number}/{pieces}: +{len(piece):,} lines, finished before commit point {point}")
    final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout * 2)
    if final.returncode != 0:
        raise RuntimeError(f"the final ingest run exited {final.returncode}: {final.stderr[-3000:]}")
    result.seconds = time.monotonic() - started
    return result


def check(spark: Any, history: History, result: DrillResult) -> list[str]:
    """What is wrong with the storage after the drill, as readable lines (empty: nothing)."""
    from cdc_medallion.catalog import dataset_status, gold_dataset, read_dataset

    entries = dataset_status(result.storage)
    status = {e["name"]: e for e in entries}

    def rows(name: str | None, columns: list[str] | None = None) -> list[dict[str, Any]]:
        if name is None:
            return []
        df = read_dataset(spark, result.storage, name, entries)
        return [r.asDict(recursive=True) for r in (df.select(*columns) if columns else df).collect()]

    def gold(table: str, scd: int) -> list[dict[str, Any]]:
        return rows(gold_dataset(entries, table, scd))

    problems: list[str] = []
    for table in result.rendered.keys:
        problems += diff_scd1(history, table, gold(table, 1))
        problems += diff_scd2(history, table, gold(table, 2))
    bronze_lines = [r["_line"] for r in rows(bronze_name(SOURCE), ["_line"])]
    if len(bronze_lines) != result.lines or len(set(bronze_lines)) != result.lines:
        problems.append(
            f"bronze holds {len(bronze_lines):,} rows ({len(set(bronze_lines)):,} distinct lines) "
            f"for {result.lines:,} lines fed"
        )
    quarantine = quarantine_name(silver_name(SOURCE))
    refs = [r["bronze_ref"] for r in rows(quarantine, ["bronze_ref"])] if quarantine in status else []
    if len(refs) != len(set(refs)):
        problems.append(f"{len(refs) - len(set(refs))} quarantine rows are duplicates")
    if len(set(refs)) != result.garbage:
        problems.append(f"{len(set(refs))} messages quarantined, {result.garbage} garbage lines fed")
    silver = status[silver_name(SOURCE)]["rows"]
    if silver + len(refs) != result.lines:
        problems.append(f"silver {silver:,} + quarantine {len(refs):,} != {result.lines:,} lines")
    return problems
