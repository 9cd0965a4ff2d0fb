"""Local bronze landing from files: what the input holds beyond an offset, planned in bounded
batches and read byte-exact as bronze rows.

Three layouts: `json-lines` (one message per line), `kafka-dump` (one JSON object per line
with topic/partition/offset/timestamp/key/value or value_base64/headers; `kafka_dump.py`) and
`files` (one message per file). Files may grow: an offset is, per file, how many bytes and lines
of it have been landed, so landing resumes exactly at the next line.

`FileLanding` plans batches (bounded in messages and bytes, whichever comes first; a big file's
range cut at its newlines into a piece per core) and reads a piece as bronze rows (`read`: its
lines found by numpy and its columns built as Arrow arrays, `lines.py`). The bronze query lands
the batches the driver planned (`landing_log.py`, `file_stream.py`); `next_batch` plans and reads
one batch in this process, for tools and tests.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from cdc_medallion.config import DEFAULT_MAX_BYTES_PER_BATCH, DEFAULT_MAX_MESSAGES_PER_BATCH, InputConf, SourceConf
from cdc_medallion.lines import NEWLINE_BYTE, Lines
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.sources.kafka_dump import KAFKA_COLUMNS, unpack_block

BRONZE_ARROW = pa.schema([f.with_nullable(True) for f in to_arrow_schema(BRONZE_SCHEMA, timezone="UTC")])
#: A file range is read by one task; a bigger one is cut at its newlines into up to `pieces`
#: ranges of at least this many bytes, so a batch of one big file lands on every core.
MIN_PIECE_BYTES = 4 << 20
_SCAN = 8 << 20  # the planner counts newlines in pieces of this many bytes, into one reused buffer

#: Per file path: [bytes landed, lines landed]. A Spark offset must be a dict of plain values.
Offset = dict[str, dict[str, list[int]]]


@dataclass(frozen=True)
class FileRange:
    """One file's bytes [start, end) and the number of the first line among them."""

    path: str
    start: int
    end: int
    first_line: int


@dataclass(frozen=True)
class LandingSpec:
    """What reading a range needs to know of its source: sent to the tasks that read."""

    name: str
    topic: str | None
    layout: str


@dataclass(frozen=True)
class LandingBatch:
    """One planned batch read in the driver: its rows and the offset that ends it."""

    rows: pa.Table
    offset: Offset

    @property
    def messages(self) -> int:
        return self.rows.num_rows

    def to_arrow(self) -> pa.Table:
        return self.rows


