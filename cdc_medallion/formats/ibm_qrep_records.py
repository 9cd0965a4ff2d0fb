"""IBM Q Replication Event Publishing delimited text: delimiters, the field scanner, the header.

The scanner follows the spec's quoting exactly: a value enclosed in the string delimiter may
contain every delimiter, a string delimiter inside it is doubled; an unquoted empty value is
SQL NULL (nothing between two column delimiters), a quoted empty one is the empty string.
One departure, on by default and always flagged: a value closed by a typographic quote
(`”`, as the vendor's own V10/V11 examples print one) followed by a delimiter is accepted
where the strict reading fails — otherwise that record is quarantined saying so.

A syntax error quarantines only its record: scanning resumes at the next record delimiter.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

# Characters a word processor puts where the string delimiter was meant.
LOOKALIKES = {'"': "\u201d\u201c\u2033", "'": "\u2019\u2018\u2032"}

HEADER_FIELDS = (
    "type",
    "identifier",
    "date",
    "time",
    "table_owner",
    "table_name",
    "operation",
    "transaction_identifier",
    "commit_lsn",
    "commit_time",
    "plan_name",
    "segment_number",
)
OPERATIONS = ("ISRT", "REPL", "DLET")


class RecordError(Exception):
    """One record cannot be used (it is quarantined, the other records of its message are not)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Delimiters:
    column: str = ","
    record: str = "\n"
    string: str = '"'
    decimal: str = "."

    def problems(self) -> list[str]:
        """What the spec forbids: equal delimiters, alphanumeric or double-byte ones."""
        named = {"column_delimiter": self.column, "record_delimiter": self.record}
        named |= {"string_delimiter": self.string, "decimal_character": self.decimal}
        found = []
        for name, char in named.items():
            if not isinstance(char, str) or len(char) != 1:
                found.append(f"{name} must be exactly one character, got {char!r}")
            elif char.isalnum():
                found.append(f"{name} {char!r} is alphanumeric, which the spec forbids")
            elif ord(char) > 0xFF:
                found.append(f"{name} {char!r} is not a single-byte character")
        items = list(named.items())
        for a, (first, char) in enumerate(items):
            for second, other in items[a + 1 :]:
                if char == other:
                    found.append(f"{first} and {second} are both {char!r}; all four must differ")
        return found


@dataclass(slots=True)
class Field:
    text: str | None  # None: SQL NULL
    quoted: bool = False
    repaired: bool = False  # closed by a typographic quote


@dataclass(slots=True)
class RawRecord:
    index: int  # 0-based position in its message
    text: str
    fields: list[Field] = field(default_factory=list)
    error: str | None = None


