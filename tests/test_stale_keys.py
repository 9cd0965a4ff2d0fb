"""A quarantined change leaves its key stale in gold, and the run says so (docs/quality.md).

One storage, five runs of the pipeline (real Spark, real Delta tables), each on the changes
appended to one Debezium feed; after each the test records the quality checks, the stale-keys
figures of the event log and gold's rows:

1. inserts of items 1-5;
2. item 1: an update whose `n` is no integer (quarantined by `values_cast`): stale. Item 2: the
   same, then a delete: not stale. Item 3: the same, then a whole image: not stale. Table
   `other`: an insert with a NULL key (quarantined, names no row): stale until a truncate;
3. item 1: an update of other columns, its `s` unavailable (a partial image): applied, still
   stale. Items 4 and 5: updates applied, 4's whole, 5's partial;
4. late quarantined changes, older than those applied: item 4's is superseded by its whole
   image, item 5's is not (its later change was partial). gold.yml says `warn`;
5. whole images of items 1 and 5, item 1's quarantined update delivered again, a truncate of
   `other`: nothing stale.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdc_medallion.adhoc import adhoc_conf
from cdc_medallion.arrow_rows import python_rows
from cdc_medallion.catalog import all_rows
from cdc_medallion.names import SYSTEM_DIR
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.report import report_for_storage
from cdc_medallion.storage.delta_rs import read_table

pytestmark = pytest.mark.xdist_group("stale_keys")

PLACEHOLDER = "__debezium_unavailable_value"  # Debezium's `unavailable.value.placeholder`


def change(table: str, op: str, lsn: int, after: dict[str, Any] | None = None, before: dict | None = None) -> str:
    message = {"op": op, "ts_ms": 1_700_000_000_000 + lsn, "source": {"table": table, "lsn": lsn}}
    return json.dumps({**message, "before": before, "after": after}) + "\n"


def item(lsn: int, id_: int, n: Any, s: str, t: str, op: str = "u") -> str:
    return change("items", op, lsn, {"id": id_, "n": n, "s": s, "t": t})


RUNS = [
    [item(10 + i, i, i, f"s{i}", f"t{i}", "c") for i in range(1, 6)],
    [
        item(20, 1, "bad", "s1 new", "t1"),
        item(21, 2, "bad", "s2 new", "t2"),
        change("items", "d", 22, None, {"id": 2}),
        item(23, 3, "bad", "s3 new", "t3"),
        item(24, 3, 33, "s3 whole", "t3 whole"),
        change("other", "c", 25, {"id": None, "v": "x"}),
        change("other", "c", 26, {"id": 1, "v": "y"}),
    ],
    [
        item(30, 1, 5, PLACEHOLDER, "t1 later"),
        item(40, 4, 44, "s4 whole", "t4 whole"),
        item(42, 5, 55, PLACEHOLDER, "t5"),
    ],
    [item(35, 4, "bad", "s4 late", "t4 late"), item(41, 5, "bad", "s5 late", "t5 late")],
    [
        item(50, 1, 6, "s1 whole", "t1 whole"),
        item(51, 5, 7, "s5 whole", "t5 whole"),
        item(20, 1, "bad", "s1 new", "t1"),  # delivered again
        change("other", "t", 52),
    ],
]
KEYS = {"items": "id", "other": "id"}
COLUMNS = {"items": "id:int,n:int,s:string,t:string", "other": "id:int,v:string"}


@dataclass
class After:
    """What one run left."""

    checks: dict[str, Any]  # gold table -> its stale-keys check
    failed: list[str]  # names "suite/dataset" of the failed checks
    warnings: list[str]
    logged: dict[str, dict[str, Any]]  # gold table -> its flows' latest `data_quality` with a stale-keys figure
    items: dict[int, dict[str, Any]]  # gold_items by id
    report: dict[str, dict[str, str]] | None = None  # without JVM / with Spark: gold table -> stale keys shown


def logged_figures(storage: Path) -> dict[str, dict[str, Any]]:
    """Each dataset's latest `flow_progress.data_quality` that holds `stale_keys`, read from the
    event log as it is stored."""
    events = sorted(python_rows(read_table(storage / SYSTEM_DIR / "event_log")), key=lambda e: e["timestamp"])
    found = {}
    for event in events:
        quality = json.loads(event["details"]).get("flow_progress", {}).get("data_quality", {})
        if event["event_type"] == "flow_progress" and "stale_keys" in quality:
            found[event["origin"]["dataset_name"]] = quality
    return found


def stale_rows(page: Path) -> dict[str, str]:
    html = page.read_text(encoding="utf-8")
    return dict(re.findall(r'<tr class="stale" data-dataset="([^"]+)" data-stale-keys="(\d+)"', html))


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> list[After]:
    folder = tmp_path_factory.mktemp("stale-keys")
    feed, storage = folder / "feed.jsonl", folder / "storage"
    feed.touch()
    conf = adhoc_conf(
        fmt="debezium-json",
        input_path=feed,
        storage=storage,
        keys=[f"{t}={k}" for t, k in KEYS.items()],
        columns=[f"{t}={c}" for t, c in COLUMNS.items()],
        layout="json-lines",
    )
    assert conf.expectations is not None
    warning = folder / "expectations"  # the shipped rules, stale keys a warning
    shutil.copytree(conf.expectations, warning)
    gold_yml = warning / "gold.yml"
    gold_yml.write_text(gold_yml.read_text(encoding="utf-8").replace("  action: fail\n", "  action: warn\n"))
    found = []
    for number, lines in enumerate(RUNS, start=1):
        with feed.open("a", encoding="utf-8") as out:
            out.write("".join(lines))
        this = dataclasses.replace(conf, expectations=warning) if number == 4 else conf
        summary = run_pipeline(this, spark=spark, quality=True, great_expectations=False)
        quality = summary.quality
        after = After(
            checks={c.dataset: c for c in quality.checks if c.suite == "stale_keys"},
            failed=[f"{c.suite}/{c.dataset}" for c in quality.failed],
            warnings=[f"{c.suite}/{c.dataset}" for c in quality.warnings],
            logged=logged_figures(storage),
            items={row["id"]: row for row in all_rows(storage, "gold_items", spark)},
        )
        if number == 4:
            without_jvm = report_for_storage(storage, folder / "report")
            with_spark = report_for_storage(storage, folder / "report-spark", spark=spark)
            after.report = {"without_jvm": stale_rows(without_jvm), "with_spark": stale_rows(with_spark)}
        found.append(after)
    return found


def figures(after: After) -> dict[str, int]:
    return {name: quality["stale_keys"] for name, quality in after.logged.items()}


GOLD = ("gold_items", "gold_items_history")


def test_nothing_quarantined_nothing_tracked(runs):
    assert runs[0].logged == {} and runs[0].checks == {} and runs[0].failed == []


def test_a_quarantined_update_leaves_its_key_stale_and_the_check_fails(runs):
    after = runs[1]
    assert figures(after) == {"gold_items": 1, "gold_items_history": 1, "gold_other": 1, "gold_other_history": 1}
    assert after.logged["gold_items"]["stale_samples"] == ['{"id":1}']  # items 2 (deleted), 3 (whole image) follow
    assert after.logged["gold_other"]["stale_unplaced"] == 1  # the NULL key names no row
    assert sorted(after.failed) == sorted(f"stale_keys/{name}" for name in figures(after))
    assert "1 stale key(s)" in after.checks["gold_items"].observed
    assert after.items[1] == {"id": 1, "n": 1, "s": "s1", "t": "t1", "__sequence": after.items[1]["__sequence"]}
    assert 2 not in after.items and after.items[3]["s"] == "s3 whole"


def test_a_later_partial_change_is_applied_and_the_key_stays_stale(runs):
    after = runs[2]
    assert (after.items[1]["n"], after.items[1]["s"], after.items[1]["t"]) == (5, "s1", "t1 later")  # s: stale
    assert figures(after)["gold_items"] == 1
    assert {f"stale_keys/{name}" for name in GOLD} <= set(after.failed)


def test_a_late_quarantined_change_is_stale_unless_a_later_whole_image_was_applied(runs):
    after = runs[3]
    stale = after.logged["gold_items"]
    assert (stale["stale_keys"], stale["stale_samples"]) == (2, ['{"id":1}', '{"id":5}'])  # 4's whole image came after
    assert figures(after)["gold_items_history"] == 2


def test_gold_yml_makes_stale_keys_a_warning(runs):
    after = runs[3]
    assert not [name for name in after.failed if name.startswith("stale_keys/")]
    assert {f"stale_keys/{name}" for name in (*GOLD, "gold_other")} <= set(after.warnings)
    assert after.checks["gold_items"].severity == "warn" and not after.checks["gold_items"].success


def test_the_report_names_each_gold_table_with_its_stale_keys_either_way(runs):
    shown = runs[3].report
    assert shown is not None
    expected = {"gold_items": "2", "gold_items_history": "2", "gold_other": "1", "gold_other_history": "1"}
    assert shown["without_jvm"] == expected
    assert shown["with_spark"] == expected


def test_whole_images_and_a_truncate_end_the_staleness(runs):
    after = runs[4]
    assert figures(after) == {"gold_items": 0, "gold_items_history": 0, "gold_other": 0, "gold_other_history": 0}
    assert after.failed == [] and all(check.success for check in after.checks.values())
    assert (after.items[1]["s"], after.items[5]["s"]) == ("s1 whole", "s5 whole")
