"""The local runner on a user-written pipeline: auto CDC options with DLT semantics, expectation
actions, materialized views, dependency cycles. Real Spark, real Delta tables."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cdc_medallion.config import load_conf
from cdc_medallion.errors import ExpectationFailed, GraphError
from cdc_medallion.runner import expectations
from cdc_medallion.runner.auto_cdc import AutoCdcApplier
from cdc_medallion.runner.local import LocalRunner
from cdc_medallion.storage.delta_rs import DeltaRsStore
from tests.helpers import datasets, read_rows

PIPELINE_HEAD = """
from pyspark.sql import functions as F
from cdc_medallion import dp
from cdc_medallion.config import active_conf
from cdc_medallion.sources import landing_stream

SCHEMA = "id INT, name STRING, city STRING, seq INT, op STRING"

@dp.table(name="raw")
def raw():
    return landing_stream(active_conf().sources[0])

@dp.temporary_view(name="changes")
def changes():
    parsed = F.from_json(F.col("value").cast("string"), SCHEMA)
    return dp.read_stream("raw").select(parsed.alias("r")).select("r.*")
"""


@pytest.fixture(params=[100_000, 3, 0], ids=["small-in-driver", "over-a-limit-of-3", "all-by-spark"])
def driver_rows(request) -> int:
    """`driver_apply_max_rows`: batches handled in the driver (all, some, none) give what Spark gives."""
    return request.param


def make_pipeline(
    tmp_path: Path, body: str, rows: list[dict], driver_rows: int | None = None, batch: int | None = None
) -> tuple[LocalRunner, Path]:
    folder = tmp_path / "transformations"
    folder.mkdir(exist_ok=True)
    (folder / "pipeline.py").write_text(PIPELINE_HEAD + textwrap.dedent(body), encoding="utf-8")
    data = tmp_path / "input.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    conf = tmp_path / "conf.yml"
    conf.write_text(
        f"pipeline: {{name: t, storage: {tmp_path / 'storage'}, transformations: {folder}, expectations: {tmp_path}"
        + ("" if driver_rows is None else f", driver_apply_max_rows: {driver_rows}")
        + ("" if batch is None else f", max_messages_per_batch: {batch}")
        + "}\n"
        f"sources: [{{name: s, format: debezium-json, input: {{path: {data}}}}}]\n",
        encoding="utf-8",
    )
    return LocalRunner(load_conf(conf)), tmp_path / "storage"


def append(tmp_path: Path, rows: list[dict]) -> None:
    with (tmp_path / "input.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))


def row(id: int, seq: int, name: str | None = "n", city: str | None = "c", op: str = "U") -> dict:
    return {"id": id, "name": name, "city": city, "seq": seq, "op": op}


def test_scd2_tracks_only_the_listed_columns_and_updates_the_rest_in_place(spark, tmp_path, driver_rows):
    runner, storage = make_pipeline(
        tmp_path,
        """
        dp.create_streaming_table("people")
        dp.create_auto_cdc_flow(target="people", source="changes", keys=["id"], sequence_by="seq",
                                apply_as_deletes="op = 'D'", except_column_list=["op", "seq"],
                                stored_as_scd_type=2, track_history_column_list=["name"])
    """,
        [row(1, 1, "ann", "oslo"), row(1, 2, "ann", "rome"), row(1, 3, "anne", "rome"), row(1, 4, op="D")],
        driver_rows=driver_rows,
    )
    runner.update()
    history = sorted(read_rows(spark, storage, "people"), key=lambda r: r["__START_AT"])
    assert [(r["name"], r["city"], r["__START_AT"], r["__END_AT"]) for r in history] == [
        ("ann", "rome", 1, 3),  # the city change (untracked) updated the version in place
        ("anne", "rome", 3, 4),  # closed by the delete
    ]
    assert set(history[0]) == {"id", "name", "city", "__START_AT", "__END_AT"}


def test_scd1_truncate_column_list_and_ignore_null_updates(spark, tmp_path, driver_rows):
    runner, storage = make_pipeline(
        tmp_path,
        """
        dp.create_streaming_table("people")
        dp.create_auto_cdc_flow(target="people", source="changes", keys=["id"], sequence_by="seq",
                                apply_as_truncates="op = 'T'", column_list=["id", "name", "city"],
                                ignore_null_updates=True)
    """,
        [row(1, 1, "ann", "oslo"), row(2, 2, "bob", "bergen"), row(1, 3, None, "rome")],
        driver_rows=driver_rows,
    )
    runner.update()
    assert {r["id"]: (r["name"], r["city"]) for r in read_rows(spark, storage, "people")} == {
        1: ("ann", "rome"),  # NULL name ignored, city updated
        2: ("bob", "bergen"),
    }
    append(tmp_path, [row(0, 10, op="T"), row(3, 11, "cy", "x"), row(2, 9, "late", "x")])
    runner.update()
    # the truncate at 10 removed everything before it; the late event at 9 does not come back
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people")} == {3: "cy"}
    # a later batch still knows the stored truncate: the late event at 8 stays out
    append(tmp_path, [row(4, 12, "di", "y"), row(1, 8, "old", "z")])
    runner.update()
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people")} == {3: "cy", 4: "di"}


def test_truncates_by_timestamp_sequence_stored_and_new_in_one_batch(spark, tmp_path, driver_rows):
    """A batch holding a new truncate meets the one stored by an earlier batch: both are the
    same kind of timestamp, read back from the state table as Spark collects them."""
    runner, storage = make_pipeline(
        tmp_path,
        """
        dp.create_streaming_table("people")
        dp.create_auto_cdc_flow(target="people", source="changes", keys=["id"],
                                sequence_by=F.expr("timestamp_seconds(seq)"),
                                apply_as_truncates="op = 'T'", except_column_list=["op", "seq"])
    """,
        [row(1, 1, "ann"), row(0, 10, op="T"), row(2, 11, "bob")],
        driver_rows=driver_rows,
    )
    runner.update()
    append(tmp_path, [row(0, 20, op="T"), row(3, 21, "cy"), row(1, 8, "late")])
    runner.update()
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people")} == {3: "cy"}


@pytest.mark.parametrize("broadcast_keys", [2_000_000, 0], ids=["keys-broadcast", "keys-shuffled"])
def test_a_batch_rebuilds_only_the_keys_it_touches_by_either_join(spark, tmp_path, monkeypatch, broadcast_keys):
    """Small batches ship their keys to the target scan; huge ones shuffle. Both give DLT's result."""
    from cdc_medallion.runner import auto_cdc

    monkeypatch.setattr(auto_cdc, "BROADCAST_KEYS", broadcast_keys)
    runner, storage = make_pipeline(
        tmp_path,
        """
        dp.create_streaming_table("people")
        dp.create_auto_cdc_flow(target="people", source="changes", keys=["id"], sequence_by="seq",
                                apply_as_deletes="op = 'D'", except_column_list=["op", "seq"])
        dp.create_streaming_table("people_history")
        dp.create_auto_cdc_flow(target="people_history", source="changes", keys=["id"], sequence_by="seq",
                                apply_as_deletes="op = 'D'", except_column_list=["op", "seq"],
                                stored_as_scd_type=2)
    """,
        [row(1, 1, "ann"), row(2, 2, "bob"), row(3, 3, "cy")],
        driver_rows=0,  # the joins are Spark's
    )
    runner.update()
    append(tmp_path, [row(2, 5, "bo"), row(3, 6, op="D"), row(2, 4, "late"), row(4, 7, "di")])
    runner.update()
    current = {r["id"]: (r["name"], r["__sequence"]) for r in read_rows(spark, storage, "people")}
    assert current == {1: ("ann", 1), 2: ("bo", 5), 4: ("di", 7)}  # 1 untouched, 3 deleted
    rows = read_rows(spark, storage, "people_history")
    history = [(r["id"], r["name"], r["__START_AT"], r["__END_AT"]) for r in rows]
    history.sort(key=lambda version: (version[0], version[2]))
    assert history == [
        (1, "ann", 1, None),
        (2, "bob", 2, 4),
        (2, "late", 4, 5),  # the late event is placed between the versions it falls between
        (2, "bo", 5, None),
        (3, "cy", 3, 6),
        (4, "di", 7, None),
    ]