class _ScanError(Exception):
    def __init__(self, reason: str, resume: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.resume = resume


class Scanner:
    """Splits a message's text into records of fields."""

    def __init__(self, delimiters: Delimiters, repair_quotes: bool) -> None:
        self.d = delimiters
        self.repair = repair_quotes
        self.lookalikes = LOOKALIKES.get(delimiters.string, "")
        self._start = 0  # where the record being scanned starts (offsets in errors are relative to it)
        self._unquoted_end = re.compile(f"[{re.escape(delimiters.column)}{re.escape(delimiters.record)}]")

    def records(self, text: str) -> list[RawRecord]:
        records: list[RawRecord] = []
        i, n = 0, len(text)
        while i < n:
            start = self._start = i
            fields: list[Field] = []
            try:
                while True:
                    value, i = self._field(text, i)
                    fields.append(value)
                    if i < n and text[i] == self.d.column:
                        i += 1
                        continue
                    i = self._past_record_end(text, i)
                    break
                body = text[start:i].rstrip(self.d.record).removesuffix("\r")
                if body:
                    records.append(RawRecord(len(records), body, fields))
            except _ScanError as error:
                end = text.find(self.d.record, error.resume)
                end = n if end < 0 else end
                number = len(fields) + 1
                name = f" ({HEADER_FIELDS[number - 1]})" if number <= len(HEADER_FIELDS) else " (a value)"
                reason = f"field {number}{name}: {error.reason}"
                records.append(RawRecord(len(records), text[start:end], error=reason))
                i = end + 1
        return records

    def _at(self, offset: int) -> str:
        return f"offset {offset - self._start}"

    # --- fields -------------------------------------------------------------------------------
    def _ends_field(self, text: str, at: int) -> bool:
        if at >= len(text) or text[at] in (self.d.column, self.d.record):
            return True
        return self.d.record == "\n" and text.startswith("\r\n", at)

    def _past_record_end(self, text: str, at: int) -> int:
        if at < len(text) and text[at] == "\r" and self.d.record == "\n":
            at += 1
        return at + 1

    def _field(self, text: str, i: int) -> tuple[Field, int]:
        """The field starting at `i` and the index of what ends it (a delimiter or the end)."""
        q = self.d.string
        if i < len(text) and text[i] == q:
            parts = []
            j = i + 1
            while True:
                k = text.find(q, j)
                if k < 0:
                    return self._repair_or_fail(text, i, len(text), "has no closing string delimiter")
                if text.startswith(q, k + 1):
                    parts.append(text[j : k + 1])
                    j = k + 2
                    continue
                if self._ends_field(text, k + 1):
                    parts.append(text[j:k])
                    return Field("".join(parts), quoted=True), k + 1
                return self._repair_or_fail(
                    text, i, k, f"is closed at {self._at(k)} but followed by {text[k + 1]!r}, not a delimiter"
                )
        match = self._unquoted_end.search(text, i)
        end = match.start() if match else len(text)
        value = text[i:end]
        if self.d.record == "\n" and value.endswith("\r"):
            value = value[:-1]
        if q in value:
            raise _ScanError(f"string delimiter {q!r} inside the unquoted value {value!r} at {self._at(i)}", end)
        return Field(value if value else None), end

    def _repair_or_fail(self, text: str, start: int, limit: int, problem: str) -> tuple[Field, int]:
        """A quoted value the strict reading cannot close: accept a typographic closing quote?"""
        close = next(
            (p for p in range(start + 1, limit) if text[p] in self.lookalikes and self._ends_field(text, p + 1)),
            None,
        )
        if close is not None and self.repair:
            value = text[start + 1 : close].replace(self.d.string * 2, self.d.string)
            return Field(value, quoted=True, repaired=True), close + 1
        reason = f"the string starting at {self._at(start)} {problem}"
        if close is not None:
            reason += (
                f"; it ends with the typographic quote {text[close]!r} (U+{ord(text[close]):04X}) at {self._at(close)} "
                f"instead of {self.d.string!r} (set the format option repair_typographic_quotes: true to accept it)"
            )
        raise _ScanError(reason, close + 1 if close is not None else limit)


# --- the header -----------------------------------------------------------------------------------
_HEX_GROUPS = re.compile(r"^[0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4})*$")
_INVALID_ID = re.compile(r"^IBM-INVALID-COLUMN-(\d{1,4})-?([AB])-(HEX|NULL)$", re.IGNORECASE)
_COMMIT_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})-(\d{2})\.(\d{2})\.(\d{2})(?:\.(\d{1,12}))?$")
# Widths in 4-hex-digit groups: DB2 z/OS V10 (CHAR(10)) and V11 (VARCHAR(12)) unit-of-work ids;
# replication 10.1 (CHAR(10)) and 10.2.1 (VARCHAR(16)) commit LSNs.
TX_GROUPS = (5, 6)
LSN_GROUPS = (5, 8)


@dataclass(frozen=True, slots=True)
class InvalidData:
    """`IBM-INVALID-COLUMN-####-@-HEX|NULL`: first bad column (1-based), image B/A, mode."""

    column: int
    image: str
    mode: str  # 'HEX' or 'NULL'


@dataclass(frozen=True, slots=True)
class Header:
    type: int
    identifier: str
    put_time: dt.datetime | None
    owner: str
    table: str
    operation: str
    tx_id: str
    commit_lsn: str
    lsn_key: str  # 32 hex digits: both LSN widths compare as numbers
    commit_time: dt.datetime | None
    plan_name: str | None
    segment: int
    invalid: InvalidData | None
    flags: tuple[str, ...]

    @property
    def tx_key(self) -> tuple[str, str]:
        """A transaction: its unit-of-work id and commit LSN (redelivery repeats both)."""
        return self.tx_id.replace(":", "").lower(), self.lsn_key


def _text(fields: list[Field], index: int, required: bool = True) -> str | None:
    value = fields[index].text
    if value is None and required:
        raise RecordError(HEADER_FIELDS[index], "is empty (NULL)")
    return value


