"""One field changed at a time in valid messages of every JSON format.

A field of a valid message is (a) given a value of another JSON type, (b) dropped, or (c) given
a wrong value of its own type (a non-numeric string where digits are expected, an empty name, a
negative number, an empty object or array). Whatever the change, the message is

- parsed to the same events as the original (the change means nothing to the format), or
- quarantined (an `error` event) whose reason names the field (its key appears in the text), or
- accepted with a flag saying what is missing (an event's `flags` gained an entry),

never accepted with another meaning without a word, and never an exception (a parser bug is
an error event "parser failed: ...", which fails here).

Column values inside row images (`data`, `before`, `after`, ...) may change the meaning of a
change legitimately (another value is another change): they are mutated too, but only checked
for not breaking the parser.

Seeds: the embedded samples (conf/local.yml), the vendor fixtures in ../shared/fixtures when
present, and a few messages written from the vendors' documentation for the formats without
a sample. Only seeds that parse without an error are used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_medallion.formats import get_format
from cdc_medallion.formats.json_common import json_type
from cdc_medallion.formats.message import BronzeMessage
from cdc_medallion.lines import lines_of
from tests.conftest import SHARED
from tests.helpers import message
from tests.test_fuzz_parsers import sample_sources

EXAMPLES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANY = object()  # a path pattern element matching any key or index
DROP = object()  # the mutation that removes the field

# Containers whose members are column values (row images): a changed value is a changed row.
ROW_IMAGES: dict[str, tuple[tuple[Any, ...], ...]] = {
    "canal-json": (("data", ANY), ("old", ANY)),
    "maxwell-json": (("data",), ("old",)),
    "ogg-json": (("before",), ("after",)),
    "aws-dms-json": (("data",), ("before-image",)),
    "shareplex-json": (("data",), ("key",)),
    "debezium-json": (("payload", "before"), ("payload", "after"), ("before",), ("after",)),
    "dataworks-json": (("payload", "before", "dataColumn"), ("payload", "after", "dataColumn")),
    "qlik-json": (("message", "data"), ("message", "beforeData"), ("data",), ("beforeData",)),
}
FORMATS = list(ROW_IMAGES)

# Fields whose absence (dropped, null or "", which the formats all read as absent) has a meaning
# the format documents, so that the events may change without a flag. Only absence: a value of
# another type in these fields must still be the same change or an error naming the field.
_ORDER = "an order key: absent, the next key and then the landing position order the change (documented)"
_TX = "transaction details are optional (present with the writer's transaction settings)"
_KEY = "keys then come from conf (or the Kafka key): the key is documented as optional here"
_TIME = "the commit time is informational (event_ts), never an order here; absent it is unknown"
_DB = "a table is named by its table name alone when the message names no database or schema"
OPTIONAL: dict[str, dict[tuple[Any, ...], str]] = {
    "canal-json": {
        ("database",): _DB,
        ("es",): _ORDER,
        ("id",): _ORDER,
        ("gtid",): _TX,
        ("pkNames",): _KEY,
        ("pkNames", ANY): _KEY,
        ("sql",): "a DDL's statement text is carried when the writer gives it",
        ("table",): "a DDL may concern no table (CREATE DATABASE); a row change without one is an error",
        ("mysqlType",): "types then come from sqlType, else from the JSON values (documented)",
        ("mysqlType", ANY): "that column's type then comes from sqlType, else from its values",
        ("sqlType",): "types then come from the values (documented)",
        ("sqlType", ANY): "that column's type then comes from its values",
    },
    "maxwell-json": {
        ("database",): _DB,
        ("ts",): _ORDER,
        ("xid",): _ORDER,
        ("xoffset",): "absent on the transaction's last row, marked `commit` (documented)",
        ("commit",): "only the transaction's last row carries it (documented)",
        ("primary_key_columns",): _KEY,
        ("primary_key_columns", ANY): _KEY,
    },
    "ogg-json": {
        ("pos",): _ORDER,
        ("op_ts",): _TIME,
        ("primary_keys",): _KEY,
        ("primary_keys", ANY): _KEY,
    },
    "aws-dms-json": {
        ("metadata", "timestamp"): "the landing position orders by default; with order_by=timestamp absent sorts first",
        ("metadata", "schema-name"): _DB,
        ("metadata", "transaction-id"): _TX,
        ("metadata", "transaction-record-id"): _TX,
        ("metadata", "table-name"): "a control record may concern no table; a data record without one is an error",
    },
    "shareplex-json": {
        ("meta", "time"): _TIME + " (it orders only a change without an scn)",
        ("meta", "trans"): _TX,
        ("meta", "size"): _TX,
        ("meta", "idx"): _TX,
        ("meta", "posttime"): "not read",
        ("data",): "a DROP COLUMN may name no columns (documented); a row change without `data` is an error",
    },
    "debezium-json": {
        ("schema",): "a message without the schema envelope is schemaless: types come from the values (documented)",
        ("schema", "fields"): "no field schemas: types come from the values",
        ("schema", "fields", ANY, "fields"): "no column schemas: types come from the values",
        ("schema", "fields", ANY, "fields", ANY, "name"): "no logical type: the column is its Connect type",
        ("schema", "fields", ANY, "fields", ANY, "parameters"): "parameters are optional in Connect schemas",
        ("schema", "fields", ANY, "fields", ANY, "parameters", ANY): "a decimal's scale defaults to 0",
        **{
            (*base, "source", field): _ORDER
            for base in ((), ("payload",))
            for field in ("lsn", "file", "pos", "row", "scn", "commit_lsn", "change_lsn", "event_serial_no", "ts_ms")
        },
        **{(*base, "ts_ms"): _ORDER for base in ((), ("payload",))},
        **{(*base, "source", f): _DB for base in ((), ("payload",)) for f in ("db", "schema")},
        **{(*base, "source", "txId"): _TX for base in ((), ("payload",))},
        **{(*base, "transaction"): _TX for base in ((), ("payload",))},
        ("payload",): "a null payload is how Kafka Connect's JsonConverter writes a null value: a tombstone",
    },
    "dataworks-json": {
        ("schema",): "heartbeats and transaction markers carry none; a row change without it names no table: an error",
        ("schema", "source"): "as `schema`: only a row change must name its table",
        ("schema", "source", ANY): "as `schema`: only a row change must name its table",
        ("schema", "dataColumn"): "types then come from the values, flagged column_not_in_schema (a DDL lists none)",
        ("schema", "dataColumn", ANY): "as `dataColumn`",
        ("schema", "primaryKey"): "null primaryKey: the row-id column DataWorks adds keys the table (documented)",
        ("schema", "primaryKey", ANY): "as `primaryKey`",
        ("payload", "sequenceId"): "absent (or -1): the change sorts before sequenced ones, by systemTime (documented)",
        ("payload", "timestamp"): "eventTime is informational (event_ts); -1 or absent is unknown (documented)",
        ("payload", "timestamp", "eventTime"): "as `timestamp`",
        ("payload", "ddl"): "a DDL's text is carried when DataWorks gives it",
        ("payload", "ddl", "text"): "as `ddl`",
    },
    "qlik-json": {
        **{
            (*base, "headers", field): reason
            for base in ((), ("message",))
            for field, reason in {
                "timestamp": _TIME + ' (full-load rows carry "")',
                "transactionId": _TX,
                "transactionEventCounter": _TX,
                "transactionLastEvent": _TX,
                "streamPosition": "not read",
                "externalSchemaId": "only a change of it is a schema change (documented)",
                "changeMask": "masks are optional: without one the changed columns are unknown (documented)",
                "columnMask": "masks are optional: without one every column is present (documented)",
                "changeSequence": "only CDC changes need it (quarantined without); REFRESH rows carry none",
            }.items()
        },
        ("messageSchemaId",): "a data message without one finds its metadata by its table (documented)",
        ("message", "schemaId"): "the envelope's messageSchemaId names the metadata then (documented)",
        ("message", "lineage", "tableVersion"): "versions only rank metadata of one table",
        ("message", "lineage", "schema"): _DB,
        ("message", "lineage", "timestamp"): _TIME,
        **{
            ("message", "tableStructure", "tableColumns", ANY, field): f"absent {field} is 0 (not numeric, not a key)"
            for field in ("precision", "scale", "primaryKeyPosition")
        },
        ("message", "beforeData"): "beforeData comes with the task's before-image setting (DELETE: `data` serves)",
        ("beforeData",): "as message.beforeData",
    },
}
# Identifiers: any text is valid there (digits are not required).
IDENTIFIERS: dict[str, set[tuple[Any, ...]]] = {
    "qlik-json": {(*base, "headers", f) for base in ((), ("message",)) for f in ("transactionId", "externalSchemaId")},
}
# Values a format documents as "absent".
ABSENT_VALUES = {("dataworks-json", ("payload", "timestamp", "eventTime")): -1}  # -1: unknown (full load)
# Order fields: a negative number there is a writer's "none" marker (DataWorks' sequenceId -1), read
# as the field absent, so the next order field decides (docs/values.md, "Order fields").
_DEBEZIUM_ORDER = ("lsn", "file", "pos", "row", "scn", "commit_lsn", "change_lsn", "event_serial_no", "ts_ms")
ORDER_FIELDS: dict[str, set[tuple[Any, ...]]] = {
    "canal-json": {("es",), ("id",)},
    "maxwell-json": {("ts",), ("ts_ms",), ("xid",), ("xoffset",)},
    "ogg-json": {("pos",)},
    "aws-dms-json": {("metadata", "transaction-record-id")},
    "shareplex-json": {("meta", "scn"), ("meta", "seq")},
    "debezium-json": {
        *((*base, "source", f) for base in ((), ("payload",)) for f in _DEBEZIUM_ORDER),
        *((*base, "ts_ms") for base in ((), ("payload",))),
    },
    "dataworks-json": {("payload", "sequenceId")},
}
# Members copied verbatim into an event's `detail` and read by nothing else: changing them changes
# only that copy.
VERBATIM: dict[str, set[tuple[Any, ...]]] = {
    "dataworks-json": {("payload", "timestamp", ANY)},  # a heartbeat's `detail` keeps its timestamps
    # A metadata event's `detail` keeps the metadata message as written (later runs rebuild the
    # catalog from it): a member read as the same value (or not read: server, task, length,
    # nullable) changes only that copy.
    "qlik-json": {("message", "lineage", ANY), ("message", "tableStructure", "tableColumns", ANY, ANY)},
}
# Another JSON type with a meaning the format documents: Qlik times are text or epoch milliseconds.
OTHER_TYPES = {
    ("qlik-json", path, "a number")
    for base in ((), ("message",))
    for path in ((*base, "headers", "timestamp"), ("message", "lineage", "timestamp"))
}
# Containers whose members are the content (rows of a message, columns of a table's metadata):
# dropping a member is another content, not a broken message.
CONTENT = {
    "canal-json": {("data",)},
    "qlik-json": {("message", "tableStructure", "tableColumns")},
}

# Fields whose value picks the kind of message: seeds with other values here are other shapes.
OPERATION_KEYS = {"type", "op", "op_type", "operation", "record-type", "isDdl"}

# Messages written from the vendors' documentation, for formats without an embedded sample (and
# so that every format has seeds when ../shared is absent).
DOCUMENTED: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {
    "aws-dms-json": [
        (
            {},
            {
                "data": {"order_id": 1, "status": "new", "total": 10.5},
                "metadata": {
                    "timestamp": "2024-05-01T10:00:00.000001Z",
                    "record-type": "data",
                    "operation": "insert",
                    "partition-key-type": "primary-key",
                    "schema-name": "sales",
                    "table-name": "orders",
                    "transaction-id": 42,
                },
            },
        ),
        (
            {"order_by": "timestamp"},
            {
                "data": {"order_id": 1, "status": "paid"},
                "before-image": {"order_id": 1, "status": "new"},
                "metadata": {
                    "timestamp": "2024-05-01T10:00:01Z",
                    "record-type": "data",
                    "operation": "update",
                    "partition-key-type": "primary-key",
                    "schema-name": "sales",
                    "table-name": "orders",
                    "transaction-id": 43,
                    "transaction-record-id": 2,
                },
            },
        ),
        (
            {},
            {
                "data": {"order_id": 1, "status": "paid"},
                "metadata": {
                    "timestamp": "2024-05-01T10:00:02Z",
                    "record-type": "data",
                    "operation": "delete",
                    "partition-key-type": "primary-key",
                    "schema-name": "sales",
                    "table-name": "orders",
                },
            },
        ),
        (
            {},
            {
                "data": None,
                "metadata": {
                    "timestamp": "2024-05-01T10:00:03Z",
                    "record-type": "control",
                    "operation": "create-table",
                    "partition-key-type": "task-id",
                    "schema-name": "sales",
                    "table-name": "orders",
                },
            },
        ),
    ],
    "maxwell-json": [
        (
            {},
            {
                "database": "test",
                "table": "product",
                "type": "update",
                "ts": 1596684893,
                "xid": 7152,
                "xoffset": 1,
                "commit": True,
                "data": {"id": 106, "name": "hammer", "weight": 1.0},
                "old": {"weight": 0.875},
                "primary_key_columns": ["id"],
            },
        )
    ],
    "ogg-json": [
        (
            {},
            {
                "table": "OGG.TBL_TEST",
                "pos": "00000000000000000000150",
                "primary_keys": ["id"],
                "before": {"id": 106, "name": "hammer", "weight": 1.0},
                "after": {"id": 106, "name": "hammer", "weight": 5.1},
                "op_type": "U",
                "op_ts": "2020-05-13 17:30:43.000000",
            },
        )
    ],
}

FIXTURES = {
    "canal-json": "canal-json/*.txt",
    "maxwell-json": "maxwell-json/*.txt",
    "ogg-json": "ogg-json/*.txt",
    "debezium-json": "debezium-json/*.txt",
    "qlik-json": "qlik-replicate-json/*.json",
}


@dataclass(frozen=True)
class Seed:
    options: tuple[tuple[str, Any], ...]
    document: Any  # the parsed JSON message
    context: tuple[dict[str, Any], ...]  # earlier events a stateful format reads (Qlik metadata)

    def events(self, fmt: str, document: Any) -> list[dict[str, Any]]:
        """The events the message becomes, as the pipeline stores them (through Arrow)."""
        parser = get_format(fmt)("fuzz", dict(self.options))
        messages = [_message(document)]
        if parser.stateful:
            return parser.parse_all(messages, list(self.context)).to_pylist()
        return parser.to_arrow([parser.events_for(m) for m in messages], messages).to_pylist()


def _message(document: Any) -> BronzeMessage:
    return message(json.dumps(document), line=7)


# --- seeds -----------------------------------------------------------------------------------
def _raw_seeds(fmt: str) -> Iterator[tuple[dict[str, Any], bytes]]:
    options, values = sample_sources().get(fmt, ({}, []))
    for value in values:
        yield options, value
    for options, document in DOCUMENTED.get(fmt, []):
        yield options, json.dumps(document).encode()
    if fmt in FIXTURES and SHARED.is_dir():
        for path in sorted(SHARED.joinpath("fixtures").glob(FIXTURES[fmt])):
            if path.name.endswith(".expected.json"):
                continue
            text = path.read_text(encoding="utf-8")
            # A .json fixture is one (pretty-printed) message; bare Qlik messages name no table.
            lines = [text] if path.suffix == ".json" else lines_of(text)
            for line in lines:
                if line.strip() and not line.startswith("#"):
                    yield ({"table": "fixture"} if fmt == "qlik-json" else {}), line.encode()


def _context(fmt: str) -> tuple[dict[str, Any], ...]:
    """Qlik data messages find their table's metadata in earlier events: the samples' MD messages."""
    if fmt != "qlik-json":
        return ()  # (only Qlik data messages use it: see `seeds`)
    parser = get_format(fmt)("fuzz", {})
    metadata = [
        message(raw, line=i) for i, (_, raw) in enumerate(_raw_seeds(fmt)) if b'"MD"' in raw or b'"lineage"' in raw
    ]
    return tuple(e for e in parser.parse_all(metadata, []).to_pylist() if e["kind"] == "schema_change")


@cache
def seeds(fmt: str) -> list[tuple[Seed, list[dict[str, Any]]]]:
    """Valid seeds, one per shape (envelope fields and operation), with their events."""
    found: dict[Any, tuple[Seed, list[dict[str, Any]]]] = {}
    context = _context(fmt)
    for options, raw in _raw_seeds(fmt):
        try:
            document = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(document, dict):
            continue
        is_data = document.get("type") != "MD" and "lineage" not in document
        seed = Seed(tuple(sorted(options.items())), document, context if is_data else ())
        events = seed.events(fmt, document)
        if not events or any(e["kind"] == "error" for e in events):
            continue  # the samples hold invalid messages on purpose; they are no valid seeds
        shape = (seed.options, tuple(_shape(fmt, document)))
        found.setdefault(shape, (seed, events))
    return list(found.values())


def _shape(fmt: str, document: Any) -> Iterator[Any]:
    for path, value in _fields(document):
        if not _in_row_image(fmt, path):
            kind = value if path and path[-1] in OPERATION_KEYS else type(value).__name__
            yield (path, kind if isinstance(kind, str | bool) else None)


# --- fields and mutations ----------------------------------------------------------------------
def _fields(document: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) below the document: object members and array elements, nested."""
    if isinstance(document, dict):
        members: Any = document.items()
    elif isinstance(document, list):
        members = enumerate(document)
    else:
        return
    for key, value in members:
        yield (*path, key), value
        yield from _fields(value, (*path, key))