def test_scd2_writes_only_the_versions_a_batch_changed(spark, tmp_path, driver_rows):
    """A redelivered event rewrites nothing; a late event rewrites only the versions around it."""
    runner, storage = make_pipeline(
        tmp_path,
        """
        dp.create_streaming_table("people_history")
        dp.create_auto_cdc_flow(target="people_history", source="changes", keys=["id"], sequence_by="seq",
                                apply_as_deletes="op = 'D'", except_column_list=["op", "seq"],
                                stored_as_scd_type=2)
    """,
        [row(1, 1, "ann"), row(2, 2, "bob"), row(3, 3, "cy"), row(5, 8, "eve")],
        driver_rows=driver_rows,
    )
    runner.update()
    append(
        tmp_path,
        [
            row(1, 1, "ann"),  # redelivered: its version stays as stored
            row(2, 5, "bo"),
            row(2, 4, "late"),  # ends bob's version and starts one that bo's ends
            row(3, 6, op="D"),  # ends cy's version
            row(4, 7, "di"),
            row(5, 0, "eve"),  # eve's version now starts at 0: the one stored at 8 goes
        ],
    )
    [flow] = [f for f in runner.update().flows.values() if f.target == "people_history"]
    history = sorted(
        (r["id"], r["name"], r["__START_AT"], r["__END_AT"]) for r in read_rows(spark, storage, "people_history")
    )
    assert history == [
        (1, "ann", 1, None),
        (2, "bo", 5, None),
        (2, "bob", 2, 4),
        (2, "late", 4, 5),
        (3, "cy", 3, 6),
        (4, "di", 7, None),
        (5, "eve", 0, None),
    ]
    # Written: bob's and cy's ends, late, bo, di and eve at 0; deleted: eve at 8. Ann's is untouched.
    assert (flow.output_rows, flow.deleted) == (6, 1)
    assert not (Path(storage) / "_landing").exists()  # the changes spilled for MERGE are gone