def hex_width(value: str, name: str, groups: tuple[int, ...]) -> str:
    """Validate a colon-grouped (or plain) hex identifier of one of the allowed widths."""
    digits = value.replace(":", "")
    if not _HEX_GROUPS.match(value) and not re.fullmatch(r"[0-9A-Fa-f]+", value):
        raise RecordError(name, f"{value!r} is not hexadecimal (expected groups like 0000:0000:0388:4642:0000)")
    if len(digits) not in tuple(4 * g for g in groups):
        widths = " or ".join(f"{2 * g} bytes ({g} groups)" for g in groups)
        raise RecordError(name, f"{value!r} has {len(digits) // 2} bytes; expected {widths}")
    return digits.lower()


def parse_header(fields: list[Field], zone: dt.tzinfo) -> Header:
    """The 12 header fields of a record (raises RecordError naming the field)."""
    if len(fields) < len(HEADER_FIELDS):
        raise RecordError("header", f"has {len(fields)} fields; a record starts with the 12-field header")
    flags: list[str] = []
    type_text = _text(fields, 0) or ""
    if not re.fullmatch(r"[+-]?\d+", type_text.strip()):
        raise RecordError("type", f"{type_text!r} is not an integer")
    identifier = _text(fields, 1) or ""
    invalid = None
    if identifier.upper().startswith("IBM-INVALID"):
        match = _INVALID_ID.match(identifier)
        if not match:
            raise RecordError("identifier", f"{identifier!r} is not IBM-INVALID-COLUMN-####-@-HEX or -NULL")
        invalid = InvalidData(int(match.group(1)), match.group(2).upper(), match.group(3).upper())
    put_time = _put_time(_text(fields, 2, False), _text(fields, 3, False), zone, flags)
    owner = _text(fields, 4) or ""
    table = _text(fields, 5) or ""
    operation = (_text(fields, 6) or "").upper()
    if operation not in OPERATIONS:
        raise RecordError("operation", f"unknown operation {fields[6].text!r} (expected ISRT, REPL or DLET)")
    tx_id = _text(fields, 7) or ""
    hex_width(tx_id, "transaction_identifier", TX_GROUPS)
    commit_lsn = _text(fields, 8) or ""
    lsn_key = hex_width(commit_lsn, "commit_lsn", LSN_GROUPS).rjust(32, "0")
    commit_text = fields[9].text or ""
    commit_time = _commit_time(commit_text, zone)
    if commit_time is None:
        flags.append(f"invalid_time:commit_time:{commit_text}")
    segment_text = (_text(fields, 11) or "").strip()
    if not segment_text.isdigit() or len(segment_text) > 9:
        raise RecordError("segment_number", f"{segment_text!r} is not a segment number like 0000")
    for index, name in enumerate(HEADER_FIELDS):
        if fields[index].repaired:
            flags.append(f"repaired_quote:{name}")
    return Header(
        type=int(type_text),
        identifier=identifier,
        put_time=put_time,
        owner=owner,
        table=table,
        operation=operation,
        tx_id=tx_id,
        commit_lsn=commit_lsn,
        lsn_key=lsn_key,
        commit_time=commit_time,
        plan_name=fields[10].text,
        segment=int(segment_text),
        invalid=invalid,
        flags=tuple(flags),
    )


def _commit_time(text: str, zone: dt.tzinfo) -> dt.datetime | None:
    """`YYYY-MM-DD-HH.mm.ss` -> aware UTC datetime; None when it is not a real time (67 seconds)."""
    match = _COMMIT_TIME.match(text.strip())
    if not match:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    micros = int((match.group(7) or "0").ljust(6, "0")[:6])
    try:
        local = dt.datetime(year, month, day, hour, minute, second, micros, tzinfo=zone)
    except ValueError:
        return None
    return local.astimezone(dt.UTC)


def _put_time(date: str | None, time: str | None, zone: dt.tzinfo, flags: list[str]) -> dt.datetime | None:
    """`YYYYddd` (day of the year) and `HHMMSSmmmmmm` (microseconds): when the message was sent."""
    if not date and not time:
        return None
    try:
        if not (date and time and re.fullmatch(r"\d{7}", date) and re.fullmatch(r"\d{12}", time)):
            raise ValueError("shape")
        year, day = int(date[:4]), int(date[4:])
        if not 1 <= day <= (366 if (year % 4 == 0 and year % 100 != 0) or year % 400 == 0 else 365):
            raise ValueError("day of year")
        clock = dt.time(int(time[:2]), int(time[2:4]), int(time[4:6]), int(time[6:]))
        return dt.datetime.combine(dt.date(year, 1, 1) + dt.timedelta(days=day - 1), clock, zone).astimezone(dt.UTC)
    except ValueError:
        flags.append(f"invalid_time:put_time:{date},{time}")
        return None
