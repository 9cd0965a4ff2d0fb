"""Exactly once through the `Txn` each write carries (its query's application id and the batch
id), in process: a batch replayed after a crash skips what it committed and makes the rest, and
two queries writing one table never take each other's batches for their own.

An application id that changes between a run and its replay writes a replayed batch twice (the
first test's duplicates); one that two queries share makes the second writer's batch look
committed (the second test's lost rows). The crash is an exception raised right after a commit,
inside the batch: the batch's offsets are logged, its commit is not, as a SIGKILL would leave
them (tests/test_crash_safety.py kills real processes, at a higher cost). The last three tests
are ways a flow that shares its query used to be run from its stream's start again, writing its
rows twice (issue 70's report): a member that failed a batch, and a member the shared query's
update did not gather (two flows into one table; a flow into a table whose other flow was still
being planned). Each now goes on in its own query from the shared query's checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cdc_medallion.errors import CdcMedallionError
from cdc_medallion.names import STATE_DIR
from cdc_medallion.storage.delta_store import DeltaStore
from tests.helpers import read_rows
from tests.test_runner import append, make_pipeline, row

# Every flow in a query of its own: `valid` is the only reader of `raw`, `people` of `valid`.
OWN_QUERIES = """
@dp.table(name="valid")
@dp.expect_or_quarantine("known_op", "op IN ('U', 'D')")
def valid():
    return dp.read_stream("changes")

dp.create_streaming_table("people")
dp.create_auto_cdc_flow(target="people", source="valid", keys=["id"], sequence_by="seq",
                        apply_as_deletes="op = 'D'", except_column_list=["op"])
