"""Every legal value arrives exact: each decoder over its type's whole legal range (issue 69).

For each type, Hypothesis draws values across the type's range (fixed seed in CI: the loaded
profile of tests/conftest.py, "ci" by default), plus the type's limits. Every format that can
carry the type writes each value as its vendor does (`tests/exact_values_vendors.py`: one
insert per value, in column `v` of its own table); the format parses the messages; gold's own cast
(`layers.gold.typed`, by the type gold gives the column: the message's, or conf's where the
messages carry none) types every value in Spark; and what Spark holds is compared with the
exact value: the same number, day, microsecond, text or float bits. A value gold cannot hold
exactly (a timestamp's nanoseconds) must come out NULL, which `values_cast` quarantines, never
rounded. All values of a type go through one Spark query, so the properties cost a few jobs.

The expected values are worked out here from the drawn values alone, without the decoders.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_medallion.formats import get_format
from cdc_medallion.formats.debezium_native import native_events
from cdc_medallion.identifiers import sql_text
from cdc_medallion.layers.gold import typed
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.sqltypes import spark_type
from tests import dts_avro_builder as dts
from tests import exact_values_vendors as vendor
from tests.exact_values_vendors import Number, java_big_decimal, plain
from tests.helpers import message
from tests.test_native_parse import bronze_rows

EXAMPLES = 500  # drawn values per type, besides the type's limits
NOT_HELD = None  # the expected outcome of a legal value the gold type cannot hold: NULL (quarantined)


def drawn(strategy: st.SearchStrategy, limits: Sequence[Any]) -> list[Any]:
    """The type's limits, then EXAMPLES values Hypothesis draws (the same ones every run under the
    "ci" profile). Every health check is off: `collect` only gathers values, so a slow or large
    draw is no fault of the code under test."""
    values = list(limits)

    @settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value: Any) -> None:
        values.append(value)

    collect()
    assert len(values) >= len(limits) + EXAMPLES, f"Hypothesis drew {len(values) - len(limits)} values"
    return values


@dataclass(frozen=True)
class Writer:
    """One way a format carries the type: how a value becomes messages (`write(i, value)`), the
    conf type of its column where the messages carry none, which values the vendor can write at
    all (`takes`), and what gold must hold (`expect`; NOT_HELD: NULL)."""

    label: str
    format: str
    write: Callable[[int, Any], bytes | str | list[str]]
    expect: Callable[[Any], Any]
    conf_type: Callable[[Any], str] | None = None
    takes: Callable[[Any], bool] = lambda value: True
    options: Callable[[dict[int, Any]], dict[str, Any]] | dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    writer: Writer
    value: Any
    text: str | None = None
    spark_type: str | None = None
    error: str | None = None


def parsed(writer: Writer, values: Sequence[Any]) -> list[Outcome]:
    """Each value the writer takes, through the format's parser (its Arrow events, as a Python
    worker hands them to Spark): the text of `v` and its gold type, or the quarantine reason."""
    taken = {i: value for i, value in enumerate(values) if writer.takes(value)}
    messages, owner = [], {}
    for i, value in taken.items():
        written = writer.write(i, value)
        for raw in written if isinstance(written, list) else [written]:
            messages.append(message(raw, line=len(messages) + 1))
            owner[messages[-1].ref] = i
    options = writer.options(taken) if callable(writer.options) else writer.options
    events = get_format(writer.format)("exact", options).parse_all(messages, []).to_pylist()
    outcomes = {i: Outcome(writer, value, error="no event") for i, value in taken.items()}
    for event in events:
        outcome = outcomes[owner[event["bronze_ref"]]]
        if event["kind"] == "error":
            outcome.error = event["error"]
        elif event["kind"] == "change":
            value = outcome.value  # (Arrow gives a map as its (key, value) pairs)
            # conf's type (a SQL type name, as conf files give it) where the messages carry none
            gold_type = (
                spark_type(writer.conf_type(value)) if writer.conf_type else dict(event["column_types"] or ()).get("v")
            )
            outcome.text, outcome.spark_type, outcome.error = dict(event["after"])["v"], gold_type or "string", None
    return list(outcomes.values())


def in_gold(spark: Any, outcomes: list[Outcome], render: Callable[[str, str], str], result: str) -> list[Any]:
    """Every parsed value typed by gold's cast for its column type, in one Spark query, rendered
    comparable (`render(typed SQL, type)` as `result`)."""
    rows = [(k, o.text, o.spark_type) for k, o in enumerate(outcomes) if o.error is None]
    types = sorted({t for _, _, t in rows})
    # Each branch cast on its own: a CASE of decimals and text would be coerced to one type first.
    branches = " ".join(f"WHEN {sql_text(t)} THEN CAST({render(typed('v', t), t)} AS {result})" for t in types)
    frame = spark.createDataFrame(rows, "k bigint, v string, t string")
    got = dict(frame.selectExpr("k", f"CASE t {branches} END AS got").collect())
    return [got.get(k) for k in range(len(outcomes))]


def check(spark: Any, values: Sequence[Any], writers: Sequence[Writer], render, result: str, same=None) -> None:
    """The property: every writer's every value is held in gold as `expect` says."""
    outcomes = [o for writer in writers for o in parsed(writer, values)]
    held = in_gold(spark, outcomes, render, result)
    same = same or (lambda got, expected: got == expected)
    wrong = []
    for outcome, got in zip(outcomes, held, strict=True):
        expected = outcome.writer.expect(outcome.value)
        if outcome.error is not None:
            wrong.append((outcome.writer.label, outcome.value, "quarantined", outcome.error))
        elif not same(got, expected):
            wrong.append((outcome.writer.label, outcome.value, outcome.text, outcome.spark_type, got, expected))
    per_writer = {w.label: sum(o.writer is w for o in outcomes) for w in writers}
    assert all(per_writer.values()), per_writer  # every writer was given values it takes
    assert not wrong, f"{len(wrong)} of {len(outcomes)} values not exact; first ones:\n" + "\n".join(
        map(repr, wrong[:12])
    )


def as_string(sql: str, kind: str) -> str:
    return sql


