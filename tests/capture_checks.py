"""What the capture tests (PostgreSQL, MariaDB) share: one canonical form per value, gold read
back, and the SCD2 versions a database's own audit of its changes implies.

A database and gold never hold a value in the same form (the database prints text; gold holds
what Debezium's message said, typed or not), so each side is turned into one canonical Python
value per source type and those are compared. A value a side cannot be read as is not an error
of the test: it becomes `Unreadable`, which equals nothing, so the comparison names the column,
the expected value and what gold holds.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cdc_medallion.config import PipelineConf
from cdc_medallion.errors import FlowFailed
from cdc_medallion.pipeline import run_pipeline
from tests.kafka_feed import rows, status

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
Decode = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A value its side's decoder could not read (shown in the failure, equal to nothing)."""

    value: Any
    why: str

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)


def canonical(row: Mapping[str, Any], types: Mapping[str, str], decode: Mapping[str, Decode]) -> dict[str, Any]:
    """A row's columns (a column the row lacks is NULL), each value made canonical by its type."""
    out: dict[str, Any] = {}
    for column, kind in types.items():
        value = row.get(column)
        try:
            out[column] = None if value is None else decode[kind](value)
        except (ValueError, TypeError, ArithmeticError, OverflowError, KeyError) as e:
            out[column] = Unreadable(value, f"{type(e).__name__}: {e}")
    return out


# --- canonical values ----------------------------------------------------------------------------
def float32(value: Any) -> str:
    """A REAL as the float32 it is, by its text (NaN equals NaN, -0 differs from 0)."""
    return repr(struct.unpack("f", struct.pack("f", float(value)))[0])


def float_repr(value: Any) -> str:
    """A double by its shortest round-trip text: NaN equals NaN, -0 differs from 0."""
    return repr(float(value))


def instant(value: Any) -> dt.datetime:
    """A timestamp as an aware UTC datetime (one without a zone is read as UTC, as Debezium does)."""
    parsed = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


# A date or timestamp of any year, as text: ISO 8601 with a signed year (gold's text outside years
# 1-9999, `civil_time`), or PostgreSQL's with ` BC`; an optional time, fraction and offset.
_MOMENT = re.compile(
    r"([+-]?\d{4,})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)?"
    r"(Z|[+-]\d\d(?::?\d\d)?)?( BC)?"
)
_CYCLE_DAYS, _CYCLE_YEARS = 146097, 400  # the Gregorian calendar repeats every 400 years


def day_number(value: Any) -> int:
    """A date as days since 1970-01-01, of any year: a `date`, Debezium's Date (days), or text
    (`_MOMENT`). Counted with Python's own calendar, shifted by whole 400-year cycles, so that
    it does not share arithmetic with the decoders it checks."""
    if isinstance(value, dt.date):
        return (value - EPOCH.date()).days
    if isinstance(value, int):
        return value
    match = _MOMENT.fullmatch(str(value))
    if match is None:
        raise ValueError(f"not a date: {value!r}")
    return _days(*_signed_date(match))


def micros_number(value: Any) -> int:
    """A timestamp as microseconds since 1970-01-01 UTC, of any year: a datetime (naive: UTC, as
    Debezium reads a timestamp without a zone), Debezium's MicroTimestamp, or text (`_MOMENT`);
    `infinity` and `-infinity` as the instants gold gives them (Spark's last and first)."""
    if value in ("infinity", "-infinity"):
        return 2**63 - 1 if value == "infinity" else -(2**63)
    if isinstance(value, dt.datetime):
        moment = value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
        return (moment - EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(value, int):
        return value
    match = _MOMENT.fullmatch(str(value))
    if match is None or match[4] is None:
        raise ValueError(f"not a timestamp: {value!r}")
    seconds = _days(*_signed_date(match)) * 86400 + int(match[4]) * 3600 + int(match[5]) * 60 + int(match[6])
    zone = match[8]
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[-2:]) if len(zone) > 3 else 0
        seconds -= sign * (hours * 3600 + minutes * 60)
    fraction = int((match[7] or "").ljust(9, "0") or 0)
    if fraction % 1000:
        raise ValueError(f"nanoseconds in {value!r}")
    return seconds * 10**6 + fraction // 1000


def _signed_date(match: re.Match[str]) -> tuple[int, int, int]:
    year = int(match[1])
    return (1 - year if match[9] else year), int(match[2]), int(match[3])  # 1 BC is year 0


def _days(year: int, month: int, day: int) -> int:
    cycles = (year - 1) // _CYCLE_YEARS  # shifts the year into 1-400
    within = dt.date(year - cycles * _CYCLE_YEARS, month, day)
    return (within - EPOCH.date()).days + cycles * _CYCLE_DAYS


_TIME = re.compile(r"(-)?(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?")