"""
FIRST = [row(1, 1, "ann"), row(2, 2, "bob"), row(3, 3, op="X"), row(1, 4, "ann2"), row(2, 5, op="D")]
LATER = [row(4, 6, "cy"), row(5, 7, op="Y")]


def crash_after_committing(monkeypatch, crashes_after: Callable[[str], bool]) -> list[str]:
    """Make the first append to a table `crashes_after` names raise once it committed; returns
    the names of the tables it crashed after (one)."""
    crashed: list[str] = []
    committed = DeltaStore.append

    def append_then_crash(self, name, rows, txn, properties=None):
        committed(self, name, rows, txn, properties)
        if crashes_after(name) and not crashed:
            crashed.append(name)
            raise RuntimeError(f"crashed after committing {name}")

    monkeypatch.setattr(DeltaStore, "append", append_then_crash)
    return crashed


CRASH_POINTS = {
    "landing": lambda name: name == "raw",
    "quarantine-before-its-dataset": lambda name: name == "valid_quarantine",
    "dataset-before-the-checkpoint": lambda name: name == "valid",
    "tombstones-before-their-merge": lambda name: name.startswith(f"{STATE_DIR}/"),
}


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_a_batch_replayed_after_a_crash_writes_each_row_once(spark, tmp_path, monkeypatch, point):
    """A batch that crashed right after one of its writes committed runs again in the next update
    under the same batch id: the committed write is skipped (the table's version stays), the
    rest are made, and every table holds each message's rows once, also after a later batch."""
    runner, storage = make_pipeline(tmp_path, OWN_QUERIES, FIRST)
    crashed = crash_after_committing(monkeypatch, CRASH_POINTS[point])
    with pytest.raises(CdcMedallionError, match="crashed after committing"):
        runner.update()
    [table] = crashed
    store = DeltaStore(storage, spark)
    version = store.version(table)
    monkeypatch.undo()

    runner.update()  # the crashed batch again
    assert store.version(table) == version  # its committed write was skipped, not made again
    append(tmp_path, LATER)
    runner.update()
    assert len(read_rows(spark, storage, "raw")) == len(FIRST) + len(LATER)
    valid = sorted((r["id"], r["seq"]) for r in read_rows(spark, storage, "valid"))
    assert valid == [(1, 1), (1, 4), (2, 2), (2, 5), (4, 6)]
    assert sorted(r["id"] for r in read_rows(spark, storage, "valid_quarantine")) == [3, 5]
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people")} == {1: "ann2", 4: "cy"}


# Two queries append to `merged`: the one over `raw`'s stream (`evens`, beside `copy`) and the one
# over `copy`'s (`copied`).
TWO_QUERIES_ONE_TABLE = """
dp.create_streaming_table("merged")

@dp.append_flow(target="merged")
def evens():
    return dp.read_stream("changes").filter(F.col("id") % 2 == 0).withColumn("via", F.lit("evens"))

@dp.table(name="copy")
def copy():
    return dp.read_stream("changes")

@dp.append_flow(target="merged")
def copied():
    return dp.read_stream("copy").withColumn("via", F.lit("copy"))
"""


def test_two_queries_writing_one_table_each_commit_their_own_batches(spark, tmp_path):
    """Batch 0, then batch 1, of each of two queries into one table: each must commit. A query
    whose application id another writer of the table shares finds its batch committed already
    (the other's batch of the same id) and writes nothing."""
    runner, storage = make_pipeline(tmp_path, TWO_QUERIES_ONE_TABLE, [row(1, 1), row(2, 2), row(3, 3)])
    runner.update()
    append(tmp_path, [row(4, 4), row(5, 5)])
    runner.update()
    got = sorted((r["via"], r["id"]) for r in read_rows(spark, storage, "merged"))
    assert got == [("copy", 1), ("copy", 2), ("copy", 3), ("copy", 4), ("copy", 5), ("evens", 2), ("evens", 4)]


# `valid` and `people` both read `raw`'s stream row by row: members of one shared query.
SHARED_QUERY = OWN_QUERIES.replace('source="valid"', 'source="changes"')


def test_a_shared_querys_member_that_failed_writes_each_row_once_after(spark, tmp_path, monkeypatch):
    """`valid` crashes right after committing its part of the shared query's batch; the shared
    query commits the batch for `people`. Next update `valid`, in a query of its own, replays
    that batch under the shared query's `Txn` (its committed write skipped), then a later batch,
    and joins again: each row once in `valid` and its quarantine. (It used to read the stream
    from the start under a new application id: every row twice.)"""
    runner, storage = make_pipeline(tmp_path, SHARED_QUERY, FIRST)
    crash_after_committing(monkeypatch, lambda name: name == "valid")
    with pytest.raises(CdcMedallionError, match="crashed after committing"):
        runner.update()
    monkeypatch.undo()
    runner.update()
    valid = sorted((r["id"], r["seq"]) for r in read_rows(spark, storage, "valid"))
    assert valid == [(1, 1), (1, 4), (2, 2), (2, 5)]
    assert sorted(r["id"] for r in read_rows(spark, storage, "valid_quarantine")) == [3]
    append(tmp_path, LATER)
    runner.update()
    valid = sorted((r["id"], r["seq"]) for r in read_rows(spark, storage, "valid"))
    assert valid == [(1, 1), (1, 4), (2, 2), (2, 5), (4, 6)]
    assert sorted(r["id"] for r in read_rows(spark, storage, "valid_quarantine")) == [3, 5]
    # `people` reads the stream itself here: ops X and Y are upserts to it
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people")} == {1: "ann2", 3: "n", 4: "cy", 5: "n"}


def test_two_flows_into_one_table_from_one_stream_write_each_row_once(spark, tmp_path):
    """`evens` and `odds` into one table, `copy` beside them, all over one stream: one shared
    query. (`odds` used to be left out of it, and its own turn rewrote the members file without
    `evens` and `copy`, which next update read the stream from the start: rows 1-3 twice.)"""
    body = """
dp.create_streaming_table("merged")

@dp.append_flow(target="merged")
def evens():
    return dp.read_stream("changes").filter(F.col("id") % 2 == 0)

@dp.append_flow(target="merged")
def odds():
    return dp.read_stream("changes").filter(F.col("id") % 2 == 1)

@dp.table(name="copy")  # a third reader of the stream: its query is shared
def copy():
    return dp.read_stream("changes")
"""
    runner, storage = make_pipeline(tmp_path, body, [row(1, 1), row(2, 2), row(3, 3)])
    runner.update()
    append(tmp_path, [row(4, 4), row(5, 5)])
    runner.update()
    assert sorted(r["id"] for r in read_rows(spark, storage, "merged")) == [1, 2, 3, 4, 5]
    assert sorted(r["id"] for r in read_rows(spark, storage, "copy")) == [1, 2, 3, 4, 5]


# `both` is declared first, so it is brought up to date first: planning its first flow
# (`from_copy`) brings `copy` up to date, whose query shares `changes`' stream with `other` while
# `both` is still in progress, so `direct` (into `both`, over the same stream) is not gathered.
UNGATHERED_MEMBER = """
dp.create_streaming_table("both")

@dp.append_flow(target="both")
def from_copy():
    return dp.read_stream("copy").withColumn("via", F.lit("copy"))

@dp.append_flow(target="both")
def direct():
    return dp.read_stream("changes").withColumn("via", F.lit("direct"))

@dp.table(name="copy")
def copy():
    return dp.read_stream("changes")

@dp.table(name="other")
def other():
    return dp.read_stream("changes")
"""


def test_a_member_its_shared_query_did_not_gather_writes_each_row_once(spark, tmp_path):
    """`direct` joins the shared query over `changes` after its first update; in each later one
    the shared query starts before `direct` is planned. It must go on from where the shared query
    is (its checkpoint taken over), and the shared query must keep its members. (The second turn
    used to rewrite the members file without them: all read the stream from the start again.)"""
    runner, storage = make_pipeline(tmp_path, UNGATHERED_MEMBER, [row(1, 1), row(2, 2)])
    runner.update()
    for rows in ([row(3, 3)], [row(4, 4), row(5, 5)]):
        append(tmp_path, rows)
        runner.update()
    ids = [1, 2, 3, 4, 5]
    got = sorted((r["via"], r["id"]) for r in read_rows(spark, storage, "both"))
    assert got == sorted([("copy", i) for i in ids] + [("direct", i) for i in ids])
    for table in ("copy", "other"):
        assert sorted(r["id"] for r in read_rows(spark, storage, table)) == ids, table


# `copy` and `other` share the query over `changes`; `third` comes later.
SHARED_TABLES = """
@dp.table(name="copy")
def copy():
    return dp.read_stream("changes")

@dp.table(name="other")
def other():
    return dp.read_stream("changes")
"""
THIRD_TABLE = """

@dp.table(name="third")
def third():
    return dp.read_stream("changes")
"""


def test_members_of_a_shared_query_with_nothing_new_stay_when_a_flow_joins_its_stream(spark, tmp_path):
    """An update in which the stream has nothing new runs none of its shared query's members; a
    flow added to the stream then runs in its own query. The members must stay members (or go
    on from their checkpoint), not be dropped and read the stream from the start next time."""
    runner, storage = make_pipeline(tmp_path, SHARED_TABLES, [row(1, 1), row(2, 2)])
    runner.update()
    pipeline = tmp_path / "transformations" / "pipeline.py"
    pipeline.write_text(pipeline.read_text(encoding="utf-8") + THIRD_TABLE, encoding="utf-8")
    runner.update()  # nothing new: only `third` runs
    append(tmp_path, [row(3, 3)])
    runner.update()
    for table in ("copy", "other", "third"):
        assert sorted(r["id"] for r in read_rows(spark, storage, table)) == [1, 2, 3], table