# --- decimals of every precision 1-65 and scale 0-30 ----------------------------------------------------
@st.composite
def _decimals(draw: st.DrawFn) -> tuple[int, int, int]:
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(precision, 30)))
    most = 10**precision - 1
    return precision, scale, draw(st.integers(-most, most))


DECIMAL_LIMITS = [
    (p, s, u)
    for p in (1, 9, 18, 19, 28, 29, 38, 39, 65)
    for s in sorted({0, p // 2, min(p, 30)})
    for u in (10**p - 1, -(10**p - 1), 0, 1, -1)
] + [
    (38, 4, 12345678901234567890123456789012345678),  # issue 69: came out ...679000000.0000
    (38, 4, -99999999999999999999999999999999999999),  # rounded up past its precision: quarantined
    (65, 30, 12345678901234567890123456789012345678901234567890123456789012345),
    (65, 30, 1000),  # 1.000E-27 as Java writes it
]


@functools.cache
def decimals() -> list[tuple[int, int, int]]:
    return drawn(_decimals(), DECIMAL_LIMITS)


def _decimal_writers() -> list[Writer]:
    decimal_sql = lambda d: f"DECIMAL({d[0]},{d[1]})"  # noqa: E731
    text = lambda d: plain(d[2], d[1])  # noqa: E731

    def oracle(d):
        return oracle_number(d[2], d[1])

    expect = text  # DECIMAL(p, s) prints with s digits, in Spark (p <= 38) and as exact text (beyond)
    connect = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal"}
    return [
        Writer(
            "debezium Decimal",
            "debezium-json",
            lambda i, d: vendor.debezium(
                i,
                {**connect, "parameters": {"scale": str(d[1]), "connect.decimal.precision": str(d[0])}},
                vendor.connect_decimal(d[2]),
            ),
            expect,
        ),
        Writer(
            "canal decimal(p,s)", "canal-json", lambda i, d: vendor.canal(i, text(d), f"decimal({d[0]},{d[1]})"), expect
        ),
        Writer(
            "maxwell number",
            "maxwell-json",
            lambda i, d: vendor.maxwell(i, java_big_decimal(d[2], d[1])),
            expect,
            decimal_sql,
        ),
        Writer("ogg number", "ogg-json", lambda i, d: vendor.ogg(i, java_big_decimal(d[2], d[1])), expect, decimal_sql),
        Writer("dms text", "aws-dms-json", lambda i, d: vendor.dms(i, text(d)), expect, decimal_sql),
        Writer(
            "shareplex NUMBER(p,s)",
            "shareplex-json",
            lambda i, d: vendor.shareplex(i, oracle(d)),
            expect,
            lambda d: f"NUMBER({d[0]},{d[1]})",
            takes=lambda d: d[0] <= 38,  # Oracle's NUMBER has 38 digits
        ),
        Writer(
            "dts Decimal", "dts-avro", lambda i, d: vendor.dts_avro(i, dts.decimal(text(d), d[0], d[1]), 246), expect
        ),
        Writer(
            "qlik NUMERIC(p,s)",
            "qlik-json",
            lambda i, d: vendor.qlik(i, "NUMERIC", text(d), precision=d[0], scale=d[1]),
            expect,
        ),
        Writer(
            "ibm DECIMAL(p,s)",
            "ibm-qrep-delimited",
            lambda i, d: vendor.ibm(i, text(d)),
            expect,
            takes=lambda d: d[0] <= 31,  # Db2's DECIMAL has 31 digits
            options=lambda taken: {"tables": vendor.ibm_tables({i: decimal_sql(d) for i, d in taken.items()})},
        ),
    ]


def test_decimals_of_every_precision_and_scale_arrive_exact(spark):
    """Not rounded to 28 digits, not put into DECIMAL(38,18), never in exponent form: a
    DECIMAL(p, s) is held with its s digits, in Spark up to 38 digits, as exact text beyond."""
    check(spark, decimals(), _decimal_writers(), as_string, "string")


# --- PostgreSQL's numeric without a precision: up to 1000 digits ----------------------------------------
@st.composite
def _unconstrained(draw: st.DrawFn) -> tuple[int, int]:
    digits = draw(st.integers(1, 1000))
    most = 10**digits - 1
    return draw(st.integers(-most, most)), draw(st.integers(0, digits + 30))


NUMERIC_LIMITS = [
    (1, 27),  # 1E-27: came out as 0 in DECIMAL(38,18)
    (123456789012345678901234567890, 0),  # more than 20 integer digits: was quarantined
    (10**1000 - 1, 0),
    (-(10**1000 - 1), 500),
    (0, 0),
    (0, 7),
    (15, 1),
    (1500, 3),  # 1.500: PostgreSQL keeps the value's own scale
]


@functools.cache
def unconstrained() -> list[tuple[int, int]]:
    return drawn(_unconstrained(), NUMERIC_LIMITS)


def _unconstrained_writers() -> list[Writer]:
    text = lambda n: plain(*n)  # noqa: E731
    variable = {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}
    return [
        Writer(
            "debezium VariableScaleDecimal",
            "debezium-json",
            lambda i, n: vendor.debezium(i, variable, {"scale": n[1], "value": vendor.connect_decimal(n[0])}),
            text,
        ),
        Writer(
            "debezium decimal.handling.mode=string",
            "debezium-json",
            lambda i, n: vendor.debezium(i, {"type": "string"}, text(n)),
            text,
        ),
        Writer(
            "dts Decimal, no precision",
            "dts-avro",
            lambda i, n: vendor.dts_avro(i, dts.decimal(text(n), 0, n[1]), 246),
            text,
        ),
        Writer(
            "canal decimal (DTS: no parameters)", "canal-json", lambda i, n: vendor.canal(i, text(n), "decimal"), text
        ),
        Writer("canal sqlType NUMERIC", "canal-json", lambda i, n: vendor.canal(i, text(n), None, 2), text),
        Writer("qlik NUMERIC, no precision", "qlik-json", lambda i, n: vendor.qlik(i, "NUMERIC", text(n)), text),
        Writer(
            "maxwell number",
            "maxwell-json",
            lambda i, n: vendor.maxwell(i, java_big_decimal(*n)),
            text,
            lambda n: "NUMERIC",
        ),
        Writer("ogg number", "ogg-json", lambda i, n: vendor.ogg(i, java_big_decimal(*n)), text, lambda n: "NUMBER"),
        Writer("dms text", "aws-dms-json", lambda i, n: vendor.dms(i, text(n)), text, lambda n: "NUMERIC"),
        Writer(
            "shareplex NUMBER",
            "shareplex-json",
            lambda i, n: vendor.shareplex(i, oracle_number(*n)),
            lambda n: oracle_number(*n),  # a text column holds the text as the database wrote it
            lambda n: "NUMBER",
            takes=lambda n: len(str(abs(n[0])).rstrip("0")) <= 38,  # Oracle's NUMBER: 38 significant digits
        ),
    ]


def oracle_number(unscaled: int, scale: int) -> str:
    """As Oracle prints a NUMBER: without trailing fraction zeros (1.50 is 1.5)."""
    digits = plain(unscaled, scale)
    return digits.rstrip("0").rstrip(".") if "." in digits else digits


def test_unconstrained_numeric_holds_every_value_exact(spark):
    """PostgreSQL's `numeric` (and every decimal without a precision: DTS's, Canal's, Qlik's,
    conf's NUMERIC/NUMBER) holds any value its database does: exact text, the value's own scale."""
    check(spark, unconstrained(), _unconstrained_writers(), as_string, "string")


# --- dates 0001-01-01 .. 9999-12-31 ---------------------------------------------------------------------------
FIRST_DAY, LAST_DAY = -719162, 2932896  # 0001-01-01 and 9999-12-31, days from 1970-01-01
DATE_LIMITS = [FIRST_DAY, LAST_DAY, 0, -1] + [
    (dt.date(*ymd) - dt.date(1970, 1, 1)).days
    for ymd in ((4, 2, 29), (1000, 3, 1), (999, 12, 31), (1582, 10, 4), (1582, 10, 15), (1600, 2, 29), (2000, 2, 29))
]


@functools.cache
def dates() -> list[int]:
    return drawn(st.integers(FIRST_DAY, LAST_DAY), DATE_LIMITS)


def iso_date(days: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=days)).isoformat()


def _date_writers() -> list[Writer]:
    days = lambda d: str(d)  # noqa: E731  (unix_date of gold's DATE)
    conf = lambda d: "DATE"  # noqa: E731

    def parts(d):
        day = dt.date(1970, 1, 1) + dt.timedelta(days=d)
        return dts.datetime(year=day.year, month=day.month, day=day.day)

    return [
        Writer(
            "debezium Date",
            "debezium-json",
            lambda i, d: vendor.debezium(i, {"type": "int32", "name": "io.debezium.time.Date"}, d),
            days,
        ),
        Writer(
            "debezium connect Date",
            "debezium-json",
            lambda i, d: vendor.debezium(i, {"type": "int32", "name": "org.apache.kafka.connect.data.Date"}, d),
            days,
        ),
        Writer("canal date", "canal-json", lambda i, d: vendor.canal(i, iso_date(d), "date"), days),
        Writer("maxwell text", "maxwell-json", lambda i, d: vendor.maxwell(i, iso_date(d)), days, conf),
        Writer("ogg Oracle DATE", "ogg-json", lambda i, d: vendor.ogg(i, f"{iso_date(d)} 00:00:00"), days, conf),
        Writer("dms text", "aws-dms-json", lambda i, d: vendor.dms(i, iso_date(d)), days, conf),
        Writer(
            "shareplex text", "shareplex-json", lambda i, d: vendor.shareplex(i, f"{iso_date(d)}T00:00:00"), days, conf
        ),
        Writer("dts DateTime", "dts-avro", lambda i, d: vendor.dts_avro(i, parts(d), 10), days),
        Writer("qlik DATE", "qlik-json", lambda i, d: vendor.qlik(i, "DATE", iso_date(d)), days),
        Writer(
            "ibm DATE",
            "ibm-qrep-delimited",
            lambda i, d: vendor.ibm(i, vendor.ibm_string(iso_date(d))),
            days,
            options=lambda taken: {"tables": vendor.ibm_tables(dict.fromkeys(taken, "DATE"))},
        ),
    ]


def test_dates_of_years_1_to_9999_arrive_exact(spark):
    """Proleptic Gregorian days, as Spark's DATE has them: leap days, 1582, years below 1000."""
    check(spark, dates(), _date_writers(), lambda sql, kind: f"unix_date({sql})", "string")


def test_dates_and_timestamps_beyond_years_1_to_9999_are_held_in_gold(spark):
    """PostgreSQL's `infinity` (Debezium: the extreme longs), its BC dates, years past 9999: the
    parser writes them as signed-year text, and gold's cast gives the very day or microsecond
    Debezium sent, as Spark's DATE and TIMESTAMP hold them (old main refused them in gold, so the
    change was quarantined and its key went stale)."""
    date = {"type": "int32", "name": "io.debezium.time.Date"}
    micros = {"type": "int64", "name": "io.debezium.time.MicroTimestamp"}
    zoned = {"type": "string", "name": "io.debezium.time.ZonedTimestamp"}
    cases = [  # (column, value, its text, gold type): what Spark holds, days or microseconds
        (date, LAST_DAY + 1, "+10000-01-01", "date"),
        (date, FIRST_DAY - 1, "0000-12-31", "date"),
        (date, FIRST_DAY - 366 - 365, "-0001-01-01", "date"),
        (micros, 9223372036825200000, "+294247-01-10 04:00:25.200000", "timestamp"),
        (micros, -9223372036832400000, "-290308-12-21 19:59:27.600000", "timestamp"),
        (zoned, "9999-12-31T23:30:00.5-05:00", "+10000-01-01 04:30:00.500000", "timestamp"),
        (zoned, "0001-01-01T00:30:00+01:00", "0000-12-31 23:30:00", "timestamp"),
        (zoned, "-4712-01-01T00:00:00.000000Z", "-4712-01-01 00:00:00", "timestamp"),  # as Debezium writes them
        (zoned, "+294246-12-31T23:59:59.999999Z", "+294246-12-31 23:59:59.999999", "timestamp"),
        (zoned, "infinity", "infinity", "timestamp"),
        (zoned, "-infinity", "-infinity", "timestamp"),
        (date, 2145042905, "+5874897-12-31", "date"),  # PostgreSQL's last date
    ]
    outcomes = []
    for column, value, text, kind in cases:
        writer = Writer(column["name"], "debezium-json", lambda i, v, c=column: vendor.debezium(i, c, v), str)
        [outcome] = parsed(writer, [value])
        assert (outcome.error, outcome.text) == (None, text), (column["name"], value)
        outcome.spark_type = kind
        outcomes.append(outcome)
    frame = spark.createDataFrame([(o.text, o.spark_type) for o in outcomes], "v string, t string")
    held = frame.selectExpr(
        f"CASE t WHEN 'date' THEN unix_date({typed('v', 'date')}) ELSE unix_micros({typed('v', 'timestamp')}) END"
    ).collect()
    zoned_micros = {  # the zoned cases' instants; the words are Spark's last and first
        "9999-12-31T23:30:00.5-05:00": 253402317000500000,
        "0001-01-01T00:30:00+01:00": -62135598600000000,
        "-4712-01-01T00:00:00.000000Z": -210863520000000000,
        "+294246-12-31T23:59:59.999999Z": 9223371244799999999,
        "infinity": 2**63 - 1,
        "-infinity": -(2**63),
    }
    expected = [zoned_micros[value] if column is zoned else value for column, value, _, _ in cases]
    assert [r[0] for r in held] == expected


def test_a_dataworks_date_beyond_year_9999_reaches_gold_as_text():
    """DataWorks' DATE is epoch milliseconds: beyond 9999 its text, not a silver error."""
    [event] = [
        e
        for e in get_format("dataworks-json")("exact", {})
        .parse_all([message(vendor.dataworks(1, "DATE", 253402300800000), line=1)], [])
        .to_pylist()
        if e["kind"] == "change"
    ]
    assert dict(event["after"])["v"] == "+10000-01-01 00:00:00"


# --- MySQL TIME: -838:59:59 .. 838:59:59, fractions of 0-6 digits -------------------------------------------
MOST_TIME_SECONDS = 838 * 3600 + 59 * 60 + 59


@st.composite
def _times(draw: st.DrawFn) -> tuple[int, int]:
    digits = draw(st.integers(0, 6))
    most = MOST_TIME_SECONDS * 10**digits
    return digits, draw(st.integers(-most, most))


TIME_LIMITS = [
    (0, -MOST_TIME_SECONDS),  # issue 69: came out as -839:00:01
    (0, MOST_TIME_SECONDS),
    (6, -MOST_TIME_SECONDS * 10**6),
    (0, 0),
    (6, -1),  # -00:00:00.000001
    (0, 24 * 3600),
    (6, 24 * 3600 * 10**6 - 1),
    (3, -1500),
]


@functools.cache
def times() -> list[tuple[int, int]]:
    return drawn(_times(), TIME_LIMITS)


def mysql_time(t: tuple[int, int]) -> str:
    """As MySQL prints TIME(fsp): a sign, hours of two or more digits, `fsp` fraction digits."""
    digits, units = t
    seconds, fraction = divmod(abs(units), 10**digits)
    text = f"{'-' if units < 0 else ''}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:0{digits}d}" if digits else "")


