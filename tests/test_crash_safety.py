"""Crash safety on a live stream: every run is killed with SIGKILL at a random commit point
(bronze, silver or gold) while new messages keep arriving; after a final clean run, gold equals
the ground truth, bronze holds every message exactly once and no quarantine row is duplicated."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

from cdc_medallion.generator import chaos
from cdc_medallion.generator.compare import diff_scd1, diff_scd2
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import render
from tests.conftest import REPO
from tests.helpers import datasets, gold_rows, read_rows

ITERATIONS = 22
HISTORY = generate_history(tables=3, transactions=600, seed=23)


def test_sigkill_at_random_commit_points(spark, tmp_path):
    rendered = render(HISTORY, "debezium-json", tmp_path / "clean")
    rnd = random.Random(42)
    lines, garbage = chaos.malform(rendered.path.read_text(encoding="utf-8").split("\n")[:-1], rnd)
    feed = tmp_path / "feed.jsonl"
    storage = tmp_path / "storage"
    conf = tmp_path / "conf.yml"
    tables = "\n".join(f"  - {{source: db, table: {t}, keys: [{', '.join(k)}]}}" for t, k in rendered.keys.items())
    conf.write_text(
        f"pipeline: {{name: crash, storage: {storage}, transformations: {REPO / 'transformations'}, "
        f"expectations: {REPO / 'expectations'}, max_messages_per_batch: 300}}\n"
        f"sources: [{{name: db, format: debezium-json, input: {{path: {feed}, layout: kafka-dump}}}}]\n"
        f"tables:\n{tables}\n",
        encoding="utf-8",
    )
    command = [sys.executable, "-m", "cdc_medallion.cli", "run", "--conf", str(conf), "--quiet", "--no-quality"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    kills = []
    for piece in chaos.cuts(lines, rnd, ITERATIONS):
        with feed.open("a", encoding="utf-8") as handle:  # the stream goes on between crashes
            handle.write("".join(line + "\n" for line in piece))
        point = rnd.randint(1, 24)
        result = subprocess.run(
            command, env={**env, "CDC_MEDALLION_KILL_AT": str(point)}, capture_output=True, text=True, timeout=600
        )
        assert result.returncode in (0, -9), result.stderr[-3000:]
        if result.returncode == -9:
            kills.append(result.stdout.strip().rsplit("(", 1)[-1].rstrip(")"))
    final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0, final.stderr[-3000:]

    assert len(kills) >= 20, kills
    stages = Counter(where.split()[-1].split("_")[0] for where in kills)  # bronze / silver / gold
    assert {"bronze", "silver", "gold"} <= set(stages), stages
    problems = []
    for table in rendered.keys:
        problems += diff_scd1(HISTORY, table, gold_rows(spark, storage, table, 1))
        problems += diff_scd2(HISTORY, table, gold_rows(spark, storage, table, 2))
    assert not problems, "\n".join(problems[:20])
    bronze = read_rows(spark, storage, "bronze_db")
    assert len(bronze) == len(lines)
    assert len({(r["_line"]) for r in bronze}) == len(lines)  # every line landed exactly once
    quarantined = [r["bronze_ref"] for r in read_rows(spark, storage, "silver_db_quarantine")]
    assert len(quarantined) == len(set(quarantined)) == garbage
    assert datasets(storage)["silver_db"]["rows"] + garbage == len(lines)
