"""The local runner on a user-written pipeline: auto CDC options with DLT semantics, expectation
actions, materialized views, dependency cycles. Real Spark, real Delta tables."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from pyspark.sql.streaming import StreamingQueryListener

from cdc_medallion.config import load_conf
from cdc_medallion.errors import CdcMedallionError, ExpectationFailed, GraphError
from cdc_medallion.names import EVENT_LOG
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.runner import expectations
from cdc_medallion.runner.auto_cdc.applier import AutoCdcApplier
from cdc_medallion.runner.local import LocalRunner
from cdc_medallion.storage import delta_rs
from cdc_medallion.storage.delta_store import DeltaStore
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


def make_pipeline(tmp_path: Path, body: str, rows: list[dict], batch: int | None = None) -> tuple[LocalRunner, Path]:
    folder = tmp_path / "transformations"
    folder.mkdir(exist_ok=True)
    (folder / "pipeline.py").write_text(PIPELINE_HEAD + textwrap.dedent(body), encoding="utf-8")
    data = tmp_path / "input.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    conf = tmp_path / "conf.yml"
    conf.write_text(
        f"pipeline: {{name: t, storage: {tmp_path / 'storage'}, transformations: {folder}, expectations: {tmp_path}"
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


def test_scd2_tracks_only_the_listed_columns_and_updates_the_rest_in_place(spark, tmp_path):
    runner, storage = make_pipeline(
        tmp_path,
        """
        dp.create_streaming_table("people")
        dp.create_auto_cdc_flow(target="people", source="changes", keys=["id"], sequence_by="seq",
                                apply_as_deletes="op = 'D'", except_column_list=["op", "seq"],
                                stored_as_scd_type=2, track_history_column_list=["name"])
    """,
        [row(1, 1, "ann", "oslo"), row(1, 2, "ann", "rome"), row(1, 3, "anne", "rome"), row(1, 4, op="D")],
    )
    runner.update()
    history = sorted(read_rows(spark, storage, "people"), key=lambda r: r["__START_AT"])
    assert [(r["name"], r["city"], r["__START_AT"], r["__END_AT"]) for r in history] == [
        ("ann", "rome", 1, 3),  # the city change (untracked) updated the version in place
        ("anne", "rome", 3, 4),  # closed by the delete
    ]
    assert set(history[0]) == {"id", "name", "city", "__START_AT", "__END_AT"}


def test_scd1_truncate_column_list_and_ignore_null_updates(spark, tmp_path):
    runner, storage = make_pipeline(
        tmp_path,
        """
        dp.create_streaming_table("people")
        dp.create_auto_cdc_flow(target="people", source="changes", keys=["id"], sequence_by="seq",
                                apply_as_truncates="op = 'T'", column_list=["id", "name", "city"],
                                ignore_null_updates=True)
    """,
        [row(1, 1, "ann", "oslo"), row(2, 2, "bob", "bergen"), row(1, 3, None, "rome")],
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


def test_truncates_by_timestamp_sequence_stored_and_new_in_one_batch(spark, tmp_path):
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
    )
    runner.update()
    append(tmp_path, [row(0, 20, op="T"), row(3, 21, "cy"), row(1, 8, "late")])
    runner.update()
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people")} == {3: "cy"}


@pytest.mark.parametrize("broadcast_keys", [2_000_000, 0], ids=["keys-broadcast", "keys-shuffled"])
def test_a_batch_rebuilds_only_the_keys_it_touches_by_either_join(spark, tmp_path, monkeypatch, broadcast_keys):
    """Small batches ship their keys to the target scan; huge ones shuffle. Both give DLT's result."""
    from cdc_medallion.runner.auto_cdc import target

    monkeypatch.setattr(target, "BROADCAST_KEYS", broadcast_keys)
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


def test_scd2_writes_only_the_versions_a_batch_changed(spark, tmp_path):
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


def cached_by_us(spark) -> set[int]:
    """The persisted RDDs, less Delta's own cache of each table's log state (Delta evicts it)."""
    persisted = spark.sparkContext._jsc.getPersistentRDDs()
    return {k for k, rdd in persisted.items() if not (rdd.name() or "").startswith("Delta Table State")}