def time_micros(value: Any) -> int:
    """A time (of day, or MariaDB's -838:59:59 .. 838:59:59 duration) as signed microseconds:
    `[-]H+:MM:SS[.ffffff]` text, as both databases print it, or a `datetime.time`."""
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    found = _TIME.fullmatch(str(value))
    if found is None:
        raise ValueError(f"not a time: {value!r}")
    sign, hours, minutes, seconds, fraction = found.groups()
    micros = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000 + int((fraction or "0").ljust(6, "0"))
    return -micros if sign else micros


def epoch_micros(value: Any) -> dt.datetime:
    """Debezium's MicroTimestamp (microseconds since 1970, UTC)."""
    return EPOCH + dt.timedelta(microseconds=int(value))


def epoch_millis(value: Any) -> dt.datetime:
    """Debezium's Timestamp (milliseconds since 1970, UTC)."""
    return EPOCH + dt.timedelta(milliseconds=int(value))


def epoch_days(value: Any) -> dt.date:
    """Debezium's Date (days since 1970)."""
    return (EPOCH + dt.timedelta(days=int(value))).date()


def exact_decimal(value: Any) -> decimal.Decimal | str:
    """A decimal from its text (never through a float), compared by value (1.50 equals 1.5);
    NaN is the text `NaN` (a Decimal NaN equals nothing, itself included)."""
    if isinstance(value, float):
        raise TypeError(f"{value!r} is a float: a decimal read as one has lost its digits")
    number = decimal.Decimal(str(value))
    return "NaN" if number.is_nan() else number


_OFFSET = re.compile(r"(.*?)(Z|[+-]\d\d(?::?\d\d)?(?::?\d\d)?)")
DAY_MICROS = 86_400_000_000


def utc_time_micros(value: Any) -> int:
    """A time with a zone (`HH:MM:SS[.ffffff]±HH[:MM[:SS]]`, or `Z`) as microseconds since
    midnight UTC: Debezium's ZonedTime normalizes to UTC, so the offset itself is not kept."""
    found = _OFFSET.fullmatch(str(value))
    if found is None:
        raise ValueError(f"not a time with a zone: {value!r}")
    local, zone = found.groups()
    offset = 0
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        hours, minutes, seconds = int(digits[0:2]), int(digits[2:4] or 0), int(digits[4:6] or 0)
        offset = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 * (-1 if zone[0] == "-" else 1)
    return (time_micros(local) - offset) % DAY_MICROS


_PG_INTERVAL = re.compile(r"(-?\d+) (year|mon|day)s?|([+-])?(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_ISO_INTERVAL = re.compile(
    r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+)(?:\.(\d{1,6})\d*)?S)?)?"
)


def interval_parts(value: Any) -> tuple[int, int, int]:
    """An interval as PostgreSQL keeps it, (months, days, microseconds), from PostgreSQL's own
    text (`1 year 2 mons 3 days 04:05:06.789`) or ISO 8601 (`P1Y2M3DT4H5M6.789S`, what
    Debezium writes with `interval.handling.mode=string`; each part may carry its sign)."""
    text = str(value).strip()
    if text.startswith("P"):
        found = _ISO_INTERVAL.fullmatch(text)
        if found is None:
            raise ValueError(f"not an ISO 8601 interval: {value!r}")
        years, months, days, hours, minutes, seconds, fraction = (g or "0" for g in found.groups())
        sign = -1 if seconds.startswith("-") else 1
        micros = (int(hours) * 60 + int(minutes)) * 60 * 1_000_000 + int(seconds) * 1_000_000
        micros += sign * int(fraction.ljust(6, "0"))
        return int(years) * 12 + int(months), int(days), micros
    months = days = micros = 0
    position = 0
    for found in _PG_INTERVAL.finditer(text):
        if text[position : found.start()].strip():
            raise ValueError(f"not a PostgreSQL interval: {value!r}")
        position = found.end()
        number, unit, sign, hours, minutes, seconds, fraction = found.groups()
        if unit == "day":
            days += int(number)
        elif unit is not None:
            months += int(number) * (12 if unit == "year" else 1)
        else:
            clock = time_micros(f"{hours}:{minutes}:{seconds}" + (f".{fraction}" if fraction else ""))
            micros += -clock if sign == "-" else clock
    if text[position:].strip() or not text:
        raise ValueError(f"not a PostgreSQL interval: {value!r}")
    return months, days, micros


# --- gold and its history ------------------------------------------------------------------------
def run_or_why(conf: PipelineConf, spark: Any) -> str | None:
    """One pipeline run; why it failed, if a flow failed. The flows that did not fail have
    committed, so every table's gold is still compared, value by value, and the run's failure
    fails a test of its own (`test_the_runs_succeed`)."""
    try:
        run_pipeline(conf, spark=spark)
    except FlowFailed as e:
        print(f"the pipeline run failed: {e}")
        return str(e)
    return None


