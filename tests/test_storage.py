"""Storage: exactly-once commits, schema checks, one run at a time, names that cannot escape."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from cdc_medallion.errors import ConcurrentRunError, IdentifierError, SchemaMismatch
from cdc_medallion.lines import lines_of
from cdc_medallion.runner.checkpoints import StorageLock
from cdc_medallion.storage.delta_store import DELETION_VECTORS_DEFAULT, DeltaStore, Txn, starts_like_its_snapshot
from tests.helpers import datasets, gold_name, gold_rows, ingest, parse, read_rows

SCHEMA = StructType([StructField("id", LongType()), StructField("v", StringType())])


def test_appends_commit_once_per_batch_and_schemas_are_checked(spark, storage):
    """A write names its query's application id and batch: the same batch again (a replay after a
    crash) commits nothing, and rows of another shape are refused before anything is written."""
    store = DeltaStore(storage, spark)
    rows = spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA)
    store.append("t", rows, Txn("flow:app", 3))
    store.append("t", rows, Txn("flow:app", 3))  # replayed
    store.append("t", rows, Txn("flow:app", 2))  # an older batch of the same query
    assert store.count("t") == 2
    store.append("t", rows.limit(1), Txn("other:app", 0))  # another query's first batch
    assert store.count("t") == 3
    other = StructType([StructField("id", StringType()), StructField("v", StringType())])
    with pytest.raises(SchemaMismatch, match="rows for t have columns"):
        store.check_schema("t", other)


def test_a_writes_row_count_is_its_commits_also_when_a_replay_skips_it(spark, storage):
    """Bronze's count comes from its commit, not a count of the batch: a batch replayed after a
    crash (its write committed, the checkpoint did not) counts what its earlier commit wrote."""
    store = DeltaStore(storage, spark)
    rows = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], SCHEMA)
    store.append("t", rows, Txn("flow:app", 0))  # creates the table
    store.append("t", rows.limit(1), Txn("other:app", 0))
    store.append("t", rows.limit(2), Txn("flow:app", 1))
    store.append("t", rows, Txn("flow:app", 1))  # replayed: skipped

    assert store.rows_committed("t", Txn("flow:app", 0)) == 3
    assert store.rows_committed("t", Txn("flow:app", 1)) == 2
    assert store.rows_committed("t", Txn("other:app", 0)) == 1
    assert store.rows_committed("t", Txn("flow:app", 2)) == 0  # never committed
    assert store.rows_committed("t", Txn("new:app", 0)) == 0


def streamed(spark, store: DeltaStore, name: str, checkpoint: Path) -> tuple[list[tuple], int]:
    """What a query new to `name` reads, and how many Spark jobs it ran (its run's job group)."""
    seen: list[tuple] = []
    query = (
        store.read_stream(name)
        .writeStream.foreachBatch(lambda rows, _batch: seen.extend(tuple(r) for r in rows.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sorted(seen), len(spark.sparkContext.statusTracker().getJobIdsForGroup(query.runId))


def test_a_stream_new_to_a_young_table_replays_its_commits_and_reads_what_its_snapshot_holds(spark, storage):
    """A query new to a table of a few appends starts at version 0, without the snapshot start's
    jobs, and reads the rows the snapshot holds. Once a commit removed rows or changed the schema,
    or the log has a checkpoint, a new query starts from the snapshot: a replay would stop at the
    removal (or read rows the snapshot no longer holds)."""
    store = DeltaStore(storage, spark)
    for batch in range(3):
        store.append("t", spark.createDataFrame([(batch, "a"), (batch + 10, "b")], SCHEMA), Txn("flow:app", batch))
    snapshot = sorted(tuple(r) for r in store.read("t").collect())
    assert starts_like_its_snapshot(store.path("t"))
    replayed, replay_jobs = streamed(spark, store, "t", storage / "cp1")
    assert replayed == snapshot and len(snapshot) == 6

    spark.sql(f"DELETE FROM delta.`{store.path('t')}` WHERE id = 0")
    assert not starts_like_its_snapshot(store.path("t"))
    rows, snapshot_jobs = streamed(spark, store, "t", storage / "cp2")
    assert rows == sorted(tuple(r) for r in store.read("t").collect()) and len(rows) == 5
    assert replay_jobs < snapshot_jobs, (replay_jobs, snapshot_jobs)

    store.append("u", spark.createDataFrame([(1, "a")], SCHEMA), Txn("flow:app", 0))
    spark.sql(f"ALTER TABLE delta.`{store.path('u')}` SET TBLPROPERTIES ('note' = 'x')")
    assert not starts_like_its_snapshot(store.path("u"))

    DeltaTable.create(spark).location(str(storage / "v")).addColumns(SCHEMA).property(
        "delta.checkpointInterval", "2"
    ).execute()
    for batch in range(2):
        spark.createDataFrame([(batch, "a")], SCHEMA).write.format("delta").mode("append").save(str(storage / "v"))
    assert any("checkpoint" in n for n in os.listdir(storage / "v" / "_delta_log"))
    assert not starts_like_its_snapshot(storage / "v")


def test_a_create_killed_before_its_first_commit_does_not_block_the_table(spark, storage):
    """What the crash drill left when a SIGKILL landed inside a create: a log folder with no
    version in it. Delta takes it for a table; the next write must still create and fill it."""
    store = DeltaStore(storage, spark)
    (store.path("t") / "_delta_log" / "_staged_commits").mkdir(parents=True)
    assert not store.exists("t")
    store.append("t", spark.createDataFrame([(1, "a")], SCHEMA), Txn("flow:app", 0))
    assert [tuple(r) for r in store.read("t").collect()] == [(1, "a")]


def test_a_column_widens_in_place_and_a_narrowing_is_refused(spark, storage):
    store = DeltaStore(storage, spark)
    narrow = StructType([StructField("id", IntegerType()), StructField("v", StringType())])
    store.append("t", spark.createDataFrame([(7, "a")], narrow), Txn("flow:app", 0))
    store.evolve("t", SCHEMA)  # id: int -> bigint
    store.append("t", spark.createDataFrame([(3_000_000_000, "b")], SCHEMA), Txn("flow:app", 1))
    assert sorted(tuple(r) for r in store.read("t").collect()) == [(7, "a"), (3_000_000_000, "b")]
    assert store.schema("t")["id"].dataType == LongType()
    store.evolve("t", narrow)  # rows of the narrower type fit the wider column: nothing changes
    assert store.schema("t")["id"].dataType == LongType()
    with pytest.raises(SchemaMismatch, match=r"t\.v: the table holds string, new rows bring bigint"):
        store.evolve("t", StructType([StructField("id", LongType()), StructField("v", LongType())]))


def test_merges_in_an_idempotent_block_commit_once_per_batch(spark, storage):
    store = DeltaStore(storage, spark)
    store.append("t", spark.createDataFrame([(1, "a")], SCHEMA), Txn("load", 0))
    for _ in range(2):  # the second MERGE is the same batch replayed: skipped
        with store.idempotent(spark, Txn("merger", 7)):
            store.merge_table("t", spark).alias("t").merge(
                spark.createDataFrame([(1, "b"), (2, "c")], SCHEMA).alias("s"), "t.id = s.id"
            ).whenMatchedUpdate(set={"v": "concat(t.v, s.v)"}).whenNotMatchedInsertAll().execute()
    assert sorted(tuple(r) for r in store.read("t").collect()) == [(1, "ab"), (2, "c")]
    assert spark.conf.get("spark.databricks.delta.write.txnAppId", None) is None  # not left set


def test_every_commit_is_delta_sparks_and_our_metadata_is_table_properties(spark, storage):
    store = DeltaStore(storage, spark)
    store.ensure_table("gold_t", SCHEMA, {"layer": "gold", "source_table": "t", "scd_type": "2"})
    store.append("gold_t", spark.createDataFrame([(1, "a")], SCHEMA), Txn("q", 0))
    properties = store.properties("gold_t")
    assert properties["layer"] == "gold" and properties["scd_type"] == "2"
    assert properties["delta.enableChangeDataFeed"] == "true"  # gold's changes can be streamed
    engines = [
        json.loads(line)["commitInfo"]["engineInfo"]
        for commit in sorted((store.path("gold_t") / "_delta_log").glob("*.json"))
        for line in lines_of(commit.read_text(encoding="utf-8"))
        if '"commitInfo"' in line
    ]
    assert len(engines) == 2 and all("Delta-Lake/" in engine for engine in engines)
    assert not list(store.path("gold_t").glob("_cdc_medallion*"))  # no sidecar files
    changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
    assert changes.load(str(store.path("gold_t"))).count() == 1


def test_gold_merges_mark_replaced_rows_with_deletion_vectors_unless_the_session_says_otherwise(spark, storage):
    """A MERGE into gold marks the rows it replaces (a deletion vector) instead of rewriting their
    file; a session that sets Delta's own default for new tables is followed instead."""
    store = DeltaStore(storage, spark)
    gold = {"layer": "gold", "source_table": "t", "scd_type": "1"}
    store.ensure_table("gold_t", SCHEMA, gold)
    store.append("gold_t", spark.createDataFrame([(i, "a") for i in range(100)], SCHEMA).coalesce(1), Txn("q", 0))
    with store.idempotent(spark, Txn("merger", 1)):
        store.merge_table("gold_t", spark).alias("t").merge(
            spark.createDataFrame([(5, "b")], SCHEMA).alias("s"), "t.id = s.id"
        ).whenMatchedUpdateAll().execute()
    assert store.properties("gold_t")["delta.enableDeletionVectors"] == "true"
    adds = [
        json.loads(line)["add"]
        for line in lines_of((store.path("gold_t") / "_delta_log" / f"{2:020d}.json").read_text(encoding="utf-8"))
        if '"add"' in line
    ]
    assert any(add.get("deletionVector") for add in adds)  # the 100-row file stays, one row marked
    assert sorted(tuple(r) for r in store.read("gold_t").collect())[4:7] == [(4, "a"), (5, "b"), (6, "a")]

    spark.conf.set(DELETION_VECTORS_DEFAULT, "false")
    try:
        store.ensure_table("gold_u", SCHEMA, gold)
    finally:
        spark.conf.unset(DELETION_VECTORS_DEFAULT)
    assert store.properties("gold_u")["delta.enableDeletionVectors"] == "false"


def test_dataset_names_cannot_leave_the_storage_root(spark, storage):
    store = DeltaStore(storage, spark)
    for hostile in ("../../x", "t; DROP TABLE y", "a/b", "", "_system/../../x"):
        with pytest.raises(IdentifierError):
            store.path(hostile)


def test_hostile_names_in_messages_never_leave_the_root_nor_reach_sql(spark, tmp_path):
    """A table name with a path in it is quarantined; any other name a source allows (`t; DROP
    TABLE y` is a legal quoted MySQL name) arrives, in a folder of its own under the root, as a
    value wherever it meets SQL."""

    def change(table: str, column: str = "id") -> str:
        source = {"connector": "postgresql", "table": table, "lsn": 1}
        return json.dumps({"op": "c", "before": None, "after": {column: 1}, "source": source})

    [event] = parse("debezium-json", change("../../x"))
    assert event["kind"] == "error" and "unusable table name '../../x'" in event["error"]
    [event] = parse("debezium-json", change("ok", column="a\x07b"))
    assert event["kind"] == "error" and "unusable column name" in event["error"]

    source = tmp_path / "in.jsonl"
    source.write_text("\n".join([change("../../x"), change("t; DROP TABLE y"), change("fine")]) + "\n")
    storage = tmp_path / "storage"
    ingest(spark, "debezium-json", source, storage, keys={"fine": "id", "t; DROP TABLE y": "id"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "storage"]  # nothing outside the root
    assert len(read_rows(spark, storage, "silver_debezium_json_quarantine")) == 1
    assert "gold_fine" in datasets(storage)
    assert [r["id"] for r in gold_rows(spark, storage, "t; DROP TABLE y", 1)] == [1]
    assert gold_name(storage, "t; DROP TABLE y", 1).startswith("gold_t_drop_table_y_")


def test_table_names_beyond_the_identifier_alphabet_get_folders_of_their_own():
    from cdc_medallion.config import TableConf

    names = ["order lines", "order-lines", "Order Lines", "t; x", "größe"]
    golds = {TableConf(source="s", table=name, keys=("id",)).gold_name for name in names}
    assert len(golds) == len(names), golds
    assert all(g.startswith("gold_") and g.replace("_", "").isalnum() for g in golds)
    assert TableConf(source="s", table="orders", keys=("id",)).gold_name == "gold_orders"  # plain names stay


def test_a_second_run_on_the_same_storage_fails_clearly(storage):
    storage.mkdir(parents=True)
    with StorageLock(storage), pytest.raises(ConcurrentRunError, match=r"is in use by pid \d+"), StorageLock(storage):
        pass
    with StorageLock(storage):  # released: the next run proceeds
        pass


def test_identifier_edges():
    from cdc_medallion.config import TableConf
    from cdc_medallion.identifiers import is_safe_identifier

    assert not is_safe_identifier("a\n") and not is_safe_identifier("a.b") and not is_safe_identifier("a`b")
    assert is_safe_identifier("#alibaba_rds_row_id#") and is_safe_identifier("T$1") and is_safe_identifier("Käse")
    assert TableConf(source="s", table="Käse$Tab#1", keys=("id",)).gold_name == "gold_k_se_tab_1"


def test_a_tables_first_rows_create_it_in_one_commit_with_our_properties_and_the_txn(spark, storage):
    """No create commit and then an append (whose txn check is a job of its own): one commit
    holds the table's metadata, our properties, the batch's txn and its rows; a replay of that
    batch adds nothing."""
    from cdc_medallion.storage.delta_rs import commit_actions, commit_versions

    store = DeltaStore(storage, spark)
    rows = spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA)
    store.append("t", rows, Txn("flow:app", 4), {"layer": "state"})
    assert commit_versions(store.path("t")) == [0]
    actions = list(commit_actions(store.path("t"), 0))
    assert [a["txn"]["appId"] for a in actions if "txn" in a] == ["flow:app"]
    assert [a["metaData"]["configuration"]["layer"] for a in actions if "metaData" in a] == ["state"]
    assert store.rows_written_since("t", None) == 2

    store.append("t", rows, Txn("flow:app", 4), {"layer": "state"})  # replayed
    assert commit_versions(store.path("t")) == [0]
    assert store.count("t") == 2