SHARED_VIEW_FLOWS = """
@dp.temporary_view(name="stamped")
@dp.expect_or_drop("named", "name IS NOT NULL")
def stamped():  # uuid(): each evaluation of the view stamps its rows anew
    return dp.read_stream("changes").withColumn("stamp", F.expr("uuid()"))

dp.create_streaming_table("people")
dp.create_auto_cdc_flow(target="people", source="stamped", keys=["id"], sequence_by="seq",
                        except_column_list=["op"])
"""
HISTORY_FLOW = """
dp.create_streaming_table("people_history")
dp.create_auto_cdc_flow(target="people_history", source="stamped", keys=["id"], sequence_by="seq",
                        except_column_list=["op"], stored_as_scd_type=2)
"""


def test_both_auto_cdc_flows_apply_one_evaluation_of_their_view(spark, tmp_path, driver_rows):
    """SCD1 and SCD2 reading the same range of one view in an update share its evaluation (parsed,
    checked and counted once); a flow that is behind reads its own range; nothing stays cached."""
    persisted = spark.sparkContext._jsc.sc().getPersistentRDDs()
    cached_before = persisted.size()
    runner, storage = make_pipeline(
        tmp_path,
        SHARED_VIEW_FLOWS + HISTORY_FLOW,
        [row(1, 1, "ann"), row(2, 2, None), row(3, 3, "cy")],
        driver_rows=driver_rows,
    )
    runner.update()
    current = {r["id"]: r["stamp"] for r in read_rows(spark, storage, "people")}
    history = {r["id"]: r["stamp"] for r in read_rows(spark, storage, "people_history")}
    assert sorted(current) == [1, 3] and current == history  # one evaluation: the same stamps
    log = read_rows(spark, storage, "event_log")
    counts = [
        {x["name"]: (x["passed_records"], x["failed_records"]) for x in progress["data_quality"]["expectations"]}
        for progress in (json.loads(e["details"])["flow_progress"] for e in log if e["event_type"] == "flow_progress")
        if progress["data_quality"]["expectations"]
    ]
    assert counts == [{"named": (2, 1)}, {"named": (2, 1)}]  # each flow still reports what it applied
    assert spark.sparkContext._jsc.sc().getPersistentRDDs().size() == cached_before

    # The history flow joins later: it reads everything, the current-state flow only the new row.
    (tmp_path / "late").mkdir()
    runner, storage = make_pipeline(
        tmp_path / "late", SHARED_VIEW_FLOWS, [row(1, 1, "ann"), row(2, 2, "bob")], driver_rows=driver_rows
    )
    runner.update()
    append(tmp_path / "late", [row(1, 3, "anne")])
    (tmp_path / "late" / "transformations" / "pipeline.py").write_text(
        PIPELINE_HEAD + SHARED_VIEW_FLOWS + HISTORY_FLOW, encoding="utf-8"
    )
    runner = LocalRunner(load_conf(tmp_path / "late" / "conf.yml"))
    runner.update()
    current = {r["id"]: (r["name"], r["stamp"]) for r in read_rows(spark, storage, "people")}
    versions = sorted(read_rows(spark, storage, "people_history"), key=lambda r: (r["id"], r["__START_AT"]))
    assert [(r["id"], r["name"], r["__START_AT"], r["__END_AT"]) for r in versions] == [
        (1, "ann", 1, 3),
        (1, "anne", 3, None),
        (2, "bob", 2, None),
    ]
    assert current[1][0] == "anne" and current[1][1] != versions[1]["stamp"]  # read apart, evaluated apart
    assert spark.sparkContext._jsc.sc().getPersistentRDDs().size() == cached_before


