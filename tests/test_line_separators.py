"""A value holding a character that some line readers end a line at (Python's `str.splitlines`
splits at U+2028, U+2029, U+0085, \\r, \\x0b, \\x0c and \\x1c-\\x1e) goes through a whole pipeline
exact: landed, parsed, applied to gold (where Delta's log carries it in file statistics and MERGE
predicates), and read back by `show`, `status` and the report without a JVM. JSON lines are split
at "\\n" only, everywhere (`cdc_medallion/lines.py`)."""

from __future__ import annotations

import json
from html import unescape
from pathlib import Path

import pytest

from cdc_medallion.config import InputConf, SourceConf
from cdc_medallion.lines import lines_of
from cdc_medallion.sources.files import FileLanding
from tests.helpers import ingest
from tests.test_jvm_free_reads import cli_without_jvm

pytestmark = pytest.mark.xdist_group("line_separators")

#: Every character `str.splitlines` ends a line at, but "\n" (and "\r\n", which it is with "\r").
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r\n"]
COLUMNS = {"notes": "id:string,body:string,n:int"}


def change(op: str, lsn: int, before: dict | None, after: dict | None) -> str:
    """A schemaless Debezium message on one line; json.dumps escapes the control characters and
    keeps U+2028, U+2029 and U+0085 as they are, as Debezium's JSON converter does."""
    message = {"op": op, "ts_ms": 1_700_000_000_000 + lsn, "source": {"table": "notes", "lsn": lsn}}
    return json.dumps({**message, "before": before, "after": after}, ensure_ascii=False) + "\n"


def key(i: int, sep: str) -> str:
    return f"{sep}key {i}{sep}"  # first, so that it lies in the prefix Delta's statistics keep


@pytest.fixture(scope="module")
def storage(spark, tmp_path_factory) -> Path:
    """Two runs: inserts; then updates, a delete and a change whose `n` is no integer (quarantined
    by `values_cast`, so the report shows it)."""
    folder = tmp_path_factory.mktemp("line-separators")
    feed, root = folder / "notes.jsonl", folder / "storage"
    first = [change("c", 10 + i, None, {"id": key(i, s), "body": f"a{s}b", "n": i}) for i, s in enumerate(SEPARATORS)]
    feed.write_text("".join(first), encoding="utf-8")
    assert any(ord(c) in (0x2028, 0x2029, 0x85) for c in feed.read_text(encoding="utf-8"))  # raw in the file
    ingest(spark, "debezium-json", feed, root, keys={"notes": "id"}, columns=COLUMNS, layout="json-lines")
    later = [
        change("u", 100 + i, None, {"id": key(i, s), "body": f"{s}{s}changed{s}", "n": 100 + i})
        for i, s in enumerate(SEPARATORS)
    ]
    later.append(change("d", 200, {"id": key(0, SEPARATORS[0]), "body": None, "n": None}, None))
    later.append(change("u", 201, None, {"id": key(1, SEPARATORS[1]), "body": "x", "n": f"not{SEPARATORS[1]}a number"}))
    with feed.open("a", encoding="utf-8") as out:
        out.write("".join(later))
    ingest(spark, "debezium-json", feed, root, keys={"notes": "id"}, columns=COLUMNS, layout="json-lines")
    return root


def expected_gold() -> list[dict]:
    return sorted(
        ({"id": key(i, s), "body": f"{s}{s}changed{s}", "n": 100 + i} for i, s in enumerate(SEPARATORS) if i != 0),
        key=lambda row: row["id"],
    )


def test_show_gives_every_value_exact_without_a_jvm(storage):
    result = cli_without_jvm("show", "gold_notes", "--storage", str(storage), "--json", "--limit", "100")
    assert result.returncode == 0, result.stderr[-3000:]
    shown = [{c: row[c] for c in ("id", "body", "n")} for row in json.loads(result.stdout)]
    assert sorted(shown, key=lambda row: row["id"]) == expected_gold()


def test_show_prints_one_row_a_line(storage):
    """Without --json, `show` prints a JSON object a line: lines ended by "\\n", the separators
    inside values kept as they are (JSON allows them in a string)."""
    result = cli_without_jvm("show", "gold_notes", "--storage", str(storage), "--limit", "100")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in lines_of(result.stdout)]
    assert len(rows) == len(SEPARATORS) - 1
    assert sorted(({c: r[c] for c in ("id", "body", "n")} for r in rows), key=lambda r: r["id"]) == expected_gold()


def test_status_counts_every_table_without_a_jvm(storage):
    result = cli_without_jvm("status", "--storage", str(storage), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {e["name"]: e["rows"] for e in json.loads(result.stdout)}
    assert rows["gold_notes"] == len(SEPARATORS) - 1
    assert rows["bronze_debezium_json"] == 2 * len(SEPARATORS) + 2
    assert rows["changes_notes_quarantine"] == 1


def test_the_report_shows_the_quarantined_value_exact(storage, tmp_path):
    result = cli_without_jvm("report", "--storage", str(storage), "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    page = unescape((tmp_path / "index.html").read_text(encoding="utf-8"))
    assert json.dumps(key(1, SEPARATORS[1])) in page  # the quarantined change's values, as JSON text
    assert f"n: not{SEPARATORS[1]}a number is not int" in page  # its reason, with the value as sent


def test_lines_end_at_newline_only():
    inside = [s for s in SEPARATORS if "\n" not in s]
    text = "".join(f"a{s}b\n" for s in inside)
    assert lines_of(text) == [f"a{s}b" for s in inside]
    assert lines_of(text.encode("utf-8")) == [f"a{s}b".encode() for s in inside]
    assert lines_of("x\r\ny\n\nz") == ["x\r", "y", "", "z"]  # a \r before "\n" is the line's
    assert lines_of("") == []


def test_a_kafka_dump_lands_every_value_exact(tmp_path):
    """Kafka-dump lines (Arrow's reader, and the line-by-line fallback) keep such values whole,
    a CRLF line end included (its \\r is JSON whitespace)."""
    records = [
        {"topic": "t", "partition": 0, "offset": i, "timestamp": 1, "key": f"k{s}", "value": f"{s}v{s}"}
        for i, s in enumerate(SEPARATORS)
    ]
    dump = tmp_path / "dump.jsonl"
    ends = [b"\r\n" if i == 3 else b"\n" for i in range(len(records))]
    dump.write_bytes(
        b"".join(json.dumps(r, ensure_ascii=False).encode() + end for r, end in zip(records, ends, strict=True))
    )
    source = SourceConf(name="s", format="debezium-json", input=InputConf(path=dump, layout="kafka-dump"))
    rows = FileLanding(source).next_batch().rows.to_pylist()
    assert [(r["key"], r["value"], r["_landing_error"]) for r in rows] == [
        (f"k{s}".encode(), f"{s}v{s}".encode(), None) for s in SEPARATORS
    ]
