"""The stateful formats fed the same bronze in one micro-batch or cut into several.

Qlik (metadata before data), DataWorks (before and after halves) and IBM Q Rep (segments of a
transaction) hold messages in the state of their silver operator until what completes them
arrives. The same operator runs locally and on Databricks. Here the same messages land once in
one micro-batch and once in two or more, cut at half the largest input (the landing bound
`max_bytes_per_batch`, which silver's stream follows): silver must hold the same events (less the
`held` notices of messages a cut left waiting, each completed later) and gold the same rows, and
both gold the ground truth.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_medallion.config import PipelineConf
from cdc_medallion.generator.compare import diff_scd1, diff_scd2
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import RenderedSource, render
from cdc_medallion.pipeline import run_pipeline
from tests.helpers import datasets, gold_of, read_rows, rendered_pipeline, timeless

# A history per format, of about the same size in each format's messages (25-40 KB), so that one
# landing bound cuts each into about as many micro-batches. One table: every micro-batch costs
# a MERGE per gold table.
HISTORIES = {
    "dataworks-json": generate_history(tables=1, transactions=5, seed=31),
    "ibm-qrep-delimited": generate_history(tables=1, transactions=10, seed=31),
    "qlik-json": generate_history(tables=1, transactions=8, seed=31),
}
FORMATS = tuple(HISTORIES)
# One worker runs the module, so its two pipeline runs run once.
pytestmark = pytest.mark.xdist_group("stateful_split")
# Columns that say when a row was landed or written, which two runs cannot share.
RUN_COLUMNS = {"ingest_ts", "_ingest_ts", "__event_ts"}


def ingest_all(rendered: list[RenderedSource], storage: Path, max_bytes: int | None) -> PipelineConf:
    """The three formats' messages, a source each, in one pipeline (its run is the caller's)."""
    conf = rendered_pipeline(rendered, storage)
    if max_bytes is not None:
        conf = dataclasses.replace(conf, max_bytes_per_batch=max_bytes)
    return conf


def micro_batches(storage: Path, name: str) -> int:
    """How many streaming micro-batches wrote a dataset (one Delta append each)."""
    path = datasets(storage)[name]["path"]
    return sum(1 for commit in DeltaTable(path).history() if commit.get("operation") == "WRITE")


def without_held(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Silver's events less its `held` notices, which say where a micro-batch ended mid-message."""
    return [r for r in rows if r.get("kind") != "held"]


def _held(rows: list[dict[str, Any]]) -> set[str]:
    return {r["bronze_ref"] for r in rows if r.get("kind") == "held"}


def comparable(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted((k, timeless(k, v)) for k, v in r.items() if k not in RUN_COLUMNS)) for r in rows)


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("stateful_split")
    rendered = [render(history, fmt, root / "input" / fmt) for fmt, history in HISTORIES.items()]
    whole = ingest_all(rendered, root / "whole", None)
    run_pipeline(whole, spark=spark)
    largest = max(s.input.path.stat().st_size for s in whole.sources)
    # Two micro-batches for the largest source, about as many for the others: each one more costs a
    # micro-batch per table, and a cut is a cut.
    cut = ingest_all(rendered, root / "cut", math.ceil(largest / 2))
    run_pipeline(cut, spark=spark)
    return {"whole": whole, "cut": cut}


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_same_bronze_in_several_micro_batches_gives_the_same_silver_and_gold(spark, runs, fmt):
    whole, cut = runs["whole"].storage, runs["cut"].storage
    source = fmt.replace("-", "_")
    assert micro_batches(whole, f"silver_{source}") == 1
    assert micro_batches(cut, f"silver_{source}") >= 2, "the cut run fed silver several micro-batches"
    assert (f"silver_{source}_quarantine" in datasets(cut)) == (f"silver_{source}_quarantine" in datasets(whole))
    for name in (f"silver_{source}", f"silver_{source}_quarantine"):
        if name in datasets(whole):
            cut_rows, whole_rows = read_rows(spark, cut, name), read_rows(spark, whole, name)
            assert comparable(without_held(cut_rows)) == comparable(without_held(whole_rows)), name
            # A message held at a cut (a transaction's segments, a pair's half, data before its
            # metadata) is noted as `held` and completes in a later micro-batch.
            held_at_cuts = _held(cut_rows) - _held(whole_rows)
            events = without_held(cut_rows)
            completed = {ref for r in events for ref in [r["bronze_ref"], *(r.get("related_refs") or [])]}
            assert held_at_cuts <= completed, sorted(held_at_cuts - completed)
    problems = []
    history = HISTORIES[fmt]
    for table in history.tables:
        if not table.keys:
            continue
        gold = f"gold_{gold_of(fmt, table.name)}"
        for storage in (whole, cut):
            problems += diff_scd1(history, table.name, read_rows(spark, storage, gold))
            problems += diff_scd2(history, table.name, read_rows(spark, storage, f"{gold}_history"))
        assert comparable(read_rows(spark, cut, gold)) == comparable(read_rows(spark, whole, gold))
    assert not problems, "\n".join(problems)