def test_expect_or_fail_aborts_with_nothing_committed(spark, tmp_path, driver_rows):
    runner, storage = make_pipeline(
        tmp_path,
        """
        @dp.table(name="valid")
        @dp.expect_or_fail("seq_positive", "seq > 0")
        def valid():
            return dp.read_stream("changes")
    """,
        [row(1, 1), row(2, -5)],
        driver_rows=driver_rows,
    )
    with pytest.raises(ExpectationFailed, match="seq_positive failed on 1 row"):
        runner.update()
    assert "valid" not in datasets(storage) or datasets(storage)["valid"]["rows"] == 0
    log = read_rows(spark, storage, "event_log")
    assert [
        json.loads(e["details"])["update_progress"]["state"] for e in log if e["event_type"] == "update_progress"
    ] == ["FAILED"]


def test_drop_and_quarantine_counts_and_materialized_view(spark, tmp_path, driver_rows):
    runner, storage = make_pipeline(
        tmp_path,
        """
        @dp.table(name="valid")
        @dp.expect("has_city", "city IS NOT NULL")
        @dp.expect_or_drop("named", "name IS NOT NULL")
        @dp.expect_or_quarantine("known_op", "op IN ('U', 'D')")
        def valid():
            return dp.read_stream("changes")

        @dp.materialized_view(name="per_city")
        def per_city():
            return dp.read("valid").groupBy("city").count()
    """,
        [row(1, 1), row(2, 2, name=None), row(3, 3, city=None), row(4, 4, op="X")],
        driver_rows=driver_rows,
    )
    runner.update()
    assert sorted(r["id"] for r in read_rows(spark, storage, "valid")) == [1, 3]
    [quarantined] = read_rows(spark, storage, "valid_quarantine")
    assert quarantined["id"] == 4 and quarantined["failed_expectations"] == ["known_op"]
    assert {r["city"]: r["count"] for r in read_rows(spark, storage, "per_city")} == {None: 1, "c": 1}
    append(tmp_path, [row(5, 5)])
    runner.update()  # incremental: only the new row flows; the view is recomputed
    assert sorted(r["id"] for r in read_rows(spark, storage, "valid")) == [1, 3, 5]
    assert {r["city"]: r["count"] for r in read_rows(spark, storage, "per_city")} == {None: 1, "c": 2}
    progress = [
        json.loads(e["details"])["flow_progress"]
        for e in read_rows(spark, storage, "event_log")
        if e["event_type"] == "flow_progress" and e["origin"]["dataset_name"] == "valid"
    ]
    first = {x["name"]: (x["passed_records"], x["failed_records"]) for x in progress[0]["data_quality"]["expectations"]}
    assert first == {"has_city": (3, 1), "named": (3, 1), "known_op": (3, 1)}
    assert progress[0]["data_quality"]["dropped_records"] == 1