def canonical_time(t: tuple[int, int]) -> str:
    """docs/values.md: as PostgreSQL prints it, the fraction without trailing zeros."""
    return mysql_time(t).rstrip("0").rstrip(".") if t[0] else mysql_time(t)


def _time_writers() -> list[Writer]:
    def units(t, per_second):
        return t[1] * per_second // 10 ** t[0]

    def dts_parts(t):
        digits, amount = t
        seconds, fraction = divmod(abs(amount), 10**digits)
        sign = -1 if amount < 0 else 1
        micros = fraction * 10 ** (6 - digits)
        clock = {"hour": seconds // 3600, "minute": seconds // 60 % 60, "second": seconds % 60, "millis": micros}
        return dts.datetime(**{k: sign * v for k, v in clock.items()})

    logical = lambda name, connect: {"type": connect, "name": name}  # noqa: E731
    return [
        Writer(
            "debezium MicroTime",
            "debezium-json",
            lambda i, t: vendor.debezium(i, logical("io.debezium.time.MicroTime", "int64"), units(t, 10**6)),
            canonical_time,
        ),
        Writer(
            "debezium NanoTime",
            "debezium-json",
            lambda i, t: vendor.debezium(i, logical("io.debezium.time.NanoTime", "int64"), units(t, 10**9)),
            canonical_time,
        ),
        Writer(
            "debezium Time (ms)",
            "debezium-json",
            lambda i, t: vendor.debezium(i, logical("io.debezium.time.Time", "int32"), units(t, 1000)),
            canonical_time,
            takes=lambda t: t[0] <= 3,
        ),
        Writer("dts DateTime (time)", "dts-avro", lambda i, t: vendor.dts_avro(i, dts_parts(t), 19), canonical_time),
        Writer(
            "canal time(fsp)", "canal-json", lambda i, t: vendor.canal(i, mysql_time(t), f"time({t[0]})"), mysql_time
        ),
        Writer(
            "maxwell text", "maxwell-json", lambda i, t: vendor.maxwell(i, mysql_time(t)), mysql_time, lambda t: "TIME"
        ),
        Writer("dms text", "aws-dms-json", lambda i, t: vendor.dms(i, mysql_time(t)), mysql_time, lambda t: "TIME"),
        Writer("qlik TIME", "qlik-json", lambda i, t: vendor.qlik(i, "TIME", mysql_time(t)), mysql_time),
        Writer(
            "ibm TIME",  # Db2's TIME: 00.00.00 to 24.00.00, no fraction
            "ibm-qrep-delimited",
            lambda i, t: vendor.ibm(i, vendor.ibm_string(mysql_time(t).replace(":", "."))),
            mysql_time,
            takes=lambda t: t[0] == 0 and 0 <= t[1] <= 24 * 3600,
            options=lambda taken: {"tables": vendor.ibm_tables(dict.fromkeys(taken, "TIME"))},
        ),
    ]


def test_mysql_times_arrive_as_the_database_prints_them(spark):
    """Negative and beyond 24 hours (MySQL TIME), any fraction: text, as Spark has no TIME."""
    check(spark, times(), _time_writers(), as_string, "string")


# --- timestamps of years 1-9999, fractions of 0-9 digits, in time zones ------------------------------------
FIRST_NANO = FIRST_DAY * 86_400 * 10**9
LAST_NANO = (LAST_DAY + 1) * 86_400 * 10**9 - 1


@st.composite
def _timestamps(draw: st.DrawFn) -> tuple[int, int, int]:
    """(fraction digits, nanoseconds since the epoch at that precision, offset in minutes)."""
    digits = draw(st.integers(0, 9))
    nanos = draw(st.integers(FIRST_NANO, LAST_NANO))
    return digits, nanos - nanos % 10 ** (9 - digits), draw(st.integers(-12 * 60, 14 * 60))


TIMESTAMP_LIMITS = [
    (0, FIRST_NANO, 0),
    (9, LAST_NANO, 0),
    (6, LAST_NANO - 999, 0),
    (0, 0, 0),
    (9, -1, 0),  # 1969-12-31 23:59:59.999999999
    (6, -1000, 330),
    (3, (dt.datetime(2000, 2, 29, 23, 59, 59) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1) * 1000, -300),
]


@functools.cache
def timestamps() -> list[tuple[int, int, int]]:
    return drawn(_timestamps(), TIMESTAMP_LIMITS)


def utc(ts: tuple[int, int, int]) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=ts[1] // 1000)


def timestamp_text(ts: tuple[int, int, int], separator: str = " ", zone: bool = False) -> str:
    """ISO text of the timestamp with its `digits` fraction digits; with `zone`, the local time
    at its offset and the offset (`Z` for UTC), as Java's ISO_OFFSET_DATE_TIME prints it."""
    digits, nanos, offset = ts
    moment = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=nanos // 10**9)
    if zone:
        moment += dt.timedelta(minutes=offset)
    text = f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}{separator}"
    text += f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    if digits:
        text += "." + f"{nanos % 10**9:09d}"[:digits]
    if zone:
        text += "Z" if offset == 0 else f"{'-' if offset < 0 else '+'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    return text