def gold_rows(storage: Path, name: str, columns: Iterable[str]) -> list[dict[str, Any]]:
    """A gold table's rows; it must have every column of the source table."""
    names = {d["name"] for d in status(storage)}
    assert name in names, f"{name} is not among {sorted(names)}"
    found = rows(storage, name)
    assert found, f"{name} is empty"
    missing = set(columns) - set(found[0])
    assert not missing, f"{name} lacks {missing}"
    return found


def expected_versions(
    audit: Iterable[Mapping[str, Any]], table: str, keys: tuple[str, ...], image: Callable[[Mapping[str, Any]], dict]
) -> dict[tuple, list[tuple[dict, bool]]]:
    """Per key, the canonical row after each change the audit log recorded, and whether it is
    still open. Each audit entry has `tbl`, `op` (INSERT, UPDATE, DELETE, TRUNCATE), `old_row`
    and `new_row`.

    A change that leaves every column as it was makes no version (SCD2 updates the open one in
    place); an update of the key ends the old key's version and starts one for the new key; a
    truncate ends every open version."""
    versions: dict[tuple, list[list]] = {}
    open_keys: set[tuple] = set()

    def key_of(row: Mapping[str, Any]) -> tuple:
        canon = image(row)
        return tuple(canon[k] for k in keys)

    def close(key: tuple) -> None:
        if key in open_keys:
            versions[key][-1][1] = False
            open_keys.discard(key)

    for entry in audit:
        if entry["tbl"] != table:
            continue
        if entry["op"] == "TRUNCATE":
            for key in list(open_keys):
                close(key)
            continue
        moved = entry["op"] == "UPDATE" and key_of(entry["old_row"]) != key_of(entry["new_row"])
        if entry["op"] == "DELETE" or moved:
            close(key_of(entry["old_row"]))
        if entry["op"] in ("INSERT", "UPDATE"):
            key, after = key_of(entry["new_row"]), image(entry["new_row"])
            history = versions.setdefault(key, [])
            if key in open_keys and history[-1][0] == after:
                continue
            close(key)
            history.append([after, True])
            open_keys.add(key)
    return {key: [tuple(v) for v in history] for key, history in versions.items()}


def differences(actual: list[dict], expected: list[dict], keys: tuple[str, ...], where: str) -> list[str]:
    """Each value that differs, as `<where> <key> <column>: expected <want>, got <got>`; rows
    are matched by key (a key on one side only is reported once)."""
    by_key = lambda rows_: {tuple(r[k] for k in keys): r for r in rows_}  # noqa: E731
    got, want = by_key(actual), by_key(expected)
    out = [f"{where} {key}: missing from gold" for key in want if key not in got]
    out += [f"{where} {key}: in gold, not in the source" for key in got if key not in want]
    for key in want.keys() & got.keys():
        for column, value in want[key].items():
            if got[key].get(column) != value:
                out.append(f"{where} {key} {column}: expected {value!r}, got {got[key].get(column)!r}")
    return sorted(out)


def version_differences(actual: Mapping[tuple, list], expected: Mapping[tuple, list], where: str) -> list[str]:
    """What differs between SCD2 histories (per key, a list of (image, is open)): a key on one
    side only, a different number of versions, or per version each differing column."""
    out = [f"{where} {key}: no history in gold" for key in expected if key not in actual]
    out += [f"{where} {key}: in gold's history, not in the audit" for key in actual if key not in expected]
    for key in expected.keys() & actual.keys():
        want, got = expected[key], actual[key]
        if len(want) != len(got):
            out.append(f"{where} {key}: expected {len(want)} versions, got {len(got)}")
            continue
        for n, ((want_image, want_open), (got_image, got_open)) in enumerate(zip(want, got, strict=True)):
            if want_open != got_open:
                out.append(f"{where} {key} version {n}: expected open={want_open}, got open={got_open}")
            for column, value in want_image.items():
                if got_image.get(column) != value:
                    out.append(f"{where} {key} version {n} {column}: expected {value!r}, got {got_image.get(column)!r}")
    return sorted(out)


def quarantined(storage: Path) -> dict[str, list[str]]:
    """Each non-empty quarantine table, with each of its rows' columns (less the raw message and
    row images) as short text: what a failure names."""
    found: dict[str, list[str]] = {}
    for dataset in status(storage):
        if dataset["layer"] == "quarantine" and dataset["rows"]:
            found[dataset["name"]] = [
                ", ".join(f"{k}={str(v)[:160]}" for k, v in row.items() if k not in ("raw_message", "before", "after"))
                for row in rows(storage, dataset["name"])
            ]
    return found