def test_rules_named_with_quotes_and_constraints_with_comments(spark, tmp_path, driver_rows):
    """Rules are evaluated as one SQL expression: a name's quotes and backslashes stay text, and
    a `--` comment in one constraint does not swallow the rules after it."""
    runner, storage = make_pipeline(
        tmp_path,
        r"""
        @dp.table(name="valid")
        @dp.expect_or_drop("it's \\ named", "name IS NOT NULL -- a comment to the end of the line")
        @dp.expect_or_quarantine("op 'known'", "op IN ('U', 'D')")
        def valid():
            return dp.read_stream("changes")
    """,
        [row(1, 1), row(2, 2, name=None), row(3, 3, op="X"), row(4, 4, name=None, op="X")],
        driver_rows=driver_rows,
    )
    runner.update()
    assert [r["id"] for r in read_rows(spark, storage, "valid")] == [1]
    quarantined = sorted(read_rows(spark, storage, "valid_quarantine"), key=lambda r: r["id"])
    assert [(r["id"], r["failed_expectations"]) for r in quarantined] == [
        (3, ["op 'known'"]),
        (4, ["it's \\ named", "op 'known'"]),
    ]
    [progress] = [
        json.loads(e["details"])["flow_progress"]
        for e in read_rows(spark, storage, "event_log")
        if e["event_type"] == "flow_progress" and e["origin"]["dataset_name"] == "valid"
    ]
    counts = {x["name"]: (x["passed_records"], x["failed_records"]) for x in progress["data_quality"]["expectations"]}
    assert counts == {"it's \\ named": (2, 2), "op 'known'": (2, 2)}
    assert progress["data_quality"]["dropped_records"] == 1  # row 2; row 4 is quarantined, not dropped


PER_PARITY_FLOWS = """
for parity in ("even", "odd"):
    def feed(parity=parity):
        return dp.read_stream("changes").filter(F.col("id") % 2 == (0 if parity == "even" else 1))

    dp.temporary_view(name=f"{parity}_changes")(dp.expect_or_drop("named", "name IS NOT NULL")(feed))
    for scd in (1, 2):
        dp.create_streaming_table(f"{parity}_{scd}")
        dp.create_auto_cdc_flow(target=f"{parity}_{scd}", source=f"{parity}_changes", keys=["id"],
                                sequence_by="seq", except_column_list=["op"], stored_as_scd_type=scd)
"""