class FileLanding:
    """What one source's input holds beyond an offset, planned and read in bounded batches."""

    def __init__(
        self,
        source: SourceConf,
        max_messages: int = DEFAULT_MAX_MESSAGES_PER_BATCH,
        max_bytes: int = DEFAULT_MAX_BYTES_PER_BATCH,
        pieces: int = 1,
    ) -> None:
        if source.input is None:
            raise ValueError(f"source {source.name!r} has no local input")
        self.source = source
        self.input: InputConf = source.input
        self.spec = LandingSpec(source.name, source.topic, source.input.layout)
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.pieces = max(1, pieces)

    def files(self) -> list[Path]:
        path = self.input.path
        if path.is_file():
            return [path]
        if not path.is_dir():
            return []
        return sorted(p for p in path.rglob(self.input.pattern) if p.is_file() and not p.name.startswith("."))

    def sizes(self) -> dict[str, int]:
        """Each input file's size now, by path: what an `availableNow` update reads up to."""
        return {str(p): p.stat().st_size for p in self.files()}

    def plan(self, start: Offset, sizes: dict[str, int] | None = None, bounded: bool = True) -> Offset:
        """The offset that ends the next batch after `start`: at most `max_messages` messages,
        and up to the first line that reaches `max_bytes` (so one line bigger than the budget
        still lands); `sizes` caps each file (None: as it is now); unbounded: everything."""
        done = start.get("files", {})
        end = {fid: list(position) for fid, position in done.items()}
        messages = size_read = 0
        max_messages = self.max_messages if bounded else 1 << 62
        max_bytes = self.max_bytes if bounded else 1 << 62
        current = sizes if sizes is not None else self.sizes()
        for path, size in current.items():
            if messages >= max_messages or size_read >= max_bytes:
                break
            landed, lines = end.get(path, [0, 0])
            if self.input.layout == "files":
                if landed > 0:
                    continue
                end[path] = [max(size, 1), 1]
                messages += 1
                size_read += size
                continue
            if landed >= size:
                continue
            with open(path, "rb") as handle:
                length, count = _scan(
                    handle, landed, min(max_bytes - size_read, size - landed), max_messages - messages
                )
            end[path] = [landed + length, lines + count]
            messages += count
            size_read += length
        return {"files": end}

    def ranges(self, start: Offset, end: Offset) -> list[FileRange]:
        """The file ranges between two offsets, in file order, a big one cut in pieces."""
        before = start.get("files", {})
        ranges = []
        for path, (last, _) in sorted(end.get("files", {}).items()):
            first, first_line = before.get(path, [0, 0])
            if last > first:
                ranges.extend(self._pieces(FileRange(path, first, last, first_line)))
        return ranges

    def _pieces(self, whole: FileRange) -> list[FileRange]:
        """`whole` cut after a newline near each of `pieces` equal shares of its bytes, each
        piece numbered by the lines before it (one line bigger than a share stays whole)."""
        size = whole.end - whole.start
        count = min(self.pieces, size // MIN_PIECE_BYTES)
        if self.input.layout == "files" or count < 2:
            return [whole]
        pieces = []
        start, first_line = whole.start, whole.first_line
        with open(whole.path, "rb") as handle:
            for share in range(1, count):
                target = whole.start + size * share // count
                if target <= start:
                    continue
                handle.seek(target)
                cut = target + len(handle.readline(max(0, whole.end - target)))
                if cut >= whole.end or _byte_before(handle, cut) != NEWLINE_BYTE:
                    break
                pieces.append(FileRange(whole.path, start, cut, first_line))
                start, first_line = cut, first_line + _newlines(handle, start, cut)
        pieces.append(FileRange(whole.path, start, whole.end, first_line))
        return pieces

    def read(self, part: FileRange, now: dt.datetime | None = None) -> pa.Table:
        """One range's messages as bronze rows."""
        return read_range(self.spec, part, now or dt.datetime.now(dt.UTC))

    def next_batch(self, start: Offset | None = None) -> LandingBatch:
        """Plan and read the next batch after `start` here, in this process: what one batch of
        the stream would land (for tools and tests; the stream reads its ranges in tasks)."""
        start = start or {"files": {}}
        end = self.plan(start)
        tables = [self.read(part) for part in self.ranges(start, end)]
        return LandingBatch(pa.concat_tables(tables) if tables else BRONZE_ARROW.empty_table(), end)


def read_range(spec: LandingSpec, part: FileRange, now: dt.datetime, lines: int | None = None) -> pa.Table:
    """A range's messages as bronze rows: a `files` input's whole file, else the range's lines.
    `lines`: how many the range was planned to hold; a range that holds another number (its file
    was cut short or rewritten since) is refused, naming the file."""
    path = Path(part.path)
    if spec.layout == "files":
        return _rows(spec, _raw_messages(pa.array([path.read_bytes()], pa.binary()), spec.topic), path, 0, now)
    with path.open("rb") as handle:
        handle.seek(part.start)
        block = handle.read(part.end - part.start)
    if len(block) != part.end - part.start:
        raise ValueError(
            f"{path}: bytes {part.start}-{part.end} were planned, the file now ends at {part.start + len(block)}"
        )
    bounds = Lines.of(block)
    if lines is not None and len(bounds) != lines:
        raise ValueError(f"{path}: bytes {part.start}-{part.end} held {lines} lines when planned, now {len(bounds)}")
    if spec.layout == "kafka-dump":
        kafka = unpack_block(block, bounds, spec.topic)
    else:
        kafka = _raw_messages(bounds.values(block), spec.topic)
    return _rows(spec, kafka, path, part.first_line, now)


def _rows(spec: LandingSpec, kafka: pa.Table, path: Path, first_line: int, now: dt.datetime) -> pa.Table:
    count = kafka.num_rows
    columns = {
        "_source": pa.repeat(pa.scalar(spec.name, pa.string()), count),
        "_file": pa.repeat(pa.scalar(str(path), pa.string()), count),
        "_line": pa.array(np.arange(first_line, first_line + count, dtype=np.int64)),
        "_ingest_ts": pa.repeat(pa.scalar(now, BRONZE_ARROW.field("_ingest_ts").type), count),
    }
    return pa.Table.from_arrays(
        [columns[name] if name in columns else kafka.column(name) for name in BRONZE_ARROW.names],
        schema=BRONZE_ARROW,
    )


def _raw_messages(values: pa.Array, topic: str | None) -> pa.Table:
    """Messages landed as they are: the value is the message's bytes, Kafka's other columns empty."""
    count = len(values)
    columns = {name: pa.nulls(count, KAFKA_COLUMNS.field(name).type) for name in KAFKA_COLUMNS.names}
    columns["value"] = values
    columns["topic"] = pa.repeat(pa.scalar(topic, pa.string()), count)
    return pa.table(columns, schema=KAFKA_COLUMNS)


def _scan(handle: BinaryIO, start: int, max_bytes: int, max_messages: int) -> tuple[int, int]:
    """How many bytes and lines from `start` make the next whole lines: up to `max_messages`,
    and up to the first that reaches `max_bytes` (so one line bigger than the budget still
    lands). A final line without a newline is one. Counted in pieces, nothing kept."""
    handle.seek(start)
    buffer = bytearray(min(_SCAN, max(1, max_bytes)))
    length = newlines = 0
    last = NEWLINE_BYTE
    while length < max_bytes and newlines < max_messages:
        read = handle.readinto(memoryview(buffer)[: min(len(buffer), max_bytes - length)])
        if not read:
            break
        found = buffer.count(b"\n", 0, read)
        if newlines + found >= max_messages:  # the budget's last message ends in this piece
            cuts = np.flatnonzero(np.frombuffer(buffer, np.uint8, read) == NEWLINE_BYTE)
            return length + int(cuts[max_messages - newlines - 1]) + 1, max_messages
        length, newlines, last = length + read, newlines + found, buffer[read - 1]
    if length >= max_bytes and last != NEWLINE_BYTE:
        rest = handle.readline()  # the line that crosses the budget
        length, last = length + len(rest), rest[-1] if rest else last
        newlines += rest.endswith(b"\n")
    return length, newlines + (1 if length and last != NEWLINE_BYTE else 0)


def _newlines(handle: BinaryIO, start: int, end: int) -> int:
    """How many newlines bytes [start, end) of a file hold, counted in pieces."""
    handle.seek(start)
    buffer = bytearray(min(_SCAN, max(1, end - start)))
    count, left = 0, end - start
    while left > 0:
        read = handle.readinto(memoryview(buffer)[: min(len(buffer), left)])
        if not read:
            break
        count += buffer.count(b"\n", 0, read)
        left -= read
    return count


def _byte_before(handle: BinaryIO, position: int) -> int:
    handle.seek(position - 1)
    return handle.read(1)[0]
