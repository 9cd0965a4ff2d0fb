"""A quality step takes a check's last results only while the tables it reads are as they were.

Three runs over one storage: the first computes every check; the second, with nothing new,
takes them all again (same results, each event naming the update that computed it); then gold is
damaged behind the pipeline's back (a second row of one key) and one table gets a new change:
the third run validates again exactly the suites over what changed, and finds the damage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_medallion.adhoc import adhoc_conf
from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.names import SYSTEM_DIR
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.checks import ACCOUNTING, REUSED_FROM
from cdc_medallion.quality.suites import SUITE
from cdc_medallion.storage.delta_rs import read_table
from cdc_medallion.storage.delta_store import DeltaStore

pytestmark = pytest.mark.xdist_group("quality_memo")


def change(table: str, op: str, lsn: int, row: dict[str, Any]) -> str:
    message = {"op": op, "ts_ms": 1_700_000_000_000 + lsn, "source": {"table": table, "lsn": lsn}}
    return json.dumps({**message, "before": None, "after": row}) + "\n"


def quality_events(storage: Path, update_id: str) -> dict[str, dict[str, Any]]:
    """The update's quality_check events by (suite/dataset), their details as stored."""
    found = {}
    for event in python_rows(read_table(storage / SYSTEM_DIR / "event_log")):
        details = json.loads(event["details"]).get("quality_check", {})
        ours = event["event_type"] == "quality_check" and event["origin"]["update_id"] == update_id
        if ours and details.get("suite") in (ACCOUNTING, SUITE):
            found[f"{details['suite']}/{event['origin']['dataset_name']}"] = details
    return found


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("quality-memo")
    feed, storage = folder / "feed.jsonl", folder / "storage"
    feed.write_text(
        "".join(change("items", "c", i, {"id": i, "v": f"v{i}"}) for i in range(1, 4))
        + "".join(change("notes", "c", 10 + i, {"id": i, "t": f"t{i}"}) for i in range(1, 3)),
        encoding="utf-8",
    )
    conf = adhoc_conf(
        fmt="debezium-json",
        input_path=feed,
        storage=storage,
        keys=["items=id", "notes=id"],
        columns=["items=id:int,v:string", "notes=id:int,t:string"],
        layout="json-lines",
    )
    found = [run_pipeline(conf, spark=spark, quality=True), run_pipeline(conf, spark=spark, quality=True)]
    store = DeltaStore(storage, spark)
    duplicate = store.read("gold_items").filter("id = 1")
    duplicate.write.format("delta").mode("append").save(str(store.path("gold_items")))
    with feed.open("a", encoding="utf-8") as out:
        out.write(change("notes", "u", 20, {"id": 1, "t": "t1 later"}))
    found.append(run_pipeline(conf, spark=spark, quality=True))
    return storage, found


def update_id(summary) -> str:
    return summary.updates[-1].update_id


def as_dicts(summary) -> list[dict[str, Any]]:
    return sorted((c.as_dict() for c in summary.quality.checks), key=lambda c: (c["suite"], c["dataset"], c["name"]))


def test_the_first_run_computes_every_check(runs):
    storage, (first, *_) = runs
    assert first.quality.reused == {}
    events = quality_events(storage, update_id(first))
    assert {f"{ACCOUNTING}/debezium_json", f"{SUITE}/gold_items", f"{SUITE}/gold_notes_history"} <= set(events)
    assert not [name for name, details in events.items() if REUSED_FROM in details]


def test_a_run_with_nothing_new_takes_every_result_again(runs):
    storage, (first, second, _) = runs
    assert as_dicts(second) == as_dicts(first)
    events = quality_events(storage, update_id(second))
    assert events and {d.get(REUSED_FROM) for d in events.values()} == {update_id(first)}, events
    assert set(second.quality.reused) == set(events)
    assert second.quality.failed == []


def test_only_suites_over_changed_tables_run_again_and_they_see_the_change(runs):
    storage, (first, _, third) = runs
    events = quality_events(storage, update_id(third))
    ran = {name for name, details in events.items() if REUSED_FROM not in details}
    # gold_items was written behind the pipeline's back; notes got a change (bronze to gold)
    assert f"{SUITE}/gold_items" in ran and f"{SUITE}/gold_notes" in ran and f"{SUITE}/gold_notes_history" in ran
    assert f"{ACCOUNTING}/debezium_json" in ran and f"{SUITE}/bronze_debezium_json" in ran
    kept = set(events) - ran
    assert kept and all(events[name][REUSED_FROM] == update_id(first) for name in kept)
    assert not [name for name in kept if "notes" in name or name.endswith("/gold_items")], kept
    failed = {(c.dataset, c.name) for c in third.quality.failed}
    assert ("gold_items", "key_unique") in failed, failed
