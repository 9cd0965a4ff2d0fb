"""The declarative facade builds immutable definitions with the Lakeflow/DLT names."""

from __future__ import annotations

import dataclasses

import pytest

from cdc_medallion import dp
from cdc_medallion.declarative.definitions import Action, AutoCdcFlow, DatasetKind, Flow
from cdc_medallion.declarative.registry import InMemoryRegistry, registration
from cdc_medallion.errors import GraphError


def build(define) -> InMemoryRegistry:
    registry = InMemoryRegistry()
    with registration(registry):
        define()
    return registry


def test_tables_views_and_expectations_in_either_order():
    def define():
        @dp.table(name="raw", comment="c", table_properties={"layer": "bronze"})
        @dp.expect("a", "x > 0")
        @dp.expect_or_drop("b", "y IS NOT NULL")
        def raw():
            return None

        @dp.expect_or_fail("late", "z = 1")  # above the dataset decorator: added to the dataset
        @dp.materialized_view
        def summary():
            return None

        @dp.temporary_view(name="v")
        @dp.expect_all_or_quarantine({"q1": "k IS NOT NULL", "q2": "k > 0"})
        def view():
            return None

    registry = build(define)
    raw = registry.datasets["raw"]
    assert raw.kind is DatasetKind.STREAMING_TABLE and raw.comment == "c"
    assert [(e.name, e.action) for e in raw.expectations] == [("a", Action.WARN), ("b", Action.DROP)]
    assert isinstance(registry.flows["raw"], Flow) and registry.flows["raw"].target == "raw"
    assert registry.datasets["summary"].kind is DatasetKind.MATERIALIZED_VIEW
    assert [e.name for e in registry.datasets["summary"].expectations] == ["late"]
    assert [e.action for e in registry.datasets["v"].expectations] == [Action.QUARANTINE] * 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        raw.name = "other"  # type: ignore[misc]


def test_streaming_table_with_flows_and_auto_cdc():
    def define():
        dp.create_streaming_table("target", expect_all_or_drop={"k": "id IS NOT NULL"})

        @dp.append_flow(target="target", name="one")
        def one():
            return None

        dp.create_auto_cdc_flow(
            target="target",
            source="changes",
            keys=["id"],
            sequence_by="seq",
            apply_as_deletes="op = 'D'",
            stored_as_scd_type="2",
            track_history_except_column_list=["ts"],
        )

    registry = build(define)
    assert registry.datasets["target"].expectations[0].action is Action.DROP
    flow = registry.flows["target"]
    assert isinstance(flow, AutoCdcFlow)
    assert (flow.keys, flow.stored_as_scd_type, flow.track_history_except_column_list) == (("id",), 2, ("ts",))
    assert registry.flows["one"].target == "target"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: dp.create_auto_cdc_flow(target="t", source="s", keys=["id"], sequence_by="q", stored_as_scd_type=3),
            "stored_as_scd_type must be 1 or 2",
        ),
        (
            lambda: dp.create_auto_cdc_flow(
                target="t", source="s", keys=["id"], sequence_by="q", column_list=["a"], except_column_list=["b"]
            ),
            "not both",
        ),
        (lambda: dp.create_auto_cdc_flow(target="t", source="s", keys=[], sequence_by="q"), "keys must not be empty"),
        (lambda: [dp.create_streaming_table("x"), dp.create_streaming_table("x")], "defined twice"),
        (lambda: dp.expect_all(["not", "a", "dict"]), "dict of name"),
    ],
)
def test_invalid_definitions_are_refused(call, message):
    with pytest.raises(GraphError, match=message):
        build(call)


def test_definitions_outside_a_pipeline_explain_themselves():
    with pytest.raises(GraphError, match="no active pipeline registry"):
        dp.create_streaming_table("orphan")