def test_both_auto_cdc_flows_apply_one_evaluation_of_their_view(spark, tmp_path):
    """SCD1 and SCD2 reading one view share each batch's evaluation (parsed, checked and counted
    once); nothing stays cached."""
    cached_before = cached_by_us(spark)
    runner, storage = make_pipeline(
        tmp_path,
        SHARED_VIEW_FLOWS + HISTORY_FLOW,
        [row(1, 1, "ann"), row(2, 2, None), row(3, 3, "cy")],
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
    assert cached_by_us(spark) == cached_before

    # The history flow joins later: it reads everything, the current-state flow only the new row.
    (tmp_path / "late").mkdir()
    runner, storage = make_pipeline(tmp_path / "late", SHARED_VIEW_FLOWS, [row(1, 1, "ann"), row(2, 2, "bob")])
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
    # The view's readers changed, so their query is a new one: it reads the view from the start,
    # once for both flows (the current state comes out the same).
    assert current[1][0] == "anne" and current[1][1] == versions[1]["stamp"]
    assert cached_by_us(spark) == cached_before


def test_expect_or_fail_aborts_with_nothing_committed(spark, tmp_path):
    runner, storage = make_pipeline(
        tmp_path,
        """
        @dp.table(name="valid")
        @dp.expect_or_fail("seq_positive", "seq > 0")
        def valid():
            return dp.read_stream("changes")
    """,
        [row(1, 1), row(2, -5)],
    )
    with pytest.raises(ExpectationFailed, match="seq_positive failed on 1 row"):
        runner.update()
    assert "valid" not in datasets(storage) or datasets(storage)["valid"]["rows"] == 0
    log = read_rows(spark, storage, "event_log")
    assert [
        json.loads(e["details"])["update_progress"]["state"] for e in log if e["event_type"] == "update_progress"
    ] == ["FAILED"]


def test_drop_and_quarantine_counts_and_materialized_view(spark, tmp_path):
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
        for e in sorted(read_rows(spark, storage, "event_log"), key=lambda e: e["timestamp"])
        if e["event_type"] == "flow_progress" and e["origin"]["dataset_name"] == "valid"
    ]
    first = {x["name"]: (x["passed_records"], x["failed_records"]) for x in progress[0]["data_quality"]["expectations"]}
    assert first == {"has_city": (3, 1), "named": (3, 1), "known_op": (3, 1)}
    assert progress[0]["data_quality"]["dropped_records"] == 1


def test_rules_named_with_quotes_and_constraints_with_comments(spark, tmp_path):
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
        for e in sorted(read_rows(spark, storage, "event_log"), key=lambda e: e["timestamp"])
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


def test_an_update_with_nothing_new_starts_no_query_and_runs_no_job(spark, tmp_path):
    """A query whose inputs have not changed since it last caught up is not started: with many
    tables, most queries of most updates have nothing to do. A view batch holding none of a
    table's rows applies nothing and commits nothing to it."""
    runner, storage = make_pipeline(tmp_path, PER_PARITY_FLOWS, [row(1, 1, "ann"), row(2, 2, "bob")])
    runner.update()
    store = DeltaStore(storage, spark)
    even = {name: store.version(name) for name in ("even_1", "even_2")}

    append(tmp_path, [row(3, 3, "cy"), row(4, 4, None)])  # an odd row, and an even one the view drops
    result = runner.update()
    assert sorted(r["id"] for r in read_rows(spark, storage, "odd_1")) == [1, 3]
    assert sorted(r["id"] for r in read_rows(spark, storage, "even_1")) == [2]
    assert {name: store.version(name) for name in even} == even  # nothing committed to them
    assert result.flows["even_1"].batches == 1 and result.flows["even_1"].output_rows == 0

    jobs = spark.sparkContext.statusTracker()
    versions = {name: store.version(name) for name in ("odd_1", "odd_2", "even_1", "even_2", "changes")}
    log_version = store.version(EVENT_LOG)
    spark.sparkContext.setJobGroup("nothing-new", "")
    try:
        result = runner.update()
    finally:
        spark.sparkContext.setJobGroup("", "")
    # One job: the update's events appended to the event log, as Databricks records every update.
    ran = [spark.sparkContext._jsc.sc().statusStore().job(j).name() for j in jobs.getJobIdsForGroup("nothing-new")]
    assert len(ran) == 1 and ran[0].startswith("save"), ran
    assert store.version(EVENT_LOG) == log_version + 1
    assert {name: store.version(name) for name in versions} == versions
    assert not [f for f in result.flows.values() if f.batches]

    append(tmp_path, [row(6, 6, "di")])  # the even flows read on from where they were
    runner.update()
    assert sorted(r["id"] for r in read_rows(spark, storage, "even_1")) == [2, 6]
    assert sorted(r["id"] for r in read_rows(spark, storage, "even_2") if r["__END_AT"] is None) == [2, 6]