def test_view_batches_with_no_rows_cost_no_job(spark, tmp_path, monkeypatch, driver_rows):
    """With many tables, most tables' views hold none of a small batch's rows, and often nothing
    is new at all. What the view's expectations counted, or a read that found nothing new,
    already says so: no Spark job may ask again. Progress is still recorded."""
    told: list[tuple[str, bool]] = []
    apply = AutoCdcApplier.apply

    def spied(self, batch, txns, known_empty=False):
        told.append((self.flow.target, known_empty))
        return apply(self, batch, txns, known_empty=known_empty)

    monkeypatch.setattr(AutoCdcApplier, "apply", spied)
    runner, storage = make_pipeline(tmp_path, PER_PARITY_FLOWS, [row(1, 1, "ann"), row(2, 2, "bob")], driver_rows)
    runner.update()
    assert sorted(told) == [("even_1", False), ("even_2", False), ("odd_1", False), ("odd_2", False)]

    told.clear()
    append(tmp_path, [row(3, 3, "cy"), row(4, 4, None)])  # an odd row, and an even one the view drops
    runner.update()
    assert sorted(told) == [("even_1", True), ("even_2", True), ("odd_1", False), ("odd_2", False)]
    assert sorted(r["id"] for r in read_rows(spark, storage, "odd_1")) == [1, 3]
    assert sorted(r["id"] for r in read_rows(spark, storage, "even_1")) == [2]
    store = DeltaRsStore(storage, spark)
    assert all(store.txn_version(n, f"{n}<-raw") == store.version("raw") for n in ("even_1", "even_2"))

    told.clear()
    jobs = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup(f"nothing-new-{driver_rows}", "")
    try:
        runner.update()
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert told == []
    assert jobs.getJobIdsForGroup(f"nothing-new-{driver_rows}") == []

    # The even flows recorded the range they found empty: a new even row is read alone.
    append(tmp_path, [row(6, 6, "di")])
    runner.update()
    assert sorted(r["id"] for r in read_rows(spark, storage, "even_1")) == [2, 6]
    assert [r["id"] for r in read_rows(spark, storage, "even_2") if r["__END_AT"] is None] in ([2, 6], [6, 2])


def test_views_share_one_read_of_a_small_input(spark, tmp_path, monkeypatch, driver_rows):
    """Every table's view reads the same new silver range: when it is small, it is read into
    the driver once per update and served to each view from memory. The rows are the files'
    rows, and two reads of it can still be joined as two tables can."""
    reads: list[tuple[str, str]] = []
    for method in ("read_appended", "read_appended_arrow"):
        original = getattr(DeltaRsStore, method)

        def spied(self, name, *args, method=method, original=original, **kwargs):
            reads.append((method, name))
            return original(self, name, *args, **kwargs)

        monkeypatch.setattr(DeltaRsStore, method, spied)
    runner, storage = make_pipeline(tmp_path, PER_PARITY_FLOWS, [row(1, 1, "ann"), row(2, 2, "bob")], driver_rows)
    runner.update()
    raw = [r for r in reads if r[1] == "raw"]
    if driver_rows == 0:  # the user asked for Spark only: every view scans the files
        assert raw == [("read_appended", "raw")] * 4
    else:
        assert raw == [("read_appended_arrow", "raw")]
    assert sorted(r["id"] for r in read_rows(spark, storage, "odd_2")) == [1]
    assert sorted(r["id"] for r in read_rows(spark, storage, "even_1")) == [2]

    store = DeltaRsStore(storage, spark)
    read = ("raw", None, store.version("raw"))
    left, right = runner.shared_read(read), runner.shared_read(read)
    assert sorted(map(tuple, left.collect())) == sorted(map(tuple, store.read_appended(*read).collect()))
    joined = left.join(right, left["_line"] == right["_line"]).select(left["value"], right["value"].alias("v"))
    assert joined.count() == 2


# One view read by two flows, as gold's SCD1 and SCD2 flows read a table's view.
NAMED_VIEW_FLOWS = """
dp.temporary_view(name="named")(dp.expect_or_drop("named", "name IS NOT NULL")(
    lambda: dp.read_stream("changes")))
for scd in (1, 2):
    dp.create_streaming_table(f"people_{scd}")
    dp.create_auto_cdc_flow(target=f"people_{scd}", source="named", keys=["id"], sequence_by="seq",
                            except_column_list=["op", "seq"], stored_as_scd_type=scd)
"""


