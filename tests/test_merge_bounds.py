"""Gold's MERGEs name the batch's key range, so delta-rs skips the files outside it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable

from cdc_medallion.runner.merge_bounds import within_source_keys
from tests.helpers import gold_name, gold_rows, ingest


def test_the_range_of_each_key_bounds_the_target():
    rows = ds.dataset(pa.table({"id": [7, 3, None, 12], "code": ["b", "it's", "a", "c"]}))
    assert within_source_keys(rows, ["id", "code"]) == (
        "(t.`id` BETWEEN 3 AND 12 OR t.`id` IS NULL) AND t.`code` BETWEEN 'a' AND 'it''s'"
    )


def test_keys_it_cannot_spell_are_left_unbounded():
    assert within_source_keys(ds.dataset(pa.table({"id": pa.nulls(2, pa.int64())})), ["id"]) is None
    assert within_source_keys(ds.dataset(pa.table({"k": ["a\\", "b"]})), ["k"]) is None
    assert within_source_keys(ds.dataset(pa.table({"k": ["a\n", "b"]})), ["k"]) is None
    assert within_source_keys(ds.dataset(pa.table({"x": [1.5, 2.5]})), ["x"]) is None
    assert within_source_keys(None, ["id"]) is None
    assert within_source_keys(ds.dataset(pa.table({"d": [1.5], "id": [4]})), ["d", "id"]) == "t.`id` BETWEEN 4 AND 4"


def change(op: str, row_id: int, value: str, lsn: int) -> str:
    image = {"id": row_id, "v": value}
    return json.dumps(
        {
            "op": op,
            "before": image if op == "d" else None,
            "after": None if op == "d" else image,
            "source": {"table": "items", "lsn": lsn},
        }
    )


def last_merge(storage: Path, name: str) -> dict[str, int]:
    merges = [c for c in DeltaTable(str(storage / name)).history() if c.get("operation") == "MERGE"]
    return {k: int(v) for k, v in merges[0]["operationMetrics"].items() if isinstance(v, int | float)}


def test_a_batch_outside_the_stored_keys_reads_no_file_and_a_touched_file_keeps_its_other_rows(
    spark, storage, tmp_path
):
    source = tmp_path / "items.jsonl"
    lsn = iter(range(1, 1000))
    expected: dict[int, str] = {}

    def run(*changes: tuple[str, int, str]) -> None:
        with source.open("a", encoding="utf-8") as handle:
            for op, row_id, value in changes:
                handle.write(change(op, row_id, value, next(lsn)) + "\n")
                if op == "d":
                    expected.pop(row_id, None)
                else:
                    expected[row_id] = value
        ingest(spark, "debezium-json", source, storage, keys={"items": "id"}, layout="json-lines")

    run(*[("c", i, f"v{i}") for i in range(1, 51)])
    # Overlaps the stored file (1..50): it is rewritten, and its rows outside 30..60 are kept.
    run(("u", 30, "changed"), ("d", 40, ""), *[("c", i, f"v{i}") for i in range(51, 61)])
    scd1 = gold_name(storage, "items", 1)
    assert last_merge(storage, scd1)["num_target_files_scanned"] >= 1
    # Above every stored key: no stored file can hold a match, and none is read.
    run(*[("c", i, f"v{i}") for i in range(100, 111)])
    metrics = last_merge(storage, scd1)
    assert metrics["num_target_files_scanned"] == 0, metrics
    assert metrics["num_target_files_skipped_during_scan"] >= 1, metrics
    assert metrics["num_target_rows_copied"] == 0, metrics

    assert {r["id"]: r["v"] for r in gold_rows(spark, storage, "items")} == expected
    history = gold_rows(spark, storage, "items", scd_type=2)
    open_versions = [r["id"] for r in history if r["__END_AT"] is None]
    assert sorted(open_versions) == sorted(expected)  # each stored version was found and closed
    assert sorted(r["v"] for r in history if r["id"] == 30) == ["changed", "v30"]
    assert [r["__END_AT"] is None for r in history if r["id"] == 40] == [False]


def test_the_range_without_an_alias_selects_a_delta_tables_files(tmp_path):
    """The driver's read of the target's rows (`_stored_rows`) hands it to delta-rs."""
    from deltalake import write_deltalake

    for ids in ([1, 2, 3], [10, 11, 12], [20, 21]):
        write_deltalake(
            str(tmp_path), pa.table({"id": pa.array(ids, pa.int64()), "v": ["x"] * len(ids)}), mode="append"
        )
    table = DeltaTable(str(tmp_path))
    batch = ds.dataset(pa.table({"id": pa.array([11, 12], pa.int64())}))
    predicate = within_source_keys(batch, ["id"], alias=None)
    assert predicate == "`id` BETWEEN 11 AND 12"
    chosen = table.to_pyarrow_dataset(file_pruning_predicate=predicate).to_table()
    assert sorted(chosen.column("id").to_pylist()) == [10, 11, 12]
    assert table.to_pyarrow_dataset().count_rows() == 8
