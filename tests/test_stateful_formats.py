"""The held-message mechanism stateful formats rely on, exercised with a tiny pairing format.

`pair-lines`: `B,<id>,<value>` (a before half) must meet `A,<id>,<value>` (its after half); an
unpaired B is held and re-fed on the next run, where its A may arrive.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

import pytest
from pyspark import cloudpickle

from cdc_medallion.formats.base import Format, ParseError, register_format
from cdc_medallion.formats.message import BronzeMessage, Event
from tests.helpers import datasets, gold_rows, ingest, read_rows

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Python workers cannot import tests/


class PairLines(Format):
    name = "pair-lines"
    stateful: ClassVar[bool] = True

    def parse_messages(self, messages: list[BronzeMessage], context: list[Event]) -> list[Event]:
        waiting: dict[str, BronzeMessage] = {}
        events: list[Event] = []
        for message in messages:
            try:
                half, ident, value = (message.value or b"").decode().split(",")
            except ValueError:
                events.extend(self.events_for_error(message, "expected HALF,ID,VALUE"))
                continue
            if half == "B":
                waiting[ident] = message
            elif ident in waiting:
                before = waiting.pop(ident)
                event = {
                    "kind": "change",
                    "op": "UPDATE" if int(ident) % 2 else "INSERT",
                    "source_table": "pairs",
                    "key_columns": ["id"],
                    "after": {"id": ident, "value": value},
                    "column_types": {"id": "int", "value": "string"},
                    "sequence": message.position,
                    "related_refs": [before.ref],
                }
                events.append(self.complete(event, message))
            else:
                events.extend(self.events_for_error(message, f"A without B for id {ident}"))
        events.extend(self.held_event(m, f"waiting for A of id {i}") for i, m in waiting.items())
        return events

    def events_for_error(self, message: BronzeMessage, reason: str) -> list[Event]:
        return [self.error_event(message, "value", reason)]

    def parse_message(self, message: BronzeMessage) -> list[Event]:  # not used: stateful
        raise ParseError("value", "unreachable")


if "pair-lines" not in __import__("cdc_medallion.formats", fromlist=["format_names"]).format_names():
    register_format(PairLines)


def write(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write("".join(f"{line}\n" for line in lines))


@pytest.mark.parametrize("split", [False, True])
def test_held_messages_are_paired_across_runs(spark, storage, tmp_path, split):
    source = tmp_path / "pairs.txt"
    first = ["B,1,x", "A,1,one", "B,2,y", "B,3,z", "garbage"]
    second = ["A,2,two", "A,3,three"]
    if split:  # the B halves of 2 and 3 wait a run for their A halves
        write(source, first)
        ingest(spark, "pair-lines", source, storage, keys={"pairs": "id"}, layout="json-lines")
        silver = read_rows(spark, storage, "silver_pair_lines")
        assert sorted(r["detail"] for r in silver if r["kind"] == "held") == [
            "waiting for A of id 2",
            "waiting for A of id 3",
        ]
        assert {r["id"] for r in gold_rows(spark, storage, "pairs")} == {1}
        write(source, second)
    else:
        write(source, first + second)
    summary = ingest(spark, "pair-lines", source, storage, keys={"pairs": "id"}, layout="json-lines", quality=split)

    assert {r["id"]: r["value"] for r in gold_rows(spark, storage, "pairs")} == {1: "one", 2: "two", 3: "three"}
    silver = read_rows(spark, storage, "silver_pair_lines")
    changes = [r for r in silver if r["kind"] == "change"]
    assert len(changes) == 3
    consumed = {ref for r in changes for ref in [r["bronze_ref"], *(r["related_refs"] or [])]}
    quarantined = {r["bronze_ref"] for r in read_rows(spark, storage, "silver_pair_lines_quarantine")}
    bronze = datasets(storage)["bronze_pair_lines"]["rows"]
    assert bronze == 7
    assert len(consumed | quarantined) == bronze  # every message accounted for, once resolved
    if split:  # a message held in the first run and completed in the second counts once, as a change
        [accounting] = summary.quality.accounting
        assert accounting.outcomes == {"change": 6, "quarantined": 1} and accounting.balanced
        assert not summary.quality.failed, [c.name for c in summary.quality.failed]
