"""Dates and instants of any year, by integer arithmetic: the proleptic Gregorian calendar.

Spark's DATE (days in an int) and TIMESTAMP (microseconds in a long) reach far beyond years
1-9999: a PostgreSQL BC date, a year past 9999, Debezium's extreme longs for `infinity`. Python's
`datetime` stops at 1-9999, so neither the decoders (which write a value's text) nor the readers
that print gold without Spark (`arrow_rows.python_rows`) go through it at the edges: both
count days and microseconds here, and spell a year outside 0-9999 with its sign, as ISO 8601 and
Spark's cast do. One module, so that the text a decoder writes and the text a reader prints for
the same value cannot drift apart.
"""

from __future__ import annotations

import datetime as dt

NANOS = 1_000_000_000
DAY_SECONDS = 86_400


def date_text(days: int) -> str:
    """A date from days since 1970-01-01 (proleptic Gregorian, as Spark's DATE), by integer
    arithmetic: `0001-01-01` to `9999-12-31` as ISO text; a year beyond those with its sign
    (`+10000-01-01`; year 0 is 1 BC, `-0001` is 2 BC, as Spark and ISO 8601 count), which is
    also how Spark's `CAST(date AS STRING)` spells them."""
    year, month, day = civil_date(days)
    return f"{year_text(year)}-{month:02d}-{day:02d}"


def civil_date(days: int) -> tuple[int, int, int]:
    """(year, month, day) of days since 1970-01-01 in the proleptic Gregorian calendar, for any
    number of days (Howard Hinnant's `civil_from_days`: 400-year eras of 146097 days)."""
    era, day_of_era = divmod(days + 719468, 146097)
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153  # March is 0
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def civil_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (the inverse of `civil_date`)."""
    year -= month <= 2
    era, year_of_era = divmod(year, 400)
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def year_text(year: int) -> str:
    """A year as ISO 8601 (and Spark's cast) spell it: four digits in 0-9999, else signed."""
    if year > 9999:
        return f"+{year}"
    return f"{year:04d}" if year >= 0 else f"-{-year:04d}"


def epoch_timestamp_text(amount: int, per_second: int) -> str:
    """UTC timestamp text of `amount` units (`per_second` of them a second: 1000 for
    milliseconds, 10**6, 10**9) since the epoch, by integer arithmetic: nothing is rounded.
    The fraction is 6 digits when the time is whole microseconds (and not whole seconds), 9 when
    it has nanoseconds; a year beyond 1-9999 signed, as `date_text` writes it."""
    seconds, part = divmod(amount, per_second)
    days, second_of_day = divmod(seconds, DAY_SECONDS)
    hour, rest = divmod(second_of_day, 3600)
    return f"{date_text(days)} {hour:02d}:{rest // 60:02d}:{rest % 60:02d}{fraction_text(part * NANOS // per_second)}"


def fraction_text(nanos: int) -> str:
    """A second's fraction as the decoders write it: none, 6 digits, or 9 when it has nanoseconds."""
    if not nanos:
        return ""
    return f".{nanos // 1000:06d}" if nanos % 1000 == 0 else f".{nanos:09d}"


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_FIRST_DAY, _LAST_DAY = civil_days(1, 1, 1), civil_days(9999, 12, 31)


def python_date(days: int) -> dt.date | str:
    """A DATE as Spark's `collect()` gives it (a `date`) in years 1-9999; outside them, where
    `collect()` fails, its text as Spark's `CAST(date AS STRING)` spells it (`+10000-01-01`)."""
    if _FIRST_DAY <= days <= _LAST_DAY:
        return dt.date(1970, 1, 1) + dt.timedelta(days=days)
    return date_text(days)


def spark_timestamp_text(micros: int) -> str:
    """Microseconds since the epoch as Spark's `CAST(timestamp AS STRING)` spells them in UTC:
    a signed year outside 0-9999 and the fraction without its trailing zeros
    (`+294247-01-10 04:00:25.2`)."""
    text = epoch_timestamp_text(micros, 1_000_000)
    return text.rstrip("0").rstrip(".") if "." in text else text


#: Spark's first and last instants (a long's microseconds since the epoch), in UTC.
FIRST_INSTANT, LAST_INSTANT = epoch_timestamp_text(-(2**63), 10**6), epoch_timestamp_text(2**63 - 1, 10**6)
#: The words a source writes for a timestamp before or beyond every other (PostgreSQL's, which
#: Debezium's ZonedTimestamp passes on as they are), and the instant gold's TIMESTAMP gives each:
#: Spark's first or last, as Debezium itself gives its MicroTimestamp an extreme long.
INFINITIES = {"infinity": LAST_INSTANT, "+infinity": LAST_INSTANT, "-infinity": FIRST_INSTANT}