def test_an_update_with_nothing_new_does_not_build_the_queries_of_a_shared_query(spark, tmp_path):
    """The flows sharing one query over a stream with nothing new are not planned: their query
    functions (gold's views, tens of columns each) are not called, which over hundreds of tables
    was most of such an update. New rows then reach them as before."""
    calls = tmp_path / "calls"
    counted = f"    def feed(parity=parity):\n        open({str(calls)!r}, 'a').write(parity + '\\n')\n"
    body = PER_PARITY_FLOWS.replace("    def feed(parity=parity):\n", counted)
    assert body != PER_PARITY_FLOWS
    runner, storage = make_pipeline(tmp_path, body, [row(1, 1, "ann"), row(2, 2, "bob")])
    for _ in range(2):  # the second update: the flows share one query, and it has caught up
        runner.update()
    called = calls.read_text().split()

    result = runner.update()
    assert calls.read_text().split() == called
    assert not [f for f in result.flows.values() if f.batches]

    append(tmp_path, [row(3, 3, "cy"), row(4, 4, "di")])
    runner.update()
    assert len(calls.read_text().split()) > len(called)
    assert sorted(r["id"] for r in read_rows(spark, storage, "odd_1")) == [1, 3]
    assert sorted(r["id"] for r in read_rows(spark, storage, "even_2")) == [2, 4]


# Members of one shared query over a streaming table, each counting the calls of its query
# function: four by the remainder of `id`, with a second filter each; one that filters on a
# computed column, which a batch cannot judge before building its rows.
COUNTED_MEMBERS = """
@dp.table(name="typed")
def typed():
    return dp.read_stream("changes")

def counted(name, rows):
    open(CALLS, "a").write(name + "\\n")
    return rows

def member(name, feed, except_columns=("op",)):
    dp.temporary_view(name=f"{name}_changes")(feed)
    dp.create_streaming_table(name)
    dp.create_auto_cdc_flow(target=name, source=f"{name}_changes", keys=["id"], sequence_by="seq",
                            except_column_list=list(except_columns))

for rest in range(4):
    def feed(rest=rest):
        rows = dp.read_stream("typed").filter(F.col("id") % 4 == rest).filter("name IS NOT NULL")
        return counted(f"r{rest}", rows)

    member(f"r{rest}", feed)

def long_feed():
    return counted("long", dp.read_stream("typed").withColumn("size", F.length("name")).filter("size > 3"))

member("long", long_feed, ("op", "size"))
"""


def _calls(path: Path) -> dict[str, int]:
    names = path.read_text(encoding="utf-8").split() if path.exists() else []
    return {name: names.count(name) for name in sorted(set(names))}


def test_a_shared_batch_builds_only_the_members_its_rows_can_reach(spark, tmp_path):
    """A member of a shared query whose filters on the stream's own columns no row of a batch
    passes has no rows in it: its query function is not run on that batch (over hundreds of
    tables, building every member's rows only to find them empty was most of a small update).
    One whose filter reads a computed column is always run; every row still reaches its table."""
    calls = tmp_path / "calls"
    body = f"CALLS = {str(calls)!r}\n" + COUNTED_MEMBERS
    runner, storage = make_pipeline(tmp_path, body, [row(1, 1, "ann"), row(2, 2, "bob"), row(3, 3, "cyd")])
    runner.update()
    # Each planned once, then run on the batch if it may have rows there: r0 has none.
    assert _calls(calls) == {"long": 2, "r0": 1, "r1": 2, "r2": 2, "r3": 2}

    calls.unlink()
    append(tmp_path, [row(5, 4, "dora"), row(6, 5, None), row(9, 6, "ed")])  # remainders 1, 2 (no name), 1
    runner.update()
    assert _calls(calls) == {"long": 2, "r0": 1, "r1": 2, "r2": 1, "r3": 1}
    assert sorted(r["id"] for r in read_rows(spark, storage, "r1")) == [1, 5, 9]
    assert sorted(r["id"] for r in read_rows(spark, storage, "r2")) == [2]
    assert sorted(r["id"] for r in read_rows(spark, storage, "long")) == [5]


