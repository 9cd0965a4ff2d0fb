"""The Databricks stand-ins keep the runtime's contract: checked against the official stubs, and
each of their rules refuses what Databricks refuses; the graph runner refuses a graph Lakeflow
would not run."""

from __future__ import annotations

import inspect
import warnings

import pytest

from cdc_medallion.declarative import databricks
from tests.databricks_dlt_stubs import load_stubs
from tests.databricks_graph_run import GraphRun
from tests.databricks_standins import STANDINS, Defined, Expected, Recorder, dlt_standin, pipelines_standin

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


def _parameters(function) -> set[str]:
    return {p for p in inspect.signature(function).parameters if p != "query_function"}


@pytest.mark.parametrize("name", sorted(databricks.KEYWORDS[databricks.DLT]))
def test_the_facades_dlt_keywords_are_the_official_stubs(name):
    """What the facade passes to `dlt` is decided by its table, which is the stubs' signatures
    (`create_auto_cdc_flow`, which the stubs lack: `apply_changes`'s, `name` for `flow_name`)."""
    stubs = load_stubs()
    if name == "create_auto_cdc_flow":
        expected = (_parameters(stubs.apply_changes) - {"flow_name"}) | {"name"}
    else:
        expected = _parameters(getattr(stubs, name))
    assert databricks.KEYWORDS[databricks.DLT][name] == expected


@pytest.mark.parametrize("name", sorted(databricks.KEYWORDS[databricks.PIPELINES]))
def test_the_facades_pipelines_keywords_are_the_references(name):
    """... and for `pyspark.pipelines`, the stand-in's signatures, which cite the reference."""
    assert databricks.KEYWORDS[databricks.PIPELINES][name] == _parameters(getattr(pipelines_standin(Recorder()), name))


def test_wrapped_stand_ins_say_nothing_in_their_signatures():
    for variant in ("pyspark.pipelines-wrapped", "dlt-wrapped"):
        api = STANDINS[variant].make(Recorder())
        kinds = [p.kind for p in inspect.signature(api.table).parameters.values()]
        assert kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]
        assert databricks.is_databricks_api(api)


@pytest.fixture(params=sorted(STANDINS))
def module(request):
    recorder = Recorder()
    return STANDINS[request.param].make(recorder), recorder


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


# --- the graph runner refuses what Lakeflow refuses -----------------------------------------------
@pytest.fixture
def graph(spark):
    recorder = Recorder()
    api = pipelines_standin(recorder)
    rows = spark.createDataFrame([(1, "a", "s1"), (2, None, "s2")], "id INT, label STRING, seq STRING")
    return api, recorder, {"raw": rows}


def _served(api, recorder, served):
    api.create_streaming_table("raw")  # given by the test (as bronze is), so never computed
    return served


def test_reads_resolve_case_insensitively_and_constraints_run(spark, graph):
    api, recorder, served = graph
    served = _served(api, recorder, served)

    @api.materialized_view(name="clean")
    @api.expect_or_drop("labelled", "label IS NOT NULL -- a comment ends at its line\n")
    def clean():
        from cdc_medallion import dp

        return dp.read("RAW")  # Unity Catalog names are case-insensitive

    run = GraphRun(recorder, spark, served)
    assert [r["id"] for r in run.dataset("clean").collect()] == [1]
    assert run.reads["clean"] == ["raw"]


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda api: api.materialized_view(name="v")(lambda: _read("nope")), "no dataset of the graph"),
        (
            lambda api: api.materialized_view(name="v")(api.expect("broken", "label >")(lambda: _read("raw"))),
            "does not parse",
        ),
        (
            lambda api: api.materialized_view(name="v")(api.expect("unknown", "colour = 1")(lambda: _read("raw"))),
            "does not parse or analyse",
        ),
        (lambda api: api.append_flow(target="elsewhere", name="f")(lambda: _read("raw")), "no dataset of the graph"),
        (
            lambda api: (
                api.table(name="v")(lambda: _read("raw")),
                api.create_auto_cdc_flow(target="v", source="raw", keys=["id"], sequence_by="seq", name="f"),
            ),
            "not create_streaming_table",
        ),
        (
            lambda api: (
                api.create_streaming_table("v"),
                api.create_auto_cdc_flow(target="v", source="raw", keys=["ID", "kind"], sequence_by="seq", name="f"),
            ),
            "key 'kind' is not a column",
        ),
        (
            lambda api: (
                api.create_streaming_table("v"),
                api.create_auto_cdc_flow(target="v", source="raw", keys=["id"], sequence_by="when", name="f"),
            ),
            "sequence_by 'when' is not a column",
        ),
        (
            lambda api: (
                api.create_streaming_table("v"),
                api.create_auto_cdc_flow(
                    target="v", source="raw", keys=["id"], sequence_by="seq", except_column_list=["lable"], name="f"
                ),
            ),
            "except_column_list entry 'lable' is not a column",
        ),
        (
            lambda api: (
                api.create_streaming_table("v"),
                api.create_auto_cdc_flow(target="v", source="ghost", keys=["id"], sequence_by="seq", name="f"),
            ),
            "no dataset of the graph",
        ),
    ],
)
def test_a_graph_lakeflow_would_refuse_fails_naming_what(spark, graph, declare, message):
    api, recorder, served = graph
    served = _served(api, recorder, served)
    declare(api)
    with pytest.raises(AssertionError, match=message):
        GraphRun(recorder, spark, served, execute=False).run_all()


def _read(name):
    from cdc_medallion import dp

    return dp.read(name)