def local_in_range(ts: tuple[int, int, int]) -> bool:
    """Whether the local time at its offset is in years 1-9999 too (a vendor writes that one)."""
    return FIRST_NANO <= ts[1] + ts[2] * 60 * 10**9 <= LAST_NANO


def micros_or_not_held(ts: tuple[int, int, int]) -> Any:
    """unix_micros of gold's TIMESTAMP; a value with nanoseconds it cannot hold: NULL."""
    return str(ts[1] // 1000) if ts[1] % 1000 == 0 else NOT_HELD


def canonical_timestamp(ts: tuple[int, int, int]) -> str:
    """docs/values.md: UTC, 6 fraction digits for whole microseconds, 9 with nanoseconds."""
    nanos = ts[1]
    base = timestamp_text((0, nanos, 0))
    part = nanos % 10**9
    return base + ("" if not part else f".{part // 1000:06d}" if part % 1000 == 0 else f".{part:09d}")


def _timestamp_writers() -> list[Writer]:
    logical = lambda name: {"type": "int64", "name": name}  # noqa: E731
    micros_exact = lambda ts: ts[0] <= 6  # noqa: E731

    def timestamp_or_text(text: Callable[[Any], str]) -> Callable[[Any], Any]:
        """A TIMESTAMP(p) column: Spark's timestamp up to 6 digits, the exact text beyond."""
        return lambda ts: micros_or_not_held(ts) if ts[0] <= 6 else text(ts)

    def dts_local(ts):
        moment = utc(ts)
        micros = ts[1] // 1000 % 10**6
        names = ("year", "month", "day", "hour", "minute", "second")
        return {**{n: getattr(moment, n) for n in names}, "millis": micros}

    def zoned_parts(ts):
        moment = utc(ts) + dt.timedelta(minutes=ts[2])
        offset = ts[2]
        zone = f"{'-' if offset < 0 else '+'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
        names = ("year", "month", "day", "hour", "minute", "second")
        parts = {n: getattr(moment, n) for n in names}
        return dts.timestamp_with_zone(zone, **parts, millis=ts[1] // 1000 % 10**6)

    ibm_text = lambda ts: timestamp_text(ts, "-").replace(":", ".")  # noqa: E731  (Db2: 2024-05-01-10.00.00.123)
    ibm_type = lambda ts: f"TIMESTAMP({ts[0]})"  # noqa: E731
    return [
        Writer(
            "debezium MicroTimestamp",
            "debezium-json",
            lambda i, ts: vendor.debezium(i, logical("io.debezium.time.MicroTimestamp"), ts[1] // 1000),
            micros_or_not_held,
            takes=micros_exact,
        ),
        Writer(
            "debezium Timestamp (ms)",
            "debezium-json",
            lambda i, ts: vendor.debezium(i, logical("io.debezium.time.Timestamp"), ts[1] // 10**6),
            micros_or_not_held,
            takes=lambda ts: ts[0] <= 3,
        ),
        Writer(
            "debezium NanoTimestamp",
            "debezium-json",
            lambda i, ts: vendor.debezium(i, logical("io.debezium.time.NanoTimestamp"), ts[1]),
            canonical_timestamp,
        ),
        Writer(
            "debezium ZonedTimestamp",
            "debezium-json",
            lambda i, ts: vendor.debezium(
                i, {"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, timestamp_text(ts, "T", zone=True)
            ),
            micros_or_not_held,
            takes=local_in_range,
        ),
        Writer(
            "dts Timestamp",
            "dts-avro",
            lambda i, ts: vendor.dts_avro(i, dts.timestamp(ts[1] // 10**9, ts[1] // 1000 % 10**6), 17),
            micros_or_not_held,
            takes=micros_exact,
        ),
        Writer(
            "dts DateTime",
            "dts-avro",
            lambda i, ts: vendor.dts_avro(i, dts.datetime(**dts_local(ts)), 18),
            micros_or_not_held,
            takes=micros_exact,
        ),
        Writer(
            "dts TimestampWithTimeZone",
            "dts-avro",
            lambda i, ts: vendor.dts_avro(i, zoned_parts(ts), 17),
            micros_or_not_held,
            takes=lambda ts: micros_exact(ts) and local_in_range(ts),
        ),
        Writer(
            "canal datetime(fsp)",
            "canal-json",
            lambda i, ts: vendor.canal(i, timestamp_text(ts), f"datetime({ts[0]})"),
            micros_or_not_held,
            takes=micros_exact,
        ),
        Writer(
            "maxwell text",
            "maxwell-json",
            lambda i, ts: vendor.maxwell(i, timestamp_text(ts)),
            micros_or_not_held,
            lambda ts: f"DATETIME({ts[0]})",
            takes=micros_exact,
        ),
        Writer(
            "dataworks DATE (ms)",
            "dataworks-json",
            lambda i, ts: vendor.dataworks(i, "DATE", ts[1] // 10**6),
            micros_or_not_held,
            takes=lambda ts: ts[0] <= 3,
        ),
        Writer(
            "qlik DATETIME(scale)",
            "qlik-json",
            lambda i, ts: vendor.qlik(i, "DATETIME", timestamp_text(ts), scale=ts[0]),
            timestamp_or_text(timestamp_text),
        ),
        Writer(
            "ibm TIMESTAMP(p)",
            "ibm-qrep-delimited",
            lambda i, ts: vendor.ibm(i, vendor.ibm_string(ibm_text(ts))),
            timestamp_or_text(lambda ts: timestamp_text(ts)),
            options=lambda taken: {"tables": vendor.ibm_tables({i: ibm_type(ts) for i, ts in taken.items()})},
        ),
        Writer(
            "ogg TIMESTAMP(p)",
            "ogg-json",
            lambda i, ts: vendor.ogg(i, timestamp_text(ts)),
            timestamp_or_text(timestamp_text),
            lambda ts: f"TIMESTAMP({ts[0]})",
        ),
        Writer(
            "dms text",
            "aws-dms-json",
            lambda i, ts: vendor.dms(i, timestamp_text(ts)),
            micros_or_not_held,
            lambda ts: "TIMESTAMP",
            takes=micros_exact,
        ),
        Writer(
            "shareplex TIMESTAMP(p)",
            "shareplex-json",
            lambda i, ts: vendor.shareplex(i, timestamp_text(ts, "T")),
            timestamp_or_text(lambda ts: timestamp_text(ts, "T")),
            lambda ts: f"TIMESTAMP({ts[0]})",
        ),
    ]


def _timestamp_render(sql: str, kind: str) -> str:
    return sql if kind == "string" else f"unix_micros({sql})"


def test_timestamps_of_years_1_to_9999_with_any_fraction_and_zone_arrive_exact(spark):
    """Microseconds exact in Spark's TIMESTAMP; nanoseconds exact as text where the type has
    them (TIMESTAMP(7-9), Debezium's NanoTimestamp) and never cut where it has not (NULL:
    quarantined by values_cast); every offset turned into UTC."""
    check(spark, timestamps(), _timestamp_writers(), _timestamp_render, "string")


# --- text of every script, line separators and delimiters included -----------------------------------------
TEXT_LIMITS = [
    "",
    "\u2028",
    "\u2029",
    "\x85",
    "line\nbreak\r\nand\rreturn",
    "comma, \"quoted\", 'single'",
    "\x00 NUL and \x1f unit separator",
    "🙂 emoji, 東京, Ελληνικά, עברית, العربية, देवनागरी, ℵ, e\u0301",
    "\ufeff leading BOM",
    "x" * 5000,
]


@functools.cache
def texts() -> list[str]:
    return drawn(st.text(st.characters(exclude_categories=["Cs"]), max_size=60), TEXT_LIMITS)


def _text_writers() -> list[Writer]:
    same = lambda text: text  # noqa: E731
    conf = lambda text: "VARCHAR(20000)"  # noqa: E731
    return [
        Writer("debezium string", "debezium-json", lambda i, s: vendor.debezium(i, {"type": "string"}, s), same),
        Writer("canal varchar", "canal-json", lambda i, s: vendor.canal(i, s, "varchar(20000)"), same),
        Writer("maxwell", "maxwell-json", lambda i, s: vendor.maxwell(i, s), same, conf),
        Writer("ogg", "ogg-json", lambda i, s: vendor.ogg(i, s), same, conf),
        Writer("dms", "aws-dms-json", lambda i, s: vendor.dms(i, s), same, conf),
        Writer("shareplex", "shareplex-json", lambda i, s: vendor.shareplex(i, s), same, conf),
        Writer("dataworks STRING", "dataworks-json", lambda i, s: vendor.dataworks(i, "STRING", s), same),
        Writer("dts Character", "dts-avro", lambda i, s: vendor.dts_avro(i, dts.character(s), 253), same),
        Writer("qlik WSTRING", "qlik-json", lambda i, s: vendor.qlik(i, "WSTRING", s), same),
        Writer(
            "ibm VARCHAR",
            "ibm-qrep-delimited",
            lambda i, s: vendor.ibm(i, vendor.ibm_string(s)),
            same,
            options=lambda taken: {"tables": vendor.ibm_tables(dict.fromkeys(taken, "VARCHAR(20000)"))},
        ),
    ]


def test_text_of_every_script_arrives_exact(spark):
    check(spark, texts(), _text_writers(), as_string, "string")


# --- floats: NaN, infinities, -0.0, subnormals, extremes ----------------------------------------------------------
DOUBLE_LIMITS = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.0,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    0.1,
]
FLOAT_LIMITS = [math.nan, math.inf, -math.inf, -0.0, 1.4e-45, 1.1754943508222875e-38, 3.4028234663852886e38, 0.1]


@functools.cache
def doubles() -> list[float]:
    return drawn(st.floats(), DOUBLE_LIMITS)


@functools.cache
def floats() -> list[float]:
    return drawn(st.floats(width=32), [float(np.float32(f)) for f in FLOAT_LIMITS])


def bits(value: float | None) -> Any:
    """A float's identity: NaN is NaN (any payload), -0.0 is not 0.0."""
    return None if value is None else ("nan" if math.isnan(value) else struct.pack(">d", value))


def java_double(value: float) -> Number | str:
    """Kafka Connect's JSON converter (Jackson): a finite double as a number, NaN and infinities
    as the strings "NaN", "Infinity", "-Infinity"."""
    if math.isfinite(value):
        return Number(repr(value))
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def oracle_double(value: float) -> str:
    """As Oracle prints a BINARY_DOUBLE: `Nan`, `Inf`, `-Inf`, or the number."""
    if math.isfinite(value):
        return repr(value)
    return "Nan" if math.isnan(value) else ("Inf" if value > 0 else "-Inf")


def java_float(value: float) -> Number | str:
    return Number(str(np.float32(value))) if math.isfinite(value) else java_double(value)


def _float_writers(width: int) -> list[Writer]:
    same = lambda value: value  # noqa: E731
    finite = math.isfinite  # MySQL, Oracle NUMBER-based writers: no NaN or infinities
    text = (lambda f: repr(f)) if width == 64 else (lambda f: str(np.float32(f)))
    if width == 32:
        return [
            Writer(
                "debezium float32",
                "debezium-json",
                lambda i, f: vendor.debezium(i, {"type": "float32"}, java_float(f)),
                same,
            ),
            Writer("canal float", "canal-json", lambda i, f: vendor.canal(i, text(f), "float"), same, takes=finite),
            Writer("qlik REAL4", "qlik-json", lambda i, f: vendor.qlik(i, "REAL4", text(f)), same, takes=finite),
            Writer(
                "ibm REAL",
                "ibm-qrep-delimited",
                lambda i, f: vendor.ibm(i, text(f)),
                same,
                takes=finite,
                options=lambda taken: {"tables": vendor.ibm_tables(dict.fromkeys(taken, "REAL"))},
            ),
        ]
    return [
        Writer(
            "debezium float64",
            "debezium-json",
            lambda i, f: vendor.debezium(i, {"type": "float64"}, java_double(f)),
            same,
        ),
        Writer("dts Float", "dts-avro", lambda i, f: vendor.dts_avro(i, dts.floating(f), 5), same),
        Writer("canal double", "canal-json", lambda i, f: vendor.canal(i, text(f), "double"), same, takes=finite),
        Writer(
            "maxwell number",
            "maxwell-json",
            lambda i, f: vendor.maxwell(i, Number(repr(f))),
            same,
            lambda f: "DOUBLE",
            takes=finite,
        ),
        Writer(
            "dataworks DOUBLE",
            "dataworks-json",
            lambda i, f: vendor.dataworks(i, "DOUBLE", Number(repr(f))),
            same,
            takes=finite,
        ),
        Writer(
            "ogg number",
            "ogg-json",
            lambda i, f: vendor.ogg(i, Number(repr(f))),
            same,
            lambda f: "DOUBLE",
            takes=finite,
        ),
        Writer(
            "dms number",
            "aws-dms-json",
            lambda i, f: vendor.dms(i, Number(repr(f))),
            same,
            lambda f: "DOUBLE",
            takes=finite,
        ),
        Writer("qlik REAL8", "qlik-json", lambda i, f: vendor.qlik(i, "REAL8", text(f)), same, takes=finite),
        Writer(
            "shareplex BINARY_DOUBLE",
            "shareplex-json",
            lambda i, f: vendor.shareplex(i, oracle_double(f)),
            same,
            lambda f: "DOUBLE",
        ),
        Writer(
            "ibm DOUBLE",
            "ibm-qrep-delimited",
            lambda i, f: vendor.ibm(i, text(f)),
            same,
            takes=finite,
            options=lambda taken: {"tables": vendor.ibm_tables(dict.fromkeys(taken, "DOUBLE"))},
        ),
    ]


def test_doubles_and_floats_arrive_with_their_bits(spark):
    """NaN, ±Infinity and -0.0 as such, every finite value to the last bit, in DOUBLE and REAL."""
    for values, width in ((doubles(), 64), (floats(), 32)):
        check(
            spark,
            values,
            _float_writers(width),
            lambda sql, kind: sql,
            "double",
            same=lambda got, expected: bits(got) == bits(expected),
        )


# --- Debezium's native (JVM) parse decodes the same values ----------------------------------------------------------
def test_debezium_native_parse_is_exact_too(spark):
    """The Spark SQL decoders of `native_parse: true` (Decimal up to 38 digits, dates and
    timestamps of years 1000-9999; it leaves the rest to Python) write the same exact text as
    the value: every value of its range, each of which it must take."""
    first_day, first_micro = -354285, -354285 * 86_400 * 10**6  # 1000-01-01
    writers = {w.label: w for w in _decimal_writers() + _date_writers() + _timestamp_writers()}
    cases = [(writers["debezium Decimal"], d, plain(d[2], d[1])) for d in decimals() if d[0] <= 38]
    cases += [(writers["debezium Date"], d, iso_date(d)) for d in dates() if d >= first_day]
    cases += [
        (writers["debezium MicroTimestamp"], ts, canonical_timestamp(ts))
        for ts in timestamps()
        if ts[0] <= 6 and ts[1] // 1000 >= first_micro
    ]
    records = [
        {"value": writer.write(i, value), "topic": f"srv.app.t{i}"} for i, (writer, value, _) in enumerate(cases)
    ]
    parser = get_format("debezium-json")("exact", {"native_parse": True})
    bronze = spark.createDataFrame(bronze_rows(records), BRONZE_SCHEMA)
    native = native_events(parser, bronze).selectExpr("offset", "_native[0].after['v'] AS v")
    got = {row["offset"]: row["v"] for row in native.collect()}
    wrong = [
        (cases[k][0].label, cases[k][1], got.get(k), cases[k][2])
        for k in range(len(cases))
        if got.get(k) != cases[k][2]
    ]
    assert not wrong, (
        f"{len(wrong)} of {len(cases)} values not taken exact natively (None: left to Python): {wrong[:10]}"
    )


# --- what the properties stand on ------------------------------------------------------------------------------
def test_gold_never_rounds_a_value_into_its_type(spark):
    """Spark's cast rounds a decimal to the column's scale, cuts a timestamp's nanoseconds and a
    date's time of day without a word; gold's cast refuses those instead (NULL, so values_cast
    quarantines the change, naming the value), and takes every exact spelling."""
    cases = [
        ("1.005", "decimal(9,2)", None),
        ("1.0050", "decimal(9,3)", "1.005"),
        ("1.5E-3", "decimal(9,3)", None),
        ("1.5E-3", "decimal(9,4)", "0.0015"),
        ("1200E-3", "decimal(9,1)", "1.2"),
        ("1E-27", "decimal(38,27)", "0.000000000000000000000000001"),
        ("  12.50 ", "decimal(4,2)", "12.50"),
        ("2024-02-29 12:00:00.123456789", "timestamp", None),
        ("2024-02-29 12:00:00.123456000", "timestamp", "2024-02-29 12:00:00.123456"),
        ("2024-02-29 12:00:00", "date", None),
        ("2024-02-29 00:00:00", "date", "2024-02-29"),
        ("2024-02-29T00:00:00+08:00", "date", "2024-02-29"),
    ]
    frame = spark.createDataFrame([(i, v) for i, (v, _, _) in enumerate(cases)], "i int, v string")
    branches = " ".join(f"WHEN {i} THEN CAST({typed('v', t)} AS string)" for i, (_, t, _) in enumerate(cases))
    got = dict(frame.selectExpr("i", f"CASE i {branches} END").collect())
    assert [got[i] for i in range(len(cases))] == [expected for _, _, expected in cases]


def test_delta_tables_keep_timestamps_of_years_1_and_9999_for_readers_without_a_jvm(spark, tmp_path):
    """Spark writes Parquet INT96 timestamps by default, which delta-rs (status, show, the report)
    reads as nanoseconds, silently wrapping years outside 1677-2262: 0001-01-01 came back as
    1754-08-30. The session writes TIMESTAMP_MICROS, Spark's own precision."""
    from deltalake import DeltaTable

    from cdc_medallion.storage.delta_rs import first_rows

    path = tmp_path / "limits"
    spark.sql(
        "SELECT CAST('0001-01-01 00:00:00' AS timestamp) AS first,"
        " CAST('9999-12-31 23:59:59.999999' AS timestamp) AS last,"
        " DATE'0001-01-01' AS first_day, DATE'1582-10-10' AS julian_gap_day"
    ).write.format("delta").save(str(path))
    assert DeltaTable(str(path)).version() == 0
    [row] = first_rows(path, 1).to_pylist()
    assert row == {
        "first": dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        "last": dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        "first_day": dt.date(1, 1, 1),
        "julian_gap_day": dt.date(1582, 10, 10),  # proleptic Gregorian: a day that exists
    }


@pytest.mark.parametrize(
    "sql_type, expected",
    [
        ("NUMERIC", "string"),  # PostgreSQL: any value, up to 131072 digits
        ("NUMBER", "string"),  # Oracle: 38 digits of any scale from -84 to 127
        ("DECIMAL", "string"),  # DTS's mysqlType drops the parameters
        ("DECIMAL(10)", "decimal(10,0)"),
        ("DECIMAL(65,30)", "string"),  # wider than Spark's 38 digits: exact text
        ("NUMBER(5,-2)", "decimal(7,0)"),  # holds 9999900
        ("NUMBER(2,5)", "decimal(5,5)"),  # holds 0.00099
        ("DECFLOAT", "string"),  # Db2: 34 digits, NaN and infinities
        ("TIMESTAMP(9)", "string"),  # nanoseconds: more than Spark's timestamp holds
        ("TIMESTAMP(6)", "timestamp"),
        ("TIMESTAMP(3) WITH TIME ZONE", "timestamp"),
        ("DATETIME(6)", "timestamp"),
    ],
)
def test_source_types_get_a_spark_type_that_holds_every_value(sql_type, expected):
    assert spark_type(sql_type) == expected


def test_decimals_inside_json_values_and_wide_integers_stay_exact():
    """A PostgreSQL numeric[] (or any JSON value holding numbers) is written back as JSON with its
    numbers as read, not through a float; a schemaless integer beyond a bigint (an Oracle
    NUMBER(38) in GoldenGate's JSON) is a decimal(38,0), beyond 38 digits text."""
    document = vendor.maxwell(0, {"list": [Number("12345678901234567890.123456789"), Number("1E-27")]})
    [event] = get_format("maxwell-json")("exact").events_for(message(document))
    assert event["after"]["v"] == '{"list":[12345678901234567890.123456789,1E-27]}'
    for number, kind in (
        (2**63 - 1, "bigint"),
        (2**63, "decimal(38,0)"),
        (10**38 - 1, "decimal(38,0)"),
        (10**38, "string"),
    ):
        [event] = get_format("ogg-json")("exact").events_for(message(vendor.ogg(0, Number(str(number)))))
        assert (event["after"]["v"], event["column_types"]["v"]) == (str(number), kind)


def test_postgresql_numeric_of_the_most_digits_arrives_exact():
    """PostgreSQL's numeric holds 131072 digits before the point and 16383 after; Python's `str`
    of an int refuses more than 4300 digits, so the digits must not go through it."""
    unscaled = -(10 ** (131072 + 16383) - 1)
    column = {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}
    document = vendor.debezium(0, column, {"scale": 16383, "value": vendor.connect_decimal(unscaled)})
    [event] = get_format("debezium-json")("exact").events_for(message(document))
    assert event["after"]["v"] == "-" + "9" * 131072 + "." + "9" * 16383


@pytest.mark.parametrize("special", ["NaN", "Infinity", "-Infinity"])
def test_postgresql_numeric_nan_and_infinities_arrive_as_text(special):
    """PostgreSQL's numeric holds 'NaN' (and, since 14, infinities): with decimal.handling.mode=string
    Debezium writes them as text, DTS as its Decimal's text; the column is text, so they stay."""
    [event] = get_format("debezium-json")("exact").events_for(message(vendor.debezium(0, {"type": "string"}, special)))
    assert event["after"]["v"] == special
    raw = vendor.dts_avro(0, dts.decimal(special, 0, 0), 246)
    [event] = get_format("dts-avro")("exact").events_for(message(raw))
    assert (event["after"]["v"], event["column_types"]["v"]) == (special, "string")