def _in_row_image(fmt: str, path: tuple[Any, ...]) -> bool:
    """A column value (or anything inside one): its container matches a row-image pattern."""
    for pattern in ROW_IMAGES[fmt]:
        if len(path) > len(pattern) and all(p is ANY or p == k for p, k in zip(pattern, path, strict=False)):
            return True
    return False


def _row_change(fmt: str, path: tuple[Any, ...], replacement: Any) -> bool:
    """A row image given other columns (or none), or one row of several dropped: other rows, so
    another change."""
    if replacement is DROP and path[:-1] in CONTENT.get(fmt, ()):
        return True
    return isinstance(replacement, dict) and _matches_any(ROW_IMAGES[fmt], path)


def _optional(fmt: str, path: tuple[Any, ...], replacement: Any) -> bool:
    """A documented-optional field made absent (dropped, null or empty, all read as absent)."""
    absent = replacement is DROP or any(_same(replacement, empty) for empty in (None, "", [], {}))
    absent = absent or _same(replacement, ABSENT_VALUES.get((fmt, path)))
    absent = absent or (fmt, path, json_type(replacement)) in OTHER_TYPES
    if path in ORDER_FIELDS.get(fmt, ()) and _negative(replacement):
        return True  # read as absent: the next order field orders the change (documented)
    return absent and any(_matches(pattern, path) for pattern in OPTIONAL[fmt])


