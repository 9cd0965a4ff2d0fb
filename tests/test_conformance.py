"""One history, every format: gold must equal the generator's ground truth.

Each format with a renderer (cdc_medallion/generator/renderers/) writes the same history by
its vendor's conventions; one pipeline run ingests all of them, a source each; for every format
and keyed table, SCD1 must equal the final state and SCD2 the history of versions. The line
formats get chaos on the way (redelivered messages, interleaved partitions, 1% garbage); DTS
Avro, binary, arrives clean. A stream resumed mid-way is the crash drill's and the stateful
tests' (test_crash_safety.py, test_stateful_split.py, the formats' across-runs tests).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from cdc_medallion.generator import chaos
from cdc_medallion.generator.compare import diff_scd1, diff_scd2
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import RENDERERS, RenderedSource, render
from cdc_medallion.pipeline import run_pipeline
from tests.helpers import datasets, gold_of, read_rows, rendered_pipeline, source_of

# One worker runs the module, so the pipeline of all formats runs once.
pytestmark = pytest.mark.xdist_group("conformance")

HISTORY = generate_history(tables=3, transactions=30, seed=11)
CHAOS_FORMATS = frozenset(f for f in RENDERERS if f != "dts-avro")  # formats of one message per line
RUNS = 1


@dataclasses.dataclass
class Feed:
    rendered: RenderedSource
    pieces: list[list[str]]
    noisy: int = 0
    garbage: int = 0


def feed_of(fmt: str, root: Path) -> Feed:
    rendered = render(HISTORY, fmt, root / "clean" / fmt)
    if fmt not in CHAOS_FORMATS:
        return Feed(rendered, [])
    rnd = random.Random(5)
    lines = rendered.path.read_text(encoding="utf-8").split("\n")[:-1]  # one message per "\n"-ended line
    noisy, garbage = chaos.malform(chaos.redeliver(chaos.interleave(lines, rnd), rnd), rnd)
    feed = root / "feed" / fmt / rendered.path.name
    feed.parent.mkdir(parents=True)
    feed.touch()
    return Feed(dataclasses.replace(rendered, path=feed), chaos.cuts(noisy, rnd, RUNS), len(noisy), garbage)


@pytest.fixture(scope="module")
def ingested(spark, tmp_path_factory) -> tuple[Path, dict[str, Feed]]:
    root = tmp_path_factory.mktemp("conformance")
    storage = root / "storage"
    feeds = {fmt: feed_of(fmt, root) for fmt in sorted(RENDERERS)}
    conf = rendered_pipeline([feed.rendered for feed in feeds.values()], storage)
    for run in range(RUNS):
        for feed in feeds.values():
            if run < len(feed.pieces):
                with feed.rendered.path.open("a", encoding="utf-8") as handle:
                    handle.write("".join(line + "\n" for line in feed.pieces[run]))
        run_pipeline(conf, spark=spark)
    return storage, feeds


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_gold_equals_ground_truth(spark, ingested, fmt):
    storage, feeds = ingested
    problems = []
    for table in feeds[fmt].rendered.keys:
        gold = gold_of(fmt, table)
        problems += diff_scd1(HISTORY, table, read_rows(spark, storage, f"gold_{gold}"))
        problems += diff_scd2(HISTORY, table, read_rows(spark, storage, f"gold_{gold}_history"))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("fmt", sorted(CHAOS_FORMATS))
def test_chaos_lands_every_line_once_and_quarantines_each_garbage_line(spark, ingested, fmt):
    storage, feeds = ingested
    feed = feeds[fmt]
    assert len(feed.pieces) == RUNS
    quarantined = read_rows(spark, storage, f"silver_{source_of(fmt)}_quarantine")
    assert len(quarantined) == feed.garbage >= 1
    assert datasets(storage)[f"bronze_{source_of(fmt)}"]["rows"] == feed.noisy


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