def test_a_member_whose_filter_fails_on_a_shared_batch_fails_alone(spark, tmp_path):
    """The look that finds which members a batch feeds evaluates every member's filters on every
    row. When it fails (here a member's cast fails on a name, as it does in that member's own
    rows), each member builds its rows as before: the failing member fails and leaves the
    shared query, the others apply the batch."""
    calls = tmp_path / "calls"
    numbered = 'member("numbered", lambda: dp.read_stream("typed").filter("CAST(name AS INT) > 0"))\n'
    body = f"CALLS = {str(calls)!r}\n" + COUNTED_MEMBERS + numbered
    runner, storage = make_pipeline(tmp_path, body, [row(1, 1, "7"), row(2, 2, "8")])
    runner.update()
    assert sorted(r["id"] for r in read_rows(spark, storage, "numbered")) == [1, 2]

    append(tmp_path, [row(3, 3, "cy"), row(4, 4, "9")])  # "cy" is no number
    result = runner.update(raise_failures=False)
    assert list(result.failures) == ["numbered"], result.failures
    assert "CAST_INVALID_INPUT" in str(result.failures["numbered"].__cause__ or result.failures["numbered"])
    assert sorted(r["id"] for r in read_rows(spark, storage, "r3")) == [3]
    assert sorted(r["id"] for r in read_rows(spark, storage, "r0")) == [4]
    assert sorted(r["id"] for r in read_rows(spark, storage, "numbered")) == [1, 2]


def test_a_run_with_nothing_new_commits_the_event_log_once_with_both_updates(spark, tmp_path):
    """A run is two updates (bronze and silver, then all of it); the first, when it wrote nothing,
    hands its events to the second, so an idle run commits the event log once, and both updates
    are in it. An update that wrote rows commits its events itself, as before."""
    runner, storage = make_pipeline(tmp_path, PER_PARITY_FLOWS, [row(1, 1, "ann")])
    run_pipeline(runner.conf, spark)
    store = DeltaStore(storage, spark)
    assert delta_rs.table_properties(store.path(EVENT_LOG))["delta.checkpointInterval"] == "100"

    before = store.version(EVENT_LOG)
    summary = run_pipeline(runner.conf, spark)
    assert store.version(EVENT_LOG) == before + 1
    events = read_rows(spark, storage, "event_log")
    completed = {
        e["origin"]["update_id"]
        for e in events
        if e["event_type"] == "update_progress" and json.loads(e["details"])["update_progress"]["state"] == "COMPLETED"
    }
    assert len(summary.updates) == 2 and {u.update_id for u in summary.updates} <= completed

    append(tmp_path, [row(2, 2, "bob")])
    before = store.version(EVENT_LOG)
    run_pipeline(runner.conf, spark)
    assert store.version(EVENT_LOG) == before + 2
    assert sorted(r["id"] for r in read_rows(spark, storage, "even_1")) == [2]


# One view read by two flows, as gold's SCD1 and SCD2 flows read a table's view.
NAMED_VIEW_FLOWS = """
dp.temporary_view(name="named")(dp.expect_or_drop("named", "name IS NOT NULL")(
    lambda: dp.read_stream("changes")))
for scd in (1, 2):
    dp.create_streaming_table(f"people_{scd}")
    dp.create_auto_cdc_flow(target=f"people_{scd}", source="named", keys=["id"], sequence_by="seq",
                            except_column_list=["op", "seq"], stored_as_scd_type=scd)
"""


