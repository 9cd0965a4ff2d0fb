"""Comparing gold tables with a history's ground truth; differences come back as readable lines."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from cdc_medallion.generator.history import History, Key, Row
from cdc_medallion.names import END_AT, SCD1_SEQUENCE, START_AT

HIDDEN = (SCD1_SEQUENCE, START_AT, END_AT)


def _value(value: Any) -> Any:
    return bytes(value) if isinstance(value, bytearray | memoryview) else value


def _data(row: Row, columns: Iterable[str]) -> Row:
    return {c: _value(row.get(c)) for c in columns}


def diff_scd1(history: History, table: str, gold: list[Row]) -> list[str]:
    spec = history.table(table)
    columns = [c.name for c in history.columns_at_end(table)]
    truth = {k: _data(r, columns) for k, r in history.final_state()[table].items()}
    got: dict[Key, Row] = {}
    problems = []
    for row in gold:
        key = tuple(row[k] for k in spec.keys)
        if key in got:
            problems.append(f"{table}: key {key} appears twice in SCD1")
        got[key] = _data(row, columns)
    for key in sorted(set(truth) | set(got), key=repr):
        if key not in got:
            problems.append(f"{table}: missing row {key}: {truth[key]}")
        elif key not in truth:
            problems.append(f"{table}: unexpected row {key}: {got[key]}")
        elif got[key] != truth[key]:
            wrong = {c: (got[key][c], truth[key][c]) for c in columns if got[key][c] != truth[key][c]}
            problems.append(f"{table}: row {key} differs (got, expected): {wrong}")
    return problems


def diff_scd2(history: History, table: str, gold: list[Row]) -> list[str]:
    spec = history.table(table)
    columns = [c.name for c in history.columns_at_end(table)]
    truth = {
        key: [(_data(v.row, columns), v.end is None) for v in versions]
        for key, versions in history.versions()[table].items()
    }
    got: dict[Key, list[tuple[Row, bool]]] = {}
    for row in sorted(gold, key=lambda r: r[START_AT]):
        key = tuple(row[k] for k in spec.keys)
        got.setdefault(key, []).append((_data(row, columns), row[END_AT] is None))
    problems = []
    for key in sorted(set(truth) | set(got), key=repr):
        if got.get(key) != truth.get(key):
            problems.append(
                f"{table}: history of {key} differs:\n  got      {got.get(key)}\n  expected {truth.get(key)}"
            )
    for key in got:  # intervals chain: each version ends where the next starts
        ordered = sorted((r for r in gold if tuple(r[k] for k in spec.keys) == key), key=lambda r: r[START_AT])
        for earlier, later in itertools.pairwise(ordered):
            if earlier[END_AT] is None or earlier[END_AT] > later[START_AT]:
                problems.append(f"{table}: versions of {key} overlap")
    return problems
