"""The Databricks stand-ins keep the runtime's contract: checked against the official stubs, and
each of their rules refuses what Databricks refuses (no Spark needed)."""

from __future__ import annotations

import inspect
import warnings

import pytest

from cdc_medallion.declarative import databricks
from tests.databricks_dlt_stubs import load_stubs
from tests.databricks_standins import STANDINS, Defined, Expected, Recorder, dlt_standin

DLT_FUNCTIONS = (
    "table",
    "view",
    "create_streaming_table",
    "append_flow",
    "apply_changes",
    "expect",
    "expect_or_drop",
    "expect_or_fail",
    "expect_all",
    "expect_all_or_drop",
    "expect_all_or_fail",
)


def _shape(function) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("name", DLT_FUNCTIONS)
def test_dlt_standin_has_the_signatures_of_the_official_stubs(name):
    stubs = load_stubs()
    assert _shape(getattr(dlt_standin(Recorder()), name)) == _shape(getattr(stubs, name))


def test_the_official_stubs_are_the_databricks_api_and_return_new_objects():
    """What the stand-ins reproduce: each decorator hands the next one a new object."""
    stubs = load_stubs()
    assert databricks.is_databricks_api(stubs)
    stubs.api.enable_local_execution()

    def query():
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = stubs.expect("positive", "x > 0")(query)
        defined = stubs.table(name="t")(expected)
    assert expected is not query and defined is not expected and defined is not query


@pytest.fixture(params=sorted(STANDINS))
def module(request):
    recorder = Recorder()
    return STANDINS[request.param](recorder), recorder


def _dataset_function(module):
    return getattr(module, "materialized_view", None) or module.table


def _auto_cdc(module):
    return getattr(module, "create_auto_cdc_flow", None) or module.apply_changes


def query():
    return None


def test_only_the_returned_object_carries_the_expectations(module):
    api, recorder = module
    before = dict(query.__dict__)
    chained = api.expect_or_drop("b", "y > 0")(api.expect("a", "x > 0")(query))
    assert isinstance(chained, Expected) and query.__dict__ == before  # the function is not changed

    api.expect("discarded", "x > 0")(query)  # its result thrown away: nothing is declared
    handle = _dataset_function(api)(name="plain")(query)
    assert isinstance(handle, Defined)
    assert recorder.datasets["plain"].expectations == []

    _dataset_function(api)(name="checked")(chained)
    assert [(k, n) for k, n, _ in recorder.datasets["checked"].expectations] == [
        ("expect_or_drop", "b"),
        ("expect", "a"),
    ]


def test_expectation_above_the_dataset_decorator_is_refused(module):
    api, _ = module
    with pytest.raises(TypeError, match="above the dataset decorator"):
        api.expect("late", "x > 0")(_dataset_function(api)(name="t")(query))


def test_a_dataset_decorator_takes_a_query_function(module):
    api, _ = module
    with pytest.raises(TypeError, match="takes no arguments"):
        _dataset_function(api)(name="t")(lambda spark: None)
    with pytest.raises(TypeError, match="already defined"):
        _dataset_function(api)(name="u")(_dataset_function(api)(name="t2")(query))


def test_an_expectation_name_is_unique_per_dataset(module):
    api, _ = module
    with pytest.raises(TypeError, match="declared twice"):
        api.expect("a", "x > 0")(api.expect_or_drop("a", "y > 0")(query))


@pytest.mark.parametrize(
    "call",
    [
        lambda api: _dataset_function(api)(name="t", refresh_schedule="daily"),  # unknown keyword
        lambda api: _dataset_function(api)(name="t", table_properties={"layer": 1}),  # not str -> str
        lambda api: _dataset_function(api)(name="t", partition_cols="id"),  # not a list
        lambda api: api.expect("a", 42),  # a constraint is SQL text or a Column
        lambda api: api.expect_all([("a", "x > 0")]),  # expect_all takes a dict
        lambda api: api.create_streaming_table("t", expect_all={"a": 1}),
        lambda api: _auto_cdc(api)(target="t", source="s", keys="id", sequence_by="seq"),
        lambda api: _auto_cdc(api)(target="t", source="s", keys=["id"], sequence_by="seq", stored_as_scd_type=3),
        lambda api: _auto_cdc(api)(target="t", source="s", keys=["id"], sequence_by="seq", once="yes"),
        lambda api: _auto_cdc(api)(target="t", source="s", keys=["id"], sequence_by="seq", nope=True),
        lambda api: _auto_cdc(api)(
            target="t", source="s", keys=["id"], sequence_by="seq", track_history_except_column_list=["u"]
        ),  # track_history_* is for SCD type 2
    ],
)
def test_wrong_keywords_and_types_are_refused(module, call):
    api, _ = module
    with pytest.raises(TypeError):
        call(api)


def test_truncates_are_for_scd_type_1_only(module):
    api, recorder = module
    common = {"source": "changes", "keys": ["id"], "sequence_by": "seq", "apply_as_truncates": "op = 'TRUNCATE'"}
    _auto_cdc(api)(target="current", stored_as_scd_type=1, **common)
    assert "current" in recorder.flows
    with pytest.raises(TypeError, match="SCD type 1 only"):
        _auto_cdc(api)(target="history", stored_as_scd_type=2, **common)
    with pytest.raises(TypeError, match="SCD type 1 only"):
        _auto_cdc(api)(target="history", stored_as_scd_type="2", **common)