def test_a_backlog_checks_each_view_batch_once_for_both_flows(spark, tmp_path, monkeypatch):
    """Gold's SCD1 and SCD2 flows read one view: they run as one query, so each batch of the view
    is checked once and applied by both, batch by batch through a backlog."""
    checked: list[str] = []
    split = expectations.split

    def spied(marked, rules, name):
        checked.append(name)
        return split(marked, rules, name)

    monkeypatch.setattr(expectations, "split", spied)
    rows = [row(i % 3, i, f"n{i}") for i in range(1, 7)] + [row(1, 7, None)]
    runner, storage = make_pipeline(tmp_path, NAMED_VIEW_FLOWS, rows, batch=2)
    for piece in range(3):  # three updates, each leaving a batch for the gold query
        if piece:
            append(tmp_path, [row(3, 10 + piece, f"m{piece}")])
        runner.update()
        batches = runner.result.flows["people_1"].batches
        assert batches == runner.result.flows["people_2"].batches == checked.count("named") == 1
        checked.clear()
    current = {r["id"]: r["name"] for r in read_rows(spark, storage, "people_1")}
    assert current == {0: "n6", 1: "n4", 2: "n5", 3: "m2"}
    history = read_rows(spark, storage, "people_2")
    assert sorted((r["id"], r["name"], r["__END_AT"]) for r in history) == [
        (0, "n3", 6),
        (0, "n6", None),
        (1, "n1", 4),
        (1, "n4", None),
        (2, "n2", 5),
        (2, "n5", None),
        (3, "m1", 12),
        (3, "m2", None),
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


def test_a_batch_failing_in_its_second_flow_is_replayed_and_commits_each_table_once(spark, tmp_path, monkeypatch):
    """Gold's two flows apply one batch in turn. When the second fails after the first committed,
    the next update replays the batch: the first flow's writes are skipped (they name the batch),
    the second's are made, and no row is applied twice."""
    runner, storage = make_pipeline(tmp_path, NAMED_VIEW_FLOWS, [row(1, 1, "ann"), row(2, 2, "bob")])
    runner.update()
    apply = AutoCdcApplier.apply

    def failing_for_people_2(self, batch, txn, session=None):
        if self.flow.target == "people_2":
            raise RuntimeError("killed before people_2 committed")
        return apply(self, batch, txn, session)

    append(tmp_path, [row(3, 3, "cy"), row(1, 4, "ann2")])
    monkeypatch.setattr(AutoCdcApplier, "apply", failing_for_people_2)
    with pytest.raises(CdcMedallionError, match="killed before people_2"):
        runner.update()
    monkeypatch.setattr(AutoCdcApplier, "apply", apply)
    assert {r["id"]: r["name"] for r in read_rows(spark, storage, "people_1")} == {1: "ann2", 2: "bob", 3: "cy"}
    store = DeltaStore(storage, spark)
    committed = store.version("people_1")

    runner.update()  # the failed batch again
    current = sorted((r["id"], r["name"]) for r in read_rows(spark, storage, "people_2") if r["__END_AT"] is None)
    assert current == [(1, "ann2"), (2, "bob"), (3, "cy")]
    assert len(read_rows(spark, storage, "people_2")) == 4  # ann, ann2, bob, cy: each version once
    assert store.version("people_1") == committed  # its write of that batch was skipped


def test_query_functions_get_streaming_dataframes_as_on_databricks(spark, tmp_path):
    """Every streaming table's query function reads streams (what fails on Databricks for a
    stream fails here too); a materialized view reads tables whole."""
    seen: dict[str, bool] = {}
    runner, storage = make_pipeline(
        tmp_path,
        """
        import builtins
        seen = builtins.__dict__.setdefault("cdc_medallion_seen_streaming", {})

        @dp.table(name="copied")
        def copied():
            rows = dp.read_stream("changes")
            seen["copied<-changes"] = rows.isStreaming
            return rows

        @dp.materialized_view(name="counted")
        def counted():
            rows = dp.read("copied")
            seen["counted<-copied"] = rows.isStreaming
            return rows.groupBy("op").count()

        @dp.table(name="sorted_copy")
        def sorted_copy():  # a sort of a stream is an error on Databricks: here too
            return dp.read_stream("copied").orderBy("id")
    """,
        [row(1, 1), row(2, 2)],
    )
    import builtins

    builtins.__dict__["cdc_medallion_seen_streaming"] = seen
    with pytest.raises(CdcMedallionError, match=r"(?i)sort|ordering|streaming"):
        runner.update()
    assert seen == {"copied<-changes": True, "counted<-copied": False}
    assert sorted(r["id"] for r in read_rows(spark, storage, "copied")) == [1, 2]
    assert datasets(storage)["raw"]["rows"] == 2
    del builtins.__dict__["cdc_medallion_seen_streaming"]


def test_no_more_queries_run_at_once_than_max_concurrent_flows(spark, tmp_path):
    """The runner makes room under `max_concurrent_flows` before it starts a query: with a limit
    of one, no query starts while another is active. A listener asks Spark which queries are
    active as each one starts (Spark delivers the start event on the query's own thread, before
    it runs a batch)."""
    import dataclasses

    from cdc_medallion.adhoc import adhoc_conf
    from cdc_medallion.pipeline import run_pipeline
    from tests.conftest import REPO

    conf = adhoc_conf(
        fmt="debezium-json",
        input_path=REPO / "samples" / "debezium" / "shop.jsonl",
        storage=tmp_path / "storage",
        keys=["customers=id"],
        columns=[],
        layout="kafka-dump",
    )
    # Two sources: their queries do not read each other, so they could overlap.
    other = adhoc_conf(
        fmt="canal-json",
        input_path=REPO / "samples" / "canal-json" / "crm.jsonl",
        storage=tmp_path / "storage",
        keys=[],
        columns=[],
    )
    sources = (conf.sources[0], other.sources[0].model_copy(update={"name": "crm"}))
    listener = QueryStarts(spark)
    spark.streams.addListener(listener)
    try:
        run_pipeline(dataclasses.replace(conf, sources=sources, max_concurrent_flows=1), spark=spark)
    finally:
        spark.streams.removeListener(listener)
    ours = [(name, others) for name, others in listener.started if name and name.startswith(conf.name)]
    assert len(ours) >= 6, listener.started  # per source: bronze, silver, the query its readers share
    assert [(name, others) for name, others in ours if others] == [], ours


# Three flows reading one stream row by row (through two views and directly): one shared query.
SHARED_FLOWS = """
def parity_view(parity):
    return lambda: dp.read_stream("changes").filter(F.col("id") % 2 == parity)

for parity in PARITIES:
    dp.temporary_view(name=f"v{parity}")(dp.expect_or_drop("named", "name IS NOT NULL")(parity_view(parity)))
    dp.create_streaming_table(f"p{parity}")
    dp.create_auto_cdc_flow(target=f"p{parity}", source=f"v{parity}", keys=["id"], sequence_by="seq",
                            except_column_list=["op"])

dp.create_streaming_table("copied")

@dp.append_flow(target="copied")
def copy():
    return dp.read_stream("raw").select("value")
"""


def _query_names(spark, run) -> list[str]:
    """The names of the streaming queries `run()` starts."""
    listener = QueryStarts(spark)
    spark.streams.addListener(listener)
    try:
        run()
    finally:
        spark.streams.removeListener(listener)
    return sorted(name.removeprefix("t.") for name, _others in listener.started)


def test_flows_reading_one_stream_share_one_query_and_a_new_one_joins_after_catching_up(spark, tmp_path):
    """Flows whose query reads one stream row by row share one query over it, whatever their
    number (gold's tables and the side tables of a source). A flow new to that stream first reads
    it from its start in a query of its own, then joins; each row is applied once throughout."""
    runner, storage = make_pipeline(
        tmp_path, "PARITIES = (0,)\n" + SHARED_FLOWS, [row(1, 1, "ann"), row(2, 2, "bob"), row(3, 3, None)]
    )
    assert _query_names(spark, runner.update) == ["raw", "shared__raw"]
    assert sorted(r["id"] for r in read_rows(spark, storage, "p0")) == [2]

    pipeline = tmp_path / "transformations" / "pipeline.py"  # a second table appears
    pipeline.write_text(pipeline.read_text(encoding="utf-8").replace("PARITIES = (0,)", "PARITIES = (0, 1)"))
    append(tmp_path, [row(4, 4, "cy"), row(5, 5, "di")])
    names = _query_names(spark, runner.update)
    assert names == ["raw", "shared__raw", "v1__p1"], names  # p1 reads `raw` from its start on its own
    assert sorted(r["id"] for r in read_rows(spark, storage, "p1")) == [1, 5]  # 3 has no name: dropped
    members = json.loads((storage / "_checkpoints" / "shared__raw" / "cdc_medallion_members.json").read_text())
    assert "v1__p1" in members and not (storage / "_checkpoints" / "v1__p1").exists(), members

    append(tmp_path, [row(7, 7, "ed"), row(8, 8, "flo"), row(5, 9, "dio")])
    assert _query_names(spark, runner.update) == ["raw", "shared__raw"]
    assert sorted((r["id"], r["name"]) for r in read_rows(spark, storage, "p1")) == [(1, "ann"), (5, "dio"), (7, "ed")]
    assert sorted(r["id"] for r in read_rows(spark, storage, "p0")) == [2, 4, 8]
    assert len(read_rows(spark, storage, "copied")) == 8  # every message once


class QueryStarts(StreamingQueryListener):
    """Each query started, with the other queries active as it starts (Spark delivers the start
    event on the query's own thread, before it runs a batch)."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.started: list[tuple[str | None, list[str]]] = []

    def onQueryStarted(self, event) -> None:
        others = [q.name for q in self.spark.streams.active if str(q.id) != str(event.id)]
        self.started.append((event.name, others))

    def onQueryProgress(self, event) -> None:
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass
