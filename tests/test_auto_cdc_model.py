"""Auto CDC applied batch by batch against a reference model of the whole history.

Each example is a random history of many keys (out-of-order sequences, partial images, deletes,
comebacks, truncates) cut into batches at random. The engine applies the batches one after the
other, each time rereading what it stored for the keys a batch touches; the model replays the
whole history at once (`tests/scd_model.py`). Any wrong choice of stored rows or versions reread
for a batch, or of where a late event lands, leaves a table that differs from the model's.
Many keys per example give each example many independent key histories, so that a few dozen
examples cover what thousands of one-key examples would. Real Spark, real Delta tables.

Seeds and example counts come from the Hypothesis profile (tests/conftest.py; "ci", derandomized,
by default). Checked against a planted bug (issue 70): with SCD1's MERGE applying a delete older
than its key's row (the sequence guard on `__sequence` removed from `whenMatchedDelete`), the
whole-image SCD1 test fails at its 4th example and the SCD1 test with truncates at its 9th; the
direct test of late deletes below fails at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import ArrayType, IntegerType, StringType, StructField, StructType

from cdc_medallion.declarative.definitions import AutoCdcFlow
from cdc_medallion.runner.auto_cdc import scd1
from tests.auto_cdc_harness import apply_batches, target_rows
from tests.scd_model import History

SCHEMA = StructType(
    [
        StructField("id", IntegerType()),
        StructField("name", StringType()),
        StructField("city", StringType()),
        StructField("seq", IntegerType()),
        StructField("op", StringType()),
        StructField("present", ArrayType(StringType())),
    ]
)
MODEL = History(columns=("id", "name", "city", "seq"), key="id", sequence="seq")
_VALUE = st.one_of(st.none(), st.sampled_from(["a", "b", "é"]))
_COLUMNS = ["id", "name", "city", "seq"]
_PRESENT = st.one_of(st.none(), st.none(), st.lists(st.sampled_from(_COLUMNS), unique=True))
#: Whole images (no list, or every column in any order), and once in a while a partial one.
_RARELY_PARTIAL = st.integers(0, 40).flatmap(lambda n: _PRESENT if n == 0 else st.none())
_MOSTLY_WHOLE = st.one_of(st.none(), st.permutations(_COLUMNS).map(list), _RARELY_PARTIAL)
_OP = st.sampled_from(["U"] * 8 + ["D"] * 2 + ["T"])
_OP_NO_TRUNCATE = st.sampled_from(["U"] * 8 + ["D"] * 2)


@st.composite
def histories(draw: st.DrawFn, truncates: bool = True) -> list[list[tuple]]:
    """Two to six batches of events over up to 60 keys; sequences are distinct (ties may legitimately apply
    in either order), shuffled across and within batches, and truncates are rare. Without
    truncates, images are mostly whole: the SCD1 batches that need no rebuild."""
    keys = draw(st.integers(2, 60))
    size = draw(st.integers(10, 240))
    ops, present = (_OP, _PRESENT) if truncates else (_OP_NO_TRUNCATE, _MOSTLY_WHOLE)
    events = [
        (draw(st.integers(0, keys - 1)), draw(_VALUE), draw(_VALUE), draw(ops), draw(present)) for _ in range(size)
    ]
    sequences = draw(st.permutations(range(1, size + 1)))
    # Sequences mostly follow arrival, with some late events: a shuffled window of arrivals.
    if draw(st.booleans()):
        sequences = sorted(sequences)
        for _ in range(draw(st.integers(0, size // 4))):
            i, j = draw(st.integers(0, size - 1)), draw(st.integers(0, size - 1))
            sequences[i], sequences[j] = sequences[j], sequences[i]
    rows = [(k, n, c, s, op, p) for (k, n, c, op, p), s in zip(events, sequences, strict=True)]
    cuts = sorted(draw(st.sets(st.integers(1, size - 1), min_size=1, max_size=5)))  # one batch rereads nothing
    batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, size], strict=True) if rows[a:b]]
    return within_what_stored_rows_keep(batches)


def within_what_stored_rows_keep(batches: list[list[tuple]]) -> list[list[tuple]]:
    """The history made one whose batches the engine can apply exactly (README, "Known limits").

    What a target stores is each key's rows, not the events that made them, so three kinds of
    event are turned into whole-image upserts:
    - a late event (an earlier batch holds a later event of its key, or either is a truncate)
      that is a truncate or a partial image, or that is late behind a truncate: it would refill
      columns from events the target no longer keeps;
    - a partial image followed, in a later batch, by an earlier event of its key: it was filled
      from what the target held when it was applied;
    - a delete or truncate followed, in a later batch, by an earlier event of its key.

    A late delete of one key stays a delete: SCD1 must leave the key's newer row alone (the
    MERGE's sequence guard), and SCD2 must end the version it falls in. Here every version is
    one event (the flows track every column, the sequence among them), so a late delete splits
    none, and the later events it precedes are whole images by the second rule. Were late deletes
    turned into upserts, no number of examples would reach the guard.
    """
    arrival = [(b, list(e)) for b, batch in enumerate(batches) for e in batch]

    def related(e: list, f: list) -> bool:
        return e[0] == f[0] or e[4] == "T" or f[4] == "T"

    def whole(e: list) -> None:
        e[4], e[5] = "U", None

    for b, e in arrival:
        later = [f for c, f in arrival if c < b and f[3] > e[3] and related(e, f)]
        if later and (e[4] != "D" or any(f[4] == "T" for f in later)):
            whole(e)
    for b, e in arrival:
        earlier_later = any(c > b and f[3] < e[3] and related(e, f) for c, f in arrival)
        if earlier_later and (e[4] != "U" or e[5] is not None):
            whole(e)
    fixed: list[list[tuple]] = [[] for _ in batches]
    for b, e in arrival:
        fixed[b].append(tuple(e))
    return fixed


def _flow(scd: int, tracked: tuple[str, ...] | None) -> AutoCdcFlow:
    return AutoCdcFlow(
        name="t",
        target="t",
        source="v",
        keys=("id",),
        sequence_by="seq",
        stored_as_scd_type=scd,
        apply_as_deletes="op = 'D'",
        apply_as_truncates="op = 'T'",
        except_column_list=("op", "present"),
        track_history_column_list=tracked,
        present_columns_column="present",
    )


# History tracked on every column: with a track-history list, a late event inside a version
# updated in place lands before the in-place values the version stores (README, "Known limits").
FLOWS = {"scd1": _flow(1, None), "scd2": _flow(2, None)}


# Separate tests, so that test workers run them side by side: SCD2, where a wrong set of stored
# versions reread shows; SCD1, one row a key, with truncates and partial images (rebuilt) and
# without truncates (mostly not rebuilt: the MERGE's sequence guard decides). Each takes its seed
# and its number of examples from the Hypothesis profile (tests/conftest.py: "ci" by default,
# derandomized); an example is up to 60 keys, so a few dozen cover many key histories.
EXAMPLES = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.slow
@EXAMPLES
@given(batches=histories())
def test_scd1_batch_by_batch_gives_the_model_of_the_whole_history(spark, tmp_path_factory, batches):
    check_against_the_model(spark, tmp_path_factory, batches, FLOWS["scd1"])


@pytest.mark.slow
@EXAMPLES
@given(batches=histories(truncates=False))
def test_scd1_of_whole_images_batch_by_batch_gives_the_model_of_the_whole_history(spark, tmp_path_factory, batches):
    check_against_the_model(spark, tmp_path_factory, batches, FLOWS["scd1"])


@pytest.mark.slow
@EXAMPLES
@given(batches=histories())
def test_scd2_batch_by_batch_gives_the_model_of_the_whole_history(spark, tmp_path_factory, batches):
    check_against_the_model(spark, tmp_path_factory, batches, FLOWS["scd2"])


def check_against_the_model(spark, tmp_path_factory, batches: list[list[tuple]], flow: AutoCdcFlow) -> list[tuple]:
    root = Path(tmp_path_factory.mktemp("auto_cdc_model"))
    apply_batches(spark, root, flow, batches, SCHEMA)
    events = [e for batch in batches for e in batch]
    got = target_rows(spark, root, flow)
    if flow.stored_as_scd_type == 1:
        assert got == MODEL.scd1(events), batches
    else:
        assert got == MODEL.scd2(events, tracked=("name", "city", "seq")), batches
    return got


@pytest.mark.parametrize("scd", ["scd1", "scd2"])
def test_an_earlier_event_after_a_batch_of_deletes_only_stays_deleted(spark, tmp_path_factory, scd):
    """A first batch of deletes only leaves the target empty, with tombstones in the state; the
    next batch, applied to that still-empty target, must meet those tombstones: the earlier
    upsert of a deleted key makes a closed version (SCD2) or nothing (SCD1), never a live row."""
    batches = [[(1, None, None, 5, "D", None)], [(1, "a", "x", 3, "U", None), (2, "b", "y", 4, "U", None)]]
    got = check_against_the_model(spark, tmp_path_factory, batches, FLOWS[scd])
    if scd == "scd1":
        assert [row[0] for row in got] == [2]
    else:  # id, name, city, seq, __START_AT, __END_AT
        assert sorted((row[0], row[4], row[5]) for row in got) == [(1, 3, 5), (2, 4, None)]


@pytest.mark.parametrize("scd", ["scd1", "scd2"])
def test_a_delete_older_than_its_keys_row_changes_no_scd1_row_and_takes_its_place_in_scd2(spark, tmp_path_factory, scd):
    """DLT semantics: an event older than its key's current sequence does not change SCD1; in
    SCD2 it takes its place in history. Key 1's delete (3) and late upsert (4) are older than its
    row (5); key 2's delete (6) falls between its versions (2, 10); key 3's delete (7) is newer
    than its row (4), and deletes it. The batches are whole images with no truncate: SCD1 takes
    the MERGE whose sequence guard must stop the older events."""
    rows = [(1, "a", "x", 5, "U", None), (2, "b", "y", 2, "U", None), (2, "b2", "y", 10, "U", None)]
    batches = [
        [*rows, (3, "c", "z", 4, "U", None)],
        [(1, None, None, 3, "D", None), (2, None, None, 6, "D", None), (3, None, None, 7, "D", None)],
        [(1, "old", "x", 4, "U", None)],
    ]
    assert within_what_stored_rows_keep(batches) == batches  # late deletes stay deletes
    got = check_against_the_model(spark, tmp_path_factory, batches, FLOWS[scd])
    if scd == "scd1":  # id, name, city, seq, __sequence
        assert got == [(1, "a", "x", 5, 5), (2, "b2", "y", 10, 10)]
    else:  # id, name, city, seq, __START_AT, __END_AT
        assert got == [
            (1, "a", "x", 5, 5, None),
            (1, "old", "x", 4, 4, 5),
            (2, "b", "y", 2, 2, 6),
            (2, "b2", "y", 10, 10, None),
            (3, "c", "z", 4, 4, 7),
        ]


def test_scd1_rebuilds_only_a_batch_with_a_partial_image_or_after_a_truncate(spark, tmp_path_factory, monkeypatch):
    """Whole images apply by their last event per key; a partial image, and every batch once a
    truncate was seen, go through the rebuild. The tables equal the model's either way."""
    taken: list[str] = []
    latest = scd1.write_latest
    rebuilt = scd1.write_rebuilt

    def by_latest(*args, **kwargs):
        taken.append("latest")
        return latest(*args, **kwargs)

    def by_rebuild(*args, **kwargs):
        taken.append("rebuild")
        return rebuilt(*args, **kwargs)

    monkeypatch.setattr(scd1, "write_latest", by_latest)
    monkeypatch.setattr(scd1, "write_rebuilt", by_rebuild)
    batches = [
        [(1, "a", "x", 1, "U", None), (2, "b", "y", 2, "U", _COLUMNS), (3, "c", "z", 3, "U", None)],
        [(1, "a2", None, 4, "U", ["id", "name", "seq"]), (2, None, None, 5, "D", None)],
        [(2, "b", "y", 1, "U", None), (3, "c2", "z2", 6, "U", None)],  # 2's late upsert meets its tombstone
        [(9, "t", "t", 7, "T", None), (4, "d", "w", 8, "U", None)],
        [(4, "d2", "w2", 9, "U", None)],
    ]
    before_truncate = check_against_the_model(spark, tmp_path_factory, batches[:3], FLOWS["scd1"])
    assert [row[:3] for row in before_truncate] == [(1, "a2", "x"), (3, "c2", "z2")]
    assert taken == ["latest", "rebuild", "latest"]
    got = check_against_the_model(spark, tmp_path_factory, batches, FLOWS["scd1"])
    assert taken[3:] == ["latest", "rebuild", "latest", "rebuild", "rebuild"]
    assert [row[:3] for row in got] == [(4, "d2", "w2")]
