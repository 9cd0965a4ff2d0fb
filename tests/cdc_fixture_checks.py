"""Checks the JSON change-format tests share: the Alibaba seed's examples, the Flink/SeaTunnel
`products` fixtures (gold vs. the changelog their tests expect) and the inline message cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_path
from tests.helpers import changelog_state, gold_rows, load_expected, parse

SEED = "alibaba-dts-kafka-formats.txt"
PRODUCT_COLUMNS = ["id", "name", "description", "weight"]


def seed_examples() -> list[str]:
    """The seed's example messages as printed, in order: three SharePlex, three Canal.

    Blocks are found by balanced braces outside JSON strings (the examples span lines and are
    partly malformed, so they cannot be found by parsing)."""
    text = shared_path("seeds", SEED).read_text(encoding="utf-8")
    blocks, depth, start, in_string, escaped = [], 0, 0, False, False
    for i, char in enumerate(text):
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
            continue
        if char == '"' and depth:
            in_string = True
        elif char == "{":
            start = i if depth == 0 else start
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                blocks.append(text[start : i + 1])
    assert len(blocks) == 6, [b[:40] for b in blocks]
    return blocks


def one_line(message: str) -> str:
    return json.dumps(json.loads(message), separators=(",", ":"))


def _expected_value(text: str) -> str | None:
    return None if text == "null" else text.strip()


def assert_gold_matches_changelog(spark: Any, storage: Path, table: str, rows: list[str]) -> None:
    """SCD1 gold is the state the changelog implies; SCD2 has one version per +I / +U."""
    state, versions = changelog_state(rows, PRODUCT_COLUMNS, "id")
    current = {str(r["id"]): r for r in gold_rows(spark, storage, table, 1)}
    assert set(current) == set(state)
    for identity, values in state.items():
        row = current[identity]
        got = [row["name"], None if row["description"] is None else row["description"].strip()]
        assert got == [_expected_value(v) for v in values[1:3]], identity
        assert float(row["weight"]) == pytest.approx(float(values[3]), rel=1e-6), identity
    history = gold_rows(spark, storage, table, 2)
    assert len(history) == versions
    assert sum(1 for r in history if r["__END_AT"] is None) == len(state)


def assert_gold_matches_table(spark: Any, storage: Path, table: str, rows: list[list[Any]]) -> None:
    """SCD1 gold equals a sink table's rows (id, name, description, weight) ordered by id."""
    current = sorted(gold_rows(spark, storage, table, 1), key=lambda r: r["id"])
    assert [r["id"] for r in current] == [row[0] for row in rows]
    for got, want in zip(current, rows, strict=True):
        assert [got["name"], got["description"]] == want[1:3]
        assert float(got["weight"]) == pytest.approx(float(want[3]), rel=1e-6)


def assert_same_fixture(first: Path, second: Path) -> None:
    """Two origins' copies of one fixture: same messages, same expected changelog."""
    assert first.read_bytes().rstrip(b"\n") == second.read_bytes().rstrip(b"\n")
    normalize = lambda rows: [r.replace(", ", ",") for r in rows]  # noqa: E731  (SeaTunnel writes ', ')
    assert normalize(load_expected(first)["expected_rows"]) == normalize(load_expected(second)["expected_rows"])


def check_inline_cases(fmt: str, family: str, origin: str, options: dict[str, str] | None = None) -> int:
    """The origin test's inline messages: no rows -> a tombstone for a null value, quarantined as an
    empty message for empty bytes (no rows in gold either way); an expected exception -> quarantined
    with the reason; expected rows -> the same values. Returns the number of messages checked."""
    path = shared_path("fixtures", family, f"{origin}__inline-cases.json")
    checked = 0
    for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
        expect = case["expect"]
        for index, raw in enumerate(case["messages"]):
            events = parse(fmt, raw, options=options)
            checked += 1
            if isinstance(expect, list):
                [event] = events
                values = expect[index][len("+I(") : -1].split(",")
                assert event["kind"] == "change" and event["op"] == "INSERT", (case["test"], event)
                assert [event["after"][c] for c in PRODUCT_COLUMNS] == values
                assert event["column_types"]["weight"] == "double"
            elif "no rows" in expect and raw is None:  # a Kafka tombstone
                assert [e["kind"] for e in events] == ["tombstone"], (case["test"], events)
            elif "no rows" in expect:  # empty bytes: no rows here either, but quarantined, not skipped
                [event] = events
                assert event["kind"] == "error" and event["error"].startswith("value: empty message"), event
            else:
                [event] = events
                assert event["kind"] == "error", (case["test"], event)
                assert event["raw_message"] == raw
                if "Unknown operation type 'XX'" in expect:
                    assert "unknown operation type 'XX'" in event["error"]
    return checked