def _negative(value: Any) -> bool:
    """A negative whole number, as a JSON number or as digits."""
    if type(value) is int:
        return value < 0
    return isinstance(value, str) and re.fullmatch(r"-[0-9]+", value.strip()) is not None


def _matches(pattern: tuple[Any, ...], path: tuple[Any, ...]) -> bool:
    return len(pattern) == len(path) and all(p is ANY or p == k for p, k in zip(pattern, path, strict=True))


def _value_at(document: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


def _matches_any(patterns: Any, path: tuple[Any, ...]) -> bool:
    return any(_matches(pattern, path) for pattern in patterns)


def _verbatim(fmt: str, path: tuple[Any, ...]) -> bool:
    return any(_matches(pattern, path) for pattern in VERBATIM.get(fmt, ()))


def _without_detail(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "detail"} for e in events]


def _leaf(path: tuple[Any, ...]) -> str:
    """The key an error should name: the last member name on the path (an element: its array's)."""
    return next(str(k) for k in reversed(path) if isinstance(k, str))


def mutations(value: Any) -> list[Any]:
    """(b) absent, (a) each other JSON type, (c) a wrong value of the same type.

    Never a valid other value of the same type (another table name, another position): that
    is another change, not a broken one.
    """
    numeric = isinstance(value, str) and value.strip().isdigit()
    other_types = [
        None,
        True,
        int(value) if numeric else 7,
        str(value) if json_type(value) == "a number" else "x",
        {"x": 1},
        [value],
    ]
    same_type: list[Any] = []
    if isinstance(value, str) and value:
        same_type = [""]  # empty
        if numeric:
            same_type.append("12a")  # not digits
        elif _TIMESTAMP.match(value):
            same_type.append("yesterday")  # not a time
    elif json_type(value) == "a number":
        same_type = [-1] + ([2.5] if isinstance(value, int) else [])  # negative, not whole
    elif isinstance(value, dict) and value:
        same_type = [{}]  # no members
    elif isinstance(value, list):
        same_type = [[], [None], [7]] if value else [[None]]  # no or wrong elements
    candidates = [c for c in other_types if json_type(c) != json_type(value)] + same_type
    return [DROP, *(c for c in candidates if not _same(c, value))]


