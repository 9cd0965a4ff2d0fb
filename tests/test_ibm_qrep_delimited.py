"""IBM Q Replication Event Publishing delimited messages: every example of the vendor's document,
quoting and delimiters, invalid character data, and segmented transactions reassembled in every
delivery order, with duplicates and missing segments, parser-level and end to end."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import itertools
import json
import os
from pathlib import Path

import pytest

from cdc_medallion.cli import main
from cdc_medallion.config import load_conf
from cdc_medallion.errors import ConfigError
from cdc_medallion.formats import get_format
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.accounting import account_source
from cdc_medallion.storage.delta_store import DeltaStore
from tests.conftest import REPO, shared_path
from tests.helpers import datasets, gold_rows, ingest, message, read_rows

FORMAT = "ibm-qrep-delimited"
SEED = "ibm-qrep-event-publishing-delimited.txt"
EMPLOYEE = "FIRSTNME:VARCHAR,LASTNAME:VARCHAR,JOB:VARCHAR,WORKDEPT:VARCHAR,SALARY:DECIMAL(9,2),COMM:DECIMAL(9,2)"
T1 = "C1:INTEGER,C2:CHAR(4),C3:CHAR(3)"
OPTIONS = {"tables": f"EMPLOYEE={EMPLOYEE};ASN.T1={T1}"}
SOURCE = "ibm_qrep_delimited"  # the ad-hoc source name of `ingest --format ibm-qrep-delimited`


# --- the seed's examples --------------------------------------------------------------------------
def seed_examples() -> list[list[str]]:
    """The six printed examples (V10, V11, HEX V10, HEX V11, NULL V10, NULL V11), each as its
    change-data records on the wire: the printed line breaks are formatting only ("new lines
    occur only at the end of each record") and fall after a column delimiter, so a record is
    its printed lines joined; a record starts at a line starting with the `type` field."""
    blocks: list[list[str]] = []
    lines = shared_path("seeds", SEED).read_text(encoding="utf-8").splitlines()
    current: list[str] | None = None
    for line in lines:
        if line.startswith("DB2 for z/OS V1"):
            current = []
            blocks.append(current)
        elif current is not None and line.startswith(("10,", '"', ",")):
            if line.startswith("10,"):
                current.append(line)
            else:
                assert current[-1].endswith(","), current[-1]
                current[-1] += line
        else:
            current = None
    return blocks


def parser(**options):
    return get_format(FORMAT)("test", {**OPTIONS, **options})


def parse(texts: list[str], context=None, ingest_ts=None, **options) -> list[dict]:
    messages = [dataclasses.replace(message(t, line=i), ingest_ts=ingest_ts) for i, t in enumerate(texts)]
    return parser(**options).parse_messages(messages, context or [])


def changes(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if e["kind"] == "change"), key=lambda e: e["sequence"])


def test_seed_holds_six_examples_with_the_printed_typographic_quote():
    blocks = seed_examples()
    assert [len(b) for b in blocks] == [3, 3, 1, 1, 1, 1]
    # Both employee examples print one closing quote of record 2 as U+201D.
    assert ["\u201d" in record for record in blocks[0]] == [False, True, False]
    assert ["\u201d" in record for record in blocks[1]] == [False, True, False]


@pytest.mark.parametrize("version", ["V10", "V11"])
@pytest.mark.parametrize("one_message", [True, False], ids=["one-message", "message-per-record"])
def test_seed_employee_example(version, one_message):
    records = seed_examples()[0 if version == "V10" else 1]
    events = parse(["\n".join(records)] if one_message else records)
    assert [e["kind"] for e in events] == ["change"] * 3
    john, ed, bill = changes(events)
    assert (john["op"], john["source_schema"], john["source_table"]) == ("INSERT", "TEST", "EMPLOYEE")
    assert john["before"] is None
    assert john["after"] == {
        "FIRSTNME": "John",
        "LASTNAME": "Doe",
        "JOB": "MGR",
        "WORKDEPT": "SALES",
        "SALARY": "120000",
        "COMM": "12000",
    }
    assert john["column_types"]["SALARY"] == "decimal(9,2)" and john["source_types"]["SALARY"] == "DECIMAL(9,2)"
    assert john["event_ts"] == dt.datetime(2006, 6, 30, 18, 0, 52, tzinfo=dt.UTC)
    assert john["tx_id"] == "0000:0000:0388:4642:0000" + (":0000" if version == "V11" else "")
    assert john["flags"] is None
    assert json.loads(john["detail"])["plan_name"] == "ASNQC910"
    # Ed Smith: the typographic closing quote of commit_lsn is repaired, flagged, and counted.
    assert (ed["op"], ed["before"]["SALARY"], ed["after"]["SALARY"]) == ("UPDATE", "109000", "150000")
    assert ed["changed_columns"] == ["SALARY", "COMM"]
    assert ed["flags"] == ["repaired_quote:commit_lsn"]
    assert ed["event_ts"] == dt.datetime(2006, 6, 30, 18, 1, 2, tzinfo=dt.UTC)
    # Bill Green: commit_time 18.05.67 is not a time: the row is kept and flagged.
    assert (bill["op"], bill["after"]["SALARY"]) == ("UPDATE", "110000")
    assert bill["event_ts"] is None
    assert bill["flags"] == ["invalid_time:commit_time:2006-06-30-18.05.67"]
    # Order: commit_lsn, then the record's place in its transaction.
    assert [e["sequence"].split("|")[0] for e in (john, ed, bill)] == [
        "lsn:0000000000000271000c000000000000:0000000001",
        "lsn:00000000000002712669000000000000:0000000001",
        "lsn:00000000000002713543000000000000:0000000001",
    ]
    assert all(e["tx_seq"] == 1 and e["tx_last"] for e in (john, ed, bill))


def test_seed_typographic_quote_without_repair_quarantines_only_that_record():
    records = seed_examples()[0]
    events = parse(["\n".join(records)], repair_typographic_quotes="false")
    assert sorted(e["kind"] for e in events) == ["change", "change", "error"]
    [error] = [e for e in events if e["kind"] == "error"]
    assert error["error"].startswith("record 2 of 3: field 9 (commit_lsn): ")
    assert "typographic quote '\u201d' (U+201D)" in error["error"]
    assert "repair_typographic_quotes" in error["error"]
    assert error["raw_message"] == records[1]
    assert error["bronze_ref"] == "test.jsonl:0"
    assert [e["after"]["FIRSTNME"] for e in changes(events)] == ["John", "Bill"]


@pytest.mark.parametrize("index", [2, 3], ids=["V10", "V11"])
def test_seed_invalid_character_data_sent_in_hex(index):
    [record] = seed_examples()[index]
    [event] = parse([record])
    assert (event["op"], event["source_schema"], event["source_table"]) == ("INSERT", "ASN", "T1")
    assert event["before"] is None
    assert event["after"] == {"C1": "1", "C2": "John", "C3": "Doe"}
    assert event["flags"] == ["invalid_char_hex:col 2 (C2):A"]


@pytest.mark.parametrize("index", [4, 5], ids=["V10", "V11"])
def test_seed_invalid_character_data_sent_as_null(index):
    [record] = seed_examples()[index]
    [event] = parse([record])
    # The NULLs stand for values Q Capture could not convert, not for SQL NULL: left out.
    assert event["after"] == {"C1": "1"}
    assert event["present_columns"] == ["C1"]
    assert event["flags"] == ["invalid_char_null:col 2 (C2):A"]


# --- records, quoting, values -------------------------------------------------------------------
def header(op="ISRT", table="T2", owner="APP", tx="0000:0000:0388:4642:0000:0000", seg=0, ident="IBM", lsn=None):
    lsn = lsn or "0000:0000:0000:0271:000c:0000:0000:0000"
    return (
        f'10,"{ident}","2024060","120000000000","{owner}","{table}","{op}","{tx}","{lsn}",'
        f'"2024-02-29-12.00.00","ASNQCAP",{seg:04d},'
    )


def test_invalid_hex_with_code_page_lob_and_undecodable_bytes():
    options = {"tables": {"APP.T2": {"columns": ["ID:INTEGER", "NAME:CHAR(5)", "NOTE:CLOB(1M)"], "code_page": "cp037"}}}
    ebcdic = "ABC".encode("cp037").hex().upper()  # C1C2C3
    ident = "IBM-INVALID-COLUMN-0002-B-HEX"
    events = parse([header("REPL", ident=ident) + f'7,"{ebcdic}",,7,"C1FF",'], **options)
    [event] = events
    assert event["before"] == {"ID": "7", "NAME": "ABC"}  # NOTE (CLOB) was sent as NULL: absent
    assert event["after"]["ID"] == "7" and "NOTE" not in event["after"]
    assert event["flags"] == ["invalid_char_hex:col 2 (NAME):B"]
    [bad] = parse([header(ident=ident) + ',,,7,"4A6F686ZZ",'], **options)
    assert bad["kind"] == "error" and "after.NAME" in bad["error"] and "not hexadecimal" in bad["error"]
    [utf8] = parse([header(ident=ident) + ',,,7,"FF41",'], tables={"APP.T2": "ID:INT,NAME:CHAR(5),NOTE:CLOB"})
    assert utf8["after"]["NAME"] == "\ufffdA"
    assert "invalid_char_replaced:NAME:A" in utf8["flags"]


def test_custom_delimiters_quoting_null_and_empty_string():
    options = {
        "tables": {"T2": "ID:INTEGER,NAME:VARCHAR(40),PRICE:DECIMAL(9,2),NOTE:VARCHAR(10)"},
        "column_delimiter": ";",
        "string_delimiter": "'",
        "decimal_character": ",",
        "record_delimiter": "|",
    }
    head = header().replace(",", ";").replace('"', "'")
    first = head + ";;;;1;'O''Brien; Dublin | Cork';1234,56;''"
    second = head.replace("'ISRT'", "'DLET'") + "2;'x';-0,5;;;;;"
    events = parse([f"{first}|{second}|"], **options)
    insert, delete = sorted((e for e in events if e["kind"] == "change"), key=lambda e: e["op"])[::-1]
    assert insert["after"] == {"ID": "1", "NAME": "O'Brien; Dublin | Cork", "PRICE": "1234.56", "NOTE": ""}
    assert delete["op"] == "DELETE" and delete["after"] is None
    assert delete["before"] == {"ID": "2", "NAME": "x", "PRICE": "-0.5", "NOTE": None}
    # Both records of one transaction in one message: their place in it orders them.
    assert [insert["tx_seq"], delete["tx_seq"]] == [1, 2]
    assert insert["sequence"] < delete["sequence"]


def test_dates_times_and_timestamps_are_decoded_and_invalid_ones_flagged():
    options = {"tables": {"T2": "D:DATE,T:TIME,TS:TIMESTAMP(12),B:VARCHAR(8) FOR BIT DATA"}}
    values = '"2024-02-29","18.30.00","2024-02-29-18.30.00.123456789012","C1C2"'
    bad = '"2023-02-29","25.00.00","2024-02-29-18.30.61",'
    [event] = parse([header("REPL") + values + "," + bad], **options)
    # TIMESTAMP(12) keeps its 12 digits: more than a Spark timestamp holds, so it is exact text
    before = {"D": "2024-02-29", "T": "18:30:00", "TS": "2024-02-29 18:30:00.123456789012", "B": "wcI="}
    assert event["before"] == before
    assert event["after"] == {"D": "2023-02-29", "T": "25.00.00", "TS": "2024-02-29-18.30.61", "B": None}
    assert event["flags"] == [
        "invalid_time:D:A:2023-02-29",
        "invalid_time:T:A:25.00.00",
        "invalid_time:TS:A:2024-02-29-18.30.61",
    ]
    assert event["column_types"] == {"D": "date", "T": "string", "TS": "string", "B": "binary"}


def test_value_count_unknown_table_and_bad_header_are_quarantined_with_reasons():
    short = header(table="EMPLOYEE", owner="TEST") + ',,,,,,"Eve","Short","CLERK","OPS",40000'
    unknown = header(table="NOPE") + ",1"
    bad_op = header(op="UPSERT", table="EMPLOYEE")
    bad_tx = header(tx="0000:0000:0388") + ",1"
    events = parse([short, unknown, bad_op, bad_tx])
    assert [e["kind"] for e in events] == ["error"] * 4
    errors = [e["error"] for e in sorted(events, key=lambda e: e["bronze_ref"])]
    assert errors[0] == (
        "record: values: 11 values, but EMPLOYEE has 6 columns in conf, so a record carries 12 (6 before and 6 after)"
    )
    assert "no columns configured for APP.NOPE" in errors[1] and "`tables`" in errors[1]
    assert "unknown operation 'UPSERT'" in errors[2]
    assert "transaction_identifier" in errors[3] and "6 bytes" in errors[3]


def test_lsn_widths_sort_as_numbers():
    """10-byte (replication 10.1) and 16-byte (10.2.1) commit LSNs compare by value."""
    old = header(table="T1", owner="ASN", tx="0000:0000:0388:4642:0000", lsn="0000:0000:0388:4642:0000") + ",,,1,,"
    new = header(table="T1", owner="ASN", lsn="0000:0000:0000:0271:000c:0000:0000:0000") + ",,,2,,"
    first, second = changes(parse([new, old]))
    assert (first["after"]["C1"], second["after"]["C1"]) == ("1", "2")
    assert first["sequence"].startswith("lsn:000000000000000000000388464200")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"column_delimiter": "a"}, "column_delimiter 'a' is alphanumeric"),
        ({"decimal_character": "5"}, "decimal_character '5' is alphanumeric"),
        ({"string_delimiter": ","}, "column_delimiter and string_delimiter are both ','"),
        ({"record_delimiter": ";;"}, "record_delimiter must be exactly one character"),
        ({"column_delimiter": "\u3001"}, "is not a single-byte character"),
        ({"code_page": "klingon"}, "option 'code_page': unknown code page"),
        ({"tables": {"T": ["A:NOT_A_TYPE"]}}, "unknown column type 'NOT_A_TYPE'"),
        ({"tables": {"T": ["A;INT"]}}, "must be a column name and a type name"),
        ({"incomplete_timeout_seconds": "soon"}, "key 'options.incomplete_timeout_seconds': must be a number"),
        ({"incomplete_timeout_seconds": -1}, "key 'options.incomplete_timeout_seconds': must be 0 or more, got -1"),
        ({"repair_typographic_quotes": "flase"}, "key 'options.repair_typographic_quotes': must be true or false"),
        ({"time_zone": "Mars/Olympus"}, "unknown time zone"),
    ],
)
def test_bad_configuration_is_a_startup_error(options, message):
    with pytest.raises(ConfigError, match="source 'src'") as error:
        get_format(FORMAT)("src", {**OPTIONS, **options})
    assert message in str(error.value)


def test_delimiter_escapes_from_the_command_line():
    fmt = get_format(FORMAT)("src", {**OPTIONS, "record_delimiter": "\\x25", "column_delimiter": "\\t"})
    assert (fmt.delimiters.record, fmt.delimiters.column) == ("%", "\t")


# --- segmented transactions ---------------------------------------------------------------------
ACCT = "ID:INTEGER,OWNER:VARCHAR(20),BALANCE:DECIMAL(11,2)"


def record(tx: int, seg: int, op: str, before: tuple | None, after: tuple | None) -> str:
    def value(v):
        if v is None:
            return ""
        return f'"{v}"' if isinstance(v, str) else str(v)

    values = [value(v) for v in (before or (None,) * 3)] + [value(v) for v in (after or (None,) * 3)]
    return (
        f'10,"IBM","2026012","120000000000","BANK","ACCT","{op}","0000:0000:0388:{tx:04x}:0000:0000",'
        f'"0000:0000:0000:0271:{tx:04x}:0000:0000:0000","2026-01-12-12.00.00","ASNQCAP",{seg:04d},' + ",".join(values)
    )


def transaction(tx: int, segments: int = 3) -> tuple[list[str], dict[int, tuple]]:
    """A transaction over `segments` messages (0001, 0002, ..., 0000) whose records only give
    the right result in order: segment 1 inserts two rows, each later segment updates the first
    row's balance (and the final one deletes the second row). Returns the messages in segment
    order (0000 last) and the expected final rows by ID."""
    a, b = tx * 10 + 1, tx * 10 + 2
    messages = [record(tx, 1, "ISRT", None, (a, f"owner {tx}", 100)) + "\n" + record(tx, 1, "ISRT", None, (b, "x", 1))]
    balance = 100
    for seg in [*range(2, segments), 0]:
        messages.append(record(tx, seg, "REPL", (a, f"owner {tx}", balance), (a, f"owner {tx}", balance + 10)))
        balance += 10
    messages[-1] += "\n" + record(tx, 0, "DLET", (b, "x", 1), None)
    return messages, {a: (f"owner {tx}", decimal.Decimal(balance))}


@pytest.mark.parametrize("duplicate_at", [0, 3])
def test_every_delivery_order_with_duplicates_parser_level(duplicate_at):
    texts, expected = transaction(1, segments=4)
    options = {"tables": {"ACCT": ACCT}}
    for order in itertools.permutations(range(4)):
        delivered = [texts[i] for i in order]
        delivered.insert(duplicate_at, delivered[0])  # a redelivery, before or after the original
        events = parse(delivered, **options)
        kinds = sorted(e["kind"] for e in events)
        assert kinds == ["change"] * 6 + ["transaction"] * 2, order
        applied = changes(events)
        assert [(e["op"], e["tx_seq"]) for e in applied] == [
            ("INSERT", 1),
            ("INSERT", 2),
            ("UPDATE", 3),
            ("UPDATE", 4),
            ("UPDATE", 5),
            ("DELETE", 6),
        ], order
        assert [e["tx_last"] for e in applied] == [False] * 5 + [True]
        assert applied[-1]["after"] is None and applied[-2]["after"]["BALANCE"] == "130"
        [duplicate] = [e for e in events if e["kind"] == "transaction" and e.get("flags")]
        assert duplicate["flags"] == ["duplicate_segment"] and "not applied" in duplicate["detail"]
        # Every message is accounted for, and each change names the other segments it needed.
        refs = {e["bronze_ref"] for e in events}
        assert refs == {f"test.jsonl:{i}" for i in range(5)}
        assert all(len(e["related_refs"]) == 3 for e in applied)
    assert expected == {11: ("owner 1", decimal.Decimal(130))}


def test_missing_segment_is_held_then_completed():
    texts, _ = transaction(2, segments=4)
    first = parse([texts[0], texts[2], texts[3]], tables={"ACCT": ACCT})
    assert [e["kind"] for e in first] == ["held"] * 3
    assert first[0]["detail"] == (
        "incomplete transaction 0000:0000:0388:0002:0000:0000 (commit_lsn 0000:0000:0000:0271:0002:0000:0000:0000): "
        "have segment(s) 0001, 0003, 0000, missing segment(s) 0002"
    )
    [held] = parse([texts[0]], tables={"ACCT": ACCT})
    assert held["detail"].endswith("have segment(s) 0001, missing the final segment 0000")
    done = parse([texts[0], texts[2], texts[3], texts[1]], tables={"ACCT": ACCT})
    assert sorted(e["kind"] for e in done) == ["change"] * 6 + ["transaction"]
    # The protocol carries no segment count: a lost highest numbered segment cannot be told apart.
    assert sorted(e["kind"] for e in parse([texts[0], texts[1], texts[3]], tables={"ACCT": ACCT}))[0] == "change"


def test_a_transaction_missing_its_first_segment_stays_held():
    """Segments 0002 and the final 0000 without 0001: the first segment is known to exist (the
    numbering starts at 0001), so nothing is applied until it comes."""
    texts, _ = transaction(6)  # 0001, 0002, 0000
    held = parse(texts[1:], tables={"ACCT": ACCT})
    assert [e["kind"] for e in held] == ["held", "held"]
    assert held[0]["detail"].endswith("have segment(s) 0002, 0000, missing segment(s) 0001")
    done = parse([*texts[1:], texts[0]], tables={"ACCT": ACCT})
    assert [e["kind"] for e in changes(done)] == ["change"] * 5
    assert {e["kind"] for e in done} == {"change", "transaction"}


def test_incomplete_transaction_times_out_into_quarantine():
    texts, _ = transaction(3)
    landed = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    kept = parse(texts[:2], ingest_ts=landed, tables={"ACCT": ACCT})  # default: a day
    assert [e["kind"] for e in kept] == ["held", "held"]
    forever = parse(texts[:2], ingest_ts=landed, tables={"ACCT": ACCT}, incomplete_timeout_seconds="null")
    assert [e["kind"] for e in forever] == ["held", "held"]
    events = parse(texts[:2], ingest_ts=landed, tables={"ACCT": ACCT}, incomplete_timeout_seconds=3600)
    assert [e["kind"] for e in events] == ["error", "error"]
    assert events[0]["error"].startswith("transaction: incomplete transaction 0000:0000:0388:0003:0000:0000")
    assert "missing the final segment 0000; 1 segment(s) missing; waited 7200s" in events[0]["error"]


def test_conflicting_segment_and_redelivery_in_a_later_run():
    texts, _ = transaction(4)
    options = {"tables": {"ACCT": ACCT}}
    conflicting = texts[1].replace("110", "999")
    events = parse([*texts, conflicting], **options)
    [error] = [e for e in events if e["kind"] == "error"]
    assert error["bronze_ref"] == "test.jsonl:3"
    assert "segment 0002 of transaction 0000:0000:0388:0004:0000:0000" in error["error"]
    assert "differs from the one received as test.jsonl:1" in error["error"]
    # A later run sees the completed transaction's marker as context: a redelivered segment
    # is recognised (not held as a new incomplete transaction), a different one quarantined.
    markers = [e for e in events if e["kind"] == "transaction"]
    later = parse([texts[0], conflicting], context=markers, **options)
    assert [e["kind"] for e in later] == ["transaction", "error"]
    assert later[0]["flags"] == ["duplicate_segment"] and "earlier run" in later[0]["detail"]
    assert "differs from the one applied earlier" in later[1]["error"]


def test_bad_record_in_an_incomplete_transaction_waits_with_it():
    texts, _ = transaction(5)
    broken = texts[0] + "\n" + header(table="ACCT", owner="BANK") + ",1"
    events = parse([broken], tables={"ACCT": ACCT})
    assert [e["kind"] for e in events] == ["held"]  # nothing else, or it would not be re-fed
    events = parse([broken, *texts[1:]], tables={"ACCT": ACCT})
    assert sorted(e["kind"] for e in events) == ["change"] * 5 + ["error", "transaction"]


# --- end to end ----------------------------------------------------------------------------------
def kafka_dump(path: Path, texts: list[str], start: int) -> int:
    with path.open("a", encoding="utf-8") as handle:
        for offset, text in enumerate(texts, start):
            handle.write(json.dumps({"topic": "qrep", "partition": 0, "offset": offset, "value": text}) + "\n")
    return start + len(texts)


def test_segmented_transactions_end_to_end(spark, storage, tmp_path):
    source = tmp_path / "qrep.jsonl"
    run = {"keys": {"ACCT": "ID"}, "columns": {"ACCT": ACCT}, "layout": "kafka-dump"}
    expected: dict[int, tuple] = {}
    delivered: list[str] = []
    for tx, order in enumerate(itertools.permutations(range(3)), 1):  # every order of three segments
        texts, rows = transaction(tx)
        expected |= rows
        delivered += [texts[i] for i in order] + ([texts[order[0]]] if tx % 2 else [])  # duplicates
    gappy, gappy_rows = transaction(7, segments=4)  # segment 0002 arrives one run late
    open_ended, _ = transaction(8)  # the final segment never comes
    delivered += [
        gappy[0],
        gappy[3],
        gappy[2],
        open_ended[0],
        "not a record",
        record(9, 0, "MERGE", None, (91, "m", 1)),
    ]
    offset = kafka_dump(source, delivered, 0)

    ingest(spark, FORMAT, source, storage, **run)
    gold = {r["ID"]: (r["OWNER"], r["BALANCE"]) for r in gold_rows(spark, storage, "ACCT")}
    assert gold == expected  # complete transactions only, each applied once, in order
    silver = read_rows(spark, storage, f"silver_{SOURCE}")
    assert sum(r["kind"] == "held" for r in silver) == 4
    assert sum(r["kind"] == "transaction" and r["flags"] == ["duplicate_segment"] for r in silver) == 3
    quarantine = read_rows(spark, storage, f"silver_{SOURCE}_quarantine")
    assert len(quarantine) == 2

    offset = kafka_dump(source, [gappy[1], delivered[0]], offset)  # the gap, and a late redelivery
    ingest(spark, FORMAT, source, storage, **run)
    gold = {r["ID"]: (r["OWNER"], r["BALANCE"]) for r in gold_rows(spark, storage, "ACCT")}
    assert gold == expected | gappy_rows
    silver = read_rows(spark, storage, f"silver_{SOURCE}")
    assert sum(r["kind"] == "transaction" and r["flags"] == ["duplicate_segment"] for r in silver) == 4

    # Held messages are looked at again when the source has new messages: one more transaction.
    offset = kafka_dump(source, [record(10, 0, "ISRT", None, (101, "late", 5))], offset)
    ingest(spark, FORMAT, source, storage, **run, options={"incomplete_timeout_seconds": "0"})
    assert {r["ID"] for r in gold_rows(spark, storage, "ACCT")} == {*expected, *gappy_rows, 101}
    quarantine = read_rows(spark, storage, f"silver_{SOURCE}_quarantine")
    [timed_out] = [r for r in quarantine if r["error"].startswith("transaction: incomplete")]
    assert "0000:0000:0388:0008:0000:0000" in timed_out["error"] and "final segment 0000" in timed_out["error"]

    # Every bronze message ends resolved: applied, recorded as a duplicate, or quarantined.
    silver = read_rows(spark, storage, f"silver_{SOURCE}")
    resolved = {ref for r in silver if r["kind"] != "held" for ref in [r["bronze_ref"], *(r["related_refs"] or [])]}
    resolved |= {r["bronze_ref"] for r in quarantine}
    assert len(resolved) == datasets(storage)[f"bronze_{SOURCE}"]["rows"] == offset


def test_sample_conf_includes_this_format(spark, tmp_path):
    """`make run` reads conf/local.yml, which includes conf/sources/ibm.yml and its sample."""
    assert "db2" in {s.name for s in load_conf(REPO / "conf" / "local.yml").sources}
    conf_file = tmp_path / "pipeline.yml"
    fragment = os.path.relpath(REPO / "conf" / "sources" / "ibm.yml", tmp_path)
    conf_file.write_text(
        f"pipeline: {{name: ibm_sample, storage: {tmp_path / 'storage'}, transformations: {REPO / 'transformations'},"
        f" expectations: {REPO / 'expectations'}}}\ninclude: [{fragment}]\n",
        encoding="utf-8",
    )
    conf = load_conf(conf_file)
    run_pipeline(conf, spark=spark)
    gold = {(r["FIRSTNME"], r["LASTNAME"]): r["SALARY"] for r in gold_rows(spark, conf.storage, "TEST.EMPLOYEE")}
    assert gold == {
        ("John", "Doe"): decimal.Decimal("125000.00"),
        ("Ed", "Smith"): decimal.Decimal("150000.00"),
        ("Ann", "Lee"): decimal.Decimal("98000.50"),
    }
    assert [(r["C1"], r["C2"], r["C3"]) for r in gold_rows(spark, conf.storage, "ASN.T1")] == [(1, "John", "Doe")]
    [quarantined] = read_rows(spark, conf.storage, "silver_db2_quarantine")
    assert "10 values, but TEST.EMPLOYEE has 6 columns" in quarantined["error"]


def test_cli_ingest_of_the_v11_example(spark, tmp_path, capsys):
    """`cdc-medallion ingest` of this format, through the CLI's `main` (in this process:
    tests/test_cli.py runs the command itself), on the V11 example one record per line."""
    source = tmp_path / "v11.del"
    source.write_text("\n".join(seed_examples()[1]) + "\n", encoding="utf-8")
    storage = tmp_path / "storage"
    command = ["ingest", "--format", FORMAT, "--input", str(source), "--storage", str(storage), "--quiet"]
    command += ["--columns", f"EMPLOYEE={EMPLOYEE}", "--key", "EMPLOYEE=FIRSTNME,LASTNAME"]
    assert main(command) == 0
    capsys.readouterr()
    assert main(["status", "--storage", str(storage), "--json"]) == 0
    names = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert names["gold_employee"]["rows"] == 3 and names["gold_employee"]["source_table"] == "EMPLOYEE"
    assert names[f"bronze_{SOURCE}"]["rows"] == names[f"silver_{SOURCE}"]["rows"] == 3
    assert f"silver_{SOURCE}_quarantine" not in names  # nothing quarantined: no quarantine table
    assert main(["show", "gold_employee", "--storage", str(storage), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["FIRSTNME"], r["LASTNAME"]): decimal.Decimal(r["SALARY"]) for r in rows} == {
        ("John", "Doe"): 120000,
        ("Ed", "Smith"): 150000,
        ("Bill", "Green"): 110000,
    }


def test_held_across_runs_until_the_first_segment_then_a_timeout_is_quarantined_once(spark, storage, tmp_path):
    """End to end: a transaction whose 0001 comes a run late stays held, then applies; one whose
    final segment never comes is quarantined at its timeout and, in every later run, is neither
    fed to the parser again nor quarantined twice."""
    source = tmp_path / "qrep.jsonl"
    run = {"keys": {"ACCT": "ID"}, "columns": {"ACCT": ACCT}, "layout": "kafka-dump"}
    late_first, late_rows = transaction(11)
    open_ended, _ = transaction(12)
    offset = kafka_dump(source, [late_first[1], late_first[2], open_ended[0]], 0)
    ingest(spark, FORMAT, source, storage, **run)
    assert {r["kind"] for r in read_rows(spark, storage, f"silver_{SOURCE}")} == {"held"}

    offset = kafka_dump(source, [late_first[0]], offset)
    ingest(spark, FORMAT, source, storage, **run)
    assert {r["ID"]: (r["OWNER"], r["BALANCE"]) for r in gold_rows(spark, storage, "ACCT")} == late_rows

    timeout = {"incomplete_timeout_seconds": "0"}
    held_before_timeout = None
    for extra in range(2):  # the timeout run, then one more run with a new message
        offset = kafka_dump(source, [record(20 + extra, 0, "ISRT", None, (200 + extra, "n", 1))], offset)
        ingest(spark, FORMAT, source, storage, **run, options=timeout)
        quarantine = read_rows(spark, storage, f"silver_{SOURCE}_quarantine")
        timed_out = [r for r in quarantine if "0000:0000:0388:000c:0000:0000" in r["error"]]
        assert len(timed_out) == 1, timed_out
        events = [
            r for r in read_rows(spark, storage, f"silver_{SOURCE}") if r["bronze_ref"] == timed_out[0]["bronze_ref"]
        ]
        assert {r["kind"] for r in events} == {"held"}
        held_before_timeout = held_before_timeout or len(events)
        assert len(events) == held_before_timeout  # once quarantined, never fed to the parser again
    assert {r["ID"] for r in gold_rows(spark, storage, "ACCT")} == {*late_rows, 200, 201}


def test_a_transaction_held_then_timed_out_is_accounted_as_quarantined_not_held(spark, storage, tmp_path):
    """The accounting of a real run, after a held transaction timed out: its messages were held
    (their `held` rows stay in silver) and then quarantined, so each counts once, as quarantined;
    `held` counts only the transaction that still waits, and the outcomes add up to bronze's rows."""
    source = tmp_path / "qrep.jsonl"
    run = {"columns": {"ACCT": ACCT}, "layout": "kafka-dump"}  # silver is what is counted: no gold
    timing_out, _ = transaction(31)  # its final segment never comes
    waiting, _ = transaction(33)  # nor this one's, which lands after the timeout run
    offset = kafka_dump(source, [record(30, 0, "ISRT", None, (300, "a", 1)), *timing_out[:2]], 0)
    ingest(spark, FORMAT, source, storage, **run)  # the default timeout, a day: held
    offset = kafka_dump(source, [record(32, 0, "ISRT", None, (320, "b", 2))], offset)
    ingest(spark, FORMAT, source, storage, **run, options={"incomplete_timeout_seconds": "0"})  # timed out
    offset = kafka_dump(source, [waiting[0], record(34, 0, "ISRT", None, (340, "c", 3))], offset)
    ingest(spark, FORMAT, source, storage, **run)  # held, a day to go

    timed_out = {f"qrep/0/{n}" for n in (1, 2)}
    silver = read_rows(spark, storage, f"silver_{SOURCE}")
    quarantine = read_rows(spark, storage, f"silver_{SOURCE}_quarantine")
    assert timed_out <= {r["bronze_ref"] for r in silver if r["kind"] == "held"}  # held first ...
    assert {r["bronze_ref"] for r in quarantine} == timed_out  # ... then quarantined
    assert all("incomplete transaction" in r["error"] for r in quarantine)
    store = DeltaStore(storage, spark)
    names = [f"bronze_{SOURCE}", f"silver_{SOURCE}", f"silver_{SOURCE}_quarantine"]
    with_spark = account_source(SOURCE, *(store.read(name) for name in names))
    bronze_rows = datasets(storage)[f"bronze_{SOURCE}"]["rows"]
    assert bronze_rows == offset == 6
    assert with_spark.outcomes == {"change": 3, "quarantined": 2, "held": 1}, with_spark.outcomes
    assert with_spark.balanced and sum(with_spark.outcomes.values()) == with_spark.bronze == bronze_rows
    assert [h["bronze_ref"] for h in with_spark.held] == ["qrep/0/4"]