def test_a_backlog_checks_each_view_batch_once_for_both_flows(spark, tmp_path, monkeypatch, driver_rows):
    """Gold's SCD1 and SCD2 flows read one view. Through a backlog they run batch by batch in
    turn, so the second reads the batch the first checked instead of checking it again (one
    after the other, every batch but the last was checked twice)."""
    checked: list[str] = []
    mark = expectations.mark

    def spied(df, rules, name):
        checked.append(name)
        return mark(df, rules, name)

    monkeypatch.setattr(expectations, "mark", spied)
    rows = [row(i % 3, i, f"n{i}") for i in range(1, 7)] + [row(1, 7, None)]
    runner, storage = make_pipeline(tmp_path, NAMED_VIEW_FLOWS, rows, driver_rows, batch=2)
    runner.update()
    assert checked.count("named") == 4  # 7 messages in batches of 2
    assert runner.result.flows["people_1"].batches == runner.result.flows["people_2"].batches == 4
    current = {r["id"]: r["name"] for r in read_rows(spark, storage, "people_1")}
    assert current == {0: "n6", 1: "n4", 2: "n5"}
    history = read_rows(spark, storage, "people_2")
    assert sorted((r["id"], r["name"], r["__END_AT"]) for r in history) == [
        (0, "n3", 6),
        (0, "n6", None),
        (1, "n1", 4),
        (1, "n4", None),
        (2, "n2", 5),
        (2, "n5", None),
    ]


def test_dependency_cycle_is_reported(spark, tmp_path):
    runner, _ = make_pipeline(
        tmp_path,
        """
        @dp.table(name="a")
        def a():
            return dp.read_stream("b")

        @dp.table(name="b")
        def b():
            return dp.read_stream("a")
    """,
        [row(1, 1)],
    )
    with pytest.raises(GraphError, match="dependency cycle: a -> b -> a"):
        runner.update()


def test_a_view_with_nothing_new_is_built_once_and_a_reader_behind_still_reads_it(spark, tmp_path, monkeypatch):
    """Building a view's query costs JVM calls for every column, and with many tables most views
    have nothing new: the second flow reading a view takes the first one's empty batch. Only when
    it is caught up itself: a flow that failed before committing a batch the other committed
    (out of step) builds the view and reads what it missed."""
    empty_reads: list[str] = []
    empty = DeltaRsStore.empty

    def spied_empty(self, name):
        empty_reads.append(name)
        return empty(self, name)

    monkeypatch.setattr(DeltaRsStore, "empty", spied_empty)
    runner, storage = make_pipeline(tmp_path, NAMED_VIEW_FLOWS, [row(1, 1, "ann"), row(2, 2, "bob")])
    runner.update()
    empty_reads.clear()
    runner.update()
    assert empty_reads == ["raw"]  # the view was built for people_1 only

    apply = AutoCdcApplier.apply

    def failing_for_people_2(self, batch, txns, known_empty=False):
        if self.flow.target == "people_2":
            raise RuntimeError("killed before people_2 committed")
        return apply(self, batch, txns, known_empty=known_empty)

    append(tmp_path, [row(3, 3, "cy"), row(1, 4, "ann2")])
    monkeypatch.setattr(AutoCdcApplier, "apply", failing_for_people_2)
    with pytest.raises(RuntimeError, match="killed before people_2"):
        runner.update()
    monkeypatch.setattr(AutoCdcApplier, "apply", apply)
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people_1")} == {1: "ann2", 2: "bob", 3: "cy"}

    runner.update()  # people_1 has nothing new; people_2 has the batch it failed on
    current = sorted((r["id"], r["name"]) for r in read_rows(spark, storage, "people_2") if r["__END_AT"] is None)
    assert current == [(1, "ann2"), (2, "bob"), (3, "cy")]
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people_1")} == {1: "ann2", 2: "bob", 3: "cy"}