_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def mutated(document: Any, path: tuple[Any, ...], replacement: Any) -> Any:
    copy = json.loads(json.dumps(document))
    holder = copy
    for key in path[:-1]:
        holder = holder[key]
    if replacement is DROP:
        del holder[path[-1]]
    else:
        holder[path[-1]] = replacement
    return copy


# --- the property --------------------------------------------------------------------------------
VOLATILE = ("raw_message",)  # an error event quotes the message, which the mutation changed


def _meaning(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in VOLATILE} for e in events]


def _named(leaf: str, text: str | None) -> bool:
    return text is not None and re.search(rf"(?<![\w-]){re.escape(leaf)}(?![\w-])", text) is not None


def check(fmt: str, seed: Seed, expected: list[dict[str, Any]], path: tuple[Any, ...], replacement: Any) -> None:
    document = mutated(seed.document, path, replacement)
    events = seed.events(fmt, document)
    change = f"{fmt}: {'.'.join(map(str, path))} -> {'<dropped>' if replacement is DROP else repr(replacement)}"
    for event in events:
        if event["kind"] == "error":
            assert "parser failed" not in event["error"], (change, event["error"])
            assert "invalid event" not in event["error"], (change, event["error"])
    if _in_row_image(fmt, path) or _row_change(fmt, path, replacement):
        return  # another column value is another change: only a broken parser fails here
    if _optional(fmt, path, replacement):
        return
    if _verbatim(fmt, path) and _meaning(_without_detail(events)) == _meaning(_without_detail(expected)):
        return
    if _meaning(events) == _meaning(expected):
        return
    # An object emptied may be reported by the member it misses; any other change by the field.
    original = _value_at(seed.document, path)
    names = [_leaf(path), *(original if _same(replacement, {}) and isinstance(original, dict) else ())]
    errors = [e for e in events if e["kind"] == "error"]
    if errors:
        assert all(any(_named(n, e["error"]) for n in names) for e in errors), (change, [e["error"] for e in errors])
        return
    if (original is None or _same(original, "")) and json_type(replacement) in ("a string", "a number"):
        return  # a value where the message had none: another value (its type is checked elsewhere)
    if _matches_any(IDENTIFIERS.get(fmt, ()), path) and isinstance(replacement, str):
        return  # any text is an identifier: "12a" is another id, not a wrong one
    leaf = _leaf(path)
    held = [e for e in events if e["kind"] == "held"]
    if held:
        # Held (a stateful format waits for what completes it): never applied, and it must say
        # why, naming the field that sent it waiting.
        assert all(_named(leaf, e["detail"]) for e in held), (change, [e["detail"] for e in held])
        return
    gained = len(events) == len(expected) and any(
        set(m["flags"] or ()) - set(e["flags"] or ()) for m, e in zip(events, expected, strict=True)
    )
    assert gained, (change, "accepted with another meaning and no flag", _diff(expected, events))


