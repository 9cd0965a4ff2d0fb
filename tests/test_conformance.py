"""One history, every format: gold must equal the generator's ground truth.

Each format with a renderer (cdc_medallion/generator/renderers/) writes the same history by
its vendor's conventions; the pipeline ingests it; SCD1 must equal the final state and SCD2
the history of versions, for every keyed table.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from cdc_medallion.adhoc import adhoc_conf
from cdc_medallion.generator import chaos
from cdc_medallion.generator.compare import diff_scd1, diff_scd2
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import RENDERERS, render
from cdc_medallion.pipeline import run_pipeline
from tests.helpers import datasets, gold_rows, read_rows

HISTORY = generate_history(tables=3, transactions=30, seed=11)
CHAOS_FORMATS = frozenset(f for f in RENDERERS if f != "dts-avro")  # formats of one message per line


def ingest_rendered(spark, rendered, storage):
    conf = adhoc_conf(
        fmt=rendered.format,
        input_path=rendered.path,
        storage=storage,
        keys=[f"{t}={','.join(k)}" for t, k in rendered.keys.items()],
        columns=[f"{t}={','.join(f'{c}:{v}' for c, v in cols.items())}" for t, cols in rendered.columns.items()],
        layout=rendered.layout,
    )
    source = dataclasses.replace(conf.sources[0], options={**conf.sources[0].options, **rendered.options})
    return run_pipeline(dataclasses.replace(conf, sources=(source,)), spark=spark)


# Clean input for the format the chaos test cannot take (DTS Avro is binary, not lines); every
# other format's clean input is the chaos test's input less its noise, so it is not run twice.
@pytest.mark.parametrize("fmt", sorted(f for f in RENDERERS if f not in CHAOS_FORMATS))
def test_gold_equals_ground_truth(spark, tmp_path, fmt):
    rendered = render(HISTORY, fmt, tmp_path / "input")
    ingest_rendered(spark, rendered, tmp_path / "storage")
    problems = []
    for table in rendered.keys:
        problems += diff_scd1(HISTORY, table, gold_rows(spark, tmp_path / "storage", table, 1))
        problems += diff_scd2(HISTORY, table, gold_rows(spark, tmp_path / "storage", table, 2))
    assert not problems, "\n".join(problems)


def test_the_history_exercises_every_kind_of_change():
    ops = {change.op for tx in HISTORY.transactions for change in tx.changes}
    assert ops == {"SNAPSHOT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "DDL"}
    moved = [
        c
        for tx in HISTORY.transactions
        for c in tx.changes
        if c.op == "UPDATE" and any(c.before[k] != c.after[k] for k in HISTORY.table(c.table).keys)
    ]
    assert moved, "an update that changes a key"
    assert any(not t.keys for t in HISTORY.tables), "a table without a primary key"


@pytest.mark.parametrize("fmt", sorted(CHAOS_FORMATS))
def test_gold_equals_ground_truth_under_chaos(spark, tmp_path, fmt):
    """Redelivered messages, interleaved partitions, 1% garbage, and the stream cut into 2 runs
    (resuming mid-stream; the crash test resumes 20+ times)."""
    rendered = render(HISTORY, fmt, tmp_path / "clean")
    rnd = random.Random(5)
    lines = rendered.path.read_text(encoding="utf-8").split("\n")[:-1]  # one message per "\n"-ended line
    noisy, garbage = chaos.malform(chaos.redeliver(chaos.interleave(lines, rnd), rnd), rnd)
    feed = tmp_path / "feed" / rendered.path.name
    feed.parent.mkdir()
    storage = tmp_path / "storage"
    chaotic = dataclasses.replace(rendered, path=feed)
    for piece in chaos.cuts(noisy, rnd, 2):
        with feed.open("a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in piece))
        ingest_rendered(spark, chaotic, storage)
    problems = []
    for table in rendered.keys:
        problems += diff_scd1(HISTORY, table, gold_rows(spark, storage, table, 1))
        problems += diff_scd2(HISTORY, table, gold_rows(spark, storage, table, 2))
    assert not problems, "\n".join(problems)
    source = rendered.format.replace("-", "_")
    quarantined = read_rows(spark, storage, f"silver_{source}_quarantine")
    assert len(quarantined) == garbage
    assert datasets(storage)[f"bronze_{source}"]["rows"] == len(noisy)
