"""Discovery of tables, columns and keys from silver: incremental, and the same as a full scan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cdc_medallion.adhoc import adhoc_conf
from cdc_medallion.discovery import discover
from cdc_medallion.generator.database import ADDED_COLUMN
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import render
from cdc_medallion.lines import lines_of
from cdc_medallion.names import STATE_DIR, silver_name
from cdc_medallion.storage.delta_store import DeltaStore
from tests.helpers import land_and_parse


def _split_feed(path: Path) -> bytes:
    """Keep the first half of a one-message-per-line feed in place; return the rest."""
    lines = lines_of(path.read_bytes(), keepends=True)
    half = len(lines) // 2
    path.write_bytes(b"".join(lines[:half]))
    return b"".join(lines[half:])


def test_discovery_scans_only_new_silver_and_agrees_with_a_full_scan(spark, tmp_path):
    history = generate_history(tables=3, transactions=80, seed=5)  # its DDL adds a column late on
    rendered = render(history, "debezium-json", tmp_path / "in")
    assert rendered.path.is_file()
    rest = _split_feed(rendered.path)
    conf = adhoc_conf("debezium-json", rendered.path, tmp_path / "storage", [], [])
    store = DeltaStore(conf.storage, spark)
    cache = conf.storage / STATE_DIR / "_discovery" / f"{silver_name(conf.sources[0].name)}.json"

    land_and_parse(conf, spark)  # discovery reads silver only: gold need not run
    first = discover(store, conf)
    with rendered.path.open("ab") as feed:
        feed.write(rest)
    land_and_parse(conf, spark)
    second = discover(store, conf)

    saved = json.loads(cache.read_text(encoding="utf-8"))
    assert saved["version"] == store.version(silver_name(conf.sources[0].name))  # scanned up to silver's end
    added = [t for t in second.tables if ADDED_COLUMN.name in t.columns]
    assert added and not [t for t in first.tables if ADDED_COLUMN.name in t.columns]
    shutil.rmtree(cache.parent)
    assert discover(store, conf) == second  # a full scan finds exactly what the steps found


def test_a_discovery_cache_from_another_silver_is_not_trusted(spark, tmp_path):
    history = generate_history(tables=1, transactions=10, seed=2)
    rendered = render(history, "debezium-json", tmp_path / "in")
    conf = adhoc_conf("debezium-json", rendered.path, tmp_path / "storage", [], [])
    land_and_parse(conf, spark)
    store = DeltaStore(conf.storage, spark)
    discover(store, conf)  # writes the cache, as a run does
    cache = conf.storage / STATE_DIR / "_discovery" / f"{silver_name(conf.sources[0].name)}.json"
    saved = json.loads(cache.read_text(encoding="utf-8"))
    honest = discover(store, conf)

    saved["table_id"] = "a-silver-that-was-dropped"
    saved["tables"][0]["columns"].append(["ghost", "string", 99])
    cache.write_text(json.dumps(saved), encoding="utf-8")
    assert discover(store, conf) == honest
    cache.write_text("{not json", encoding="utf-8")
    assert discover(store, conf) == honest