def _diff(expected: list[dict[str, Any]], events: list[dict[str, Any]]) -> Any:
    if len(expected) != len(events):
        return {"expected": [e["kind"] for e in expected], "got": [e["kind"] for e in events]}
    return [
        {k: (e.get(k), m.get(k)) for k in set(e) | set(m) if e.get(k) != m.get(k) and k not in VOLATILE}
        for e, m in zip(expected, events, strict=True)
    ]


def cases(fmt: str) -> st.SearchStrategy[tuple[Seed, list[dict[str, Any]], tuple[Any, ...], Any]]:
    """A seed, one of its fields, one mutation of it."""

    def fields_of(pair: tuple[Seed, list[dict[str, Any]]]) -> st.SearchStrategy:
        seed, expected = pair
        fields = list(_fields(seed.document))
        envelope = [f for f in fields if not _in_row_image(fmt, f[0])]
        values = [f for f in fields if _in_row_image(fmt, f[0])] or envelope
        # Three in four examples change the envelope, where a changed meaning is a defect.
        chosen = st.integers(0, 3).flatmap(lambda i: st.sampled_from(values if i == 0 else envelope))
        return chosen.flatmap(
            lambda field: st.sampled_from(mutations(field[1])).map(
                lambda replacement: (seed, expected, field[0], replacement)
            )
        )

    return st.sampled_from(seeds(fmt)).flatmap(fields_of)


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_changed_field_is_the_same_change_quarantined_or_flagged(fmt):
    assert seeds(fmt), f"no valid seed message for {fmt}"

    @EXAMPLES
    @given(cases(fmt))
    def run(case: tuple[Seed, list[dict[str, Any]], tuple[Any, ...], Any]) -> None:
        check(fmt, *case)

    run()
