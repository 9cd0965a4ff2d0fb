"""Local bronze landing from files, byte-exact and incremental, as a Spark streaming source.

Three layouts: `json-lines` (one message per line), `kafka-dump` (one JSON object per line
with topic/partition/offset/timestamp/key/value or value_base64/headers; `kafka_dump.py`) and
`files` (one message per file). Files may grow: the source's offset is, per file, how many bytes
and lines of it have been landed, so a stream resumes exactly at the next line. Spark keeps the
offsets in the query's checkpoint, which is what makes landing exactly-once with the idempotent
bronze write (`runner/batches.py`).

`FileLanding` plans micro-batches (in the driver: bounded in messages and bytes, whichever comes
first) and reads them (in a task: one block per file range, cut at its newlines, its columns
built as Arrow arrays). `FileSource` is the Spark data source around it, `cdc-files`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from cdc_medallion.config import DEFAULT_MAX_BYTES_PER_BATCH, DEFAULT_MAX_MESSAGES_PER_BATCH, InputConf, SourceConf
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.sources.kafka_dump import KAFKA_COLUMNS, unpack_lines

SOURCE_NAME = "cdc-files"
BRONZE_ARROW = pa.schema([f.with_nullable(True) for f in to_arrow_schema(BRONZE_SCHEMA, timezone="UTC")])
_FIRST_READ = 1 << 20  # a block is read in growing pieces, so a small batch reads little
#: A file range is read by one task; a bigger one is cut at its newlines into up to `pieces`
#: ranges of at least this many bytes, so a batch of one big file lands on every core.
MIN_PIECE_BYTES = 4 << 20

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
                handle.seek(landed)
                block = _read_block(handle, min(max_bytes - size_read, size - landed), max_messages - messages)
            count = _line_count(block)
            end[path] = [landed + len(block), lines + count]
            messages += count
            size_read += len(block)
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
                handle.seek(start)
                block = handle.read(target - start)
                block += handle.readline(max(0, whole.end - target))
                if start + len(block) >= whole.end or not block.endswith(b"\n"):
                    break
                pieces.append(FileRange(whole.path, start, start + len(block), first_line))
                start, first_line = start + len(block), first_line + block.count(b"\n")
        pieces.append(FileRange(whole.path, start, whole.end, first_line))
        return pieces

    def read(self, part: FileRange, now: dt.datetime | None = None) -> pa.Table:
        """One range's messages as bronze rows."""
        now = now or dt.datetime.now(dt.UTC)
        path = Path(part.path)
        if self.input.layout == "files":
            return self._table([path.read_bytes()], b"", path, 0, now)
        with path.open("rb") as handle:
            handle.seek(part.start)
            block = handle.read(part.end - part.start)
        return self._table(_messages(block), block, path, part.first_line, now)

    def next_batch(self, start: Offset | None = None) -> LandingBatch:
        """Plan and read the next batch after `start` here, in this process: what one batch of
        the stream would land (for tools and tests; the stream reads its ranges in tasks)."""
        start = start or {"files": {}}
        end = self.plan(start)
        tables = [self.read(part) for part in self.ranges(start, end)]
        return LandingBatch(pa.concat_tables(tables) if tables else BRONZE_ARROW.empty_table(), end)

    def _table(self, messages: list[bytes], block: bytes, path: Path, first_line: int, now: dt.datetime) -> pa.Table:
        count = len(messages)
        if self.input.layout == "kafka-dump":
            kafka = unpack_lines(messages, block, self.source.topic)
        else:
            kafka = _raw_messages(messages, self.source.topic)
        columns = {
            "_source": pa.repeat(pa.scalar(self.source.name, pa.string()), count),
            "_file": pa.repeat(pa.scalar(str(path), pa.string()), count),
            "_line": pa.array(np.arange(first_line, first_line + count, dtype=np.int64)),
            "_ingest_ts": pa.repeat(pa.scalar(now, BRONZE_ARROW.field("_ingest_ts").type), count),
        }
        return pa.Table.from_arrays(
            [columns[name] if name in columns else kafka.column(name) for name in BRONZE_ARROW.names],
            schema=BRONZE_ARROW,
        )


def _read_block(handle: BinaryIO, max_bytes: int, max_messages: int) -> bytes:
    """The next whole lines: up to `max_messages`, and up to the first that reaches `max_bytes`
    (so one line bigger than the budget still lands). A final line without a newline is one."""
    pieces: list[bytes] = []
    size = newlines = 0
    step = _FIRST_READ
    while size < max_bytes and newlines < max_messages:
        piece = handle.read(min(step, max_bytes - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        newlines += piece.count(b"\n")
        step *= 2
    block = b"".join(pieces)
    if newlines >= max_messages:
        end = -1
        for _ in range(max_messages):
            end = block.index(b"\n", end + 1)
        return block[: end + 1]
    if size >= max_bytes and not block.endswith(b"\n"):
        block += handle.readline()  # the line that crosses the budget
    return block


def _line_count(block: bytes) -> int:
    """How many messages `_messages(block)` holds, without cutting them out."""
    return block.count(b"\n") + (1 if block and not block.endswith(b"\n") else 0)


def _messages(block: bytes) -> list[bytes]:
    """A block's lines without their b'\\n' (a b'\\r' before it is part of the message)."""
    messages = block.split(b"\n")
    if not messages[-1]:
        messages.pop()
    return messages


def _raw_messages(messages: list[bytes], topic: str | None) -> pa.Table:
    """Messages landed as they are: the value is the message's bytes, Kafka's other columns empty."""
    count = len(messages)
    columns = {name: pa.nulls(count, KAFKA_COLUMNS.field(name).type) for name in KAFKA_COLUMNS.names}
    columns["value"] = pa.array(messages, pa.binary())
    columns["topic"] = pa.repeat(pa.scalar(topic, pa.string()), count)
    return pa.table(columns, schema=KAFKA_COLUMNS)


# --- the Spark data source -----------------------------------------------------------------------
def source_options(source: SourceConf, max_messages: int, max_bytes: int, pieces: int = 1) -> dict[str, str]:
    """The options `spark.readStream.format("cdc-files")` takes for one source; `pieces`: how
    many tasks may read one file's range of a batch (the cores Spark has)."""
    assert source.input is not None
    return {
        "source": json.dumps(
            {
                "name": source.name,
                "format": source.format,
                "topic": source.topic,
                "path": str(source.input.path),
                "layout": source.input.layout,
                "pattern": source.input.pattern,
            }
        ),
        "max_messages": str(max_messages),
        "max_bytes": str(max_bytes),
        "pieces": str(pieces),
    }


def _landing(options: dict[str, str]) -> FileLanding:
    spec = json.loads(options["source"])
    # Checked when the conf was read, on the driver. A worker rebuilds it unchecked: checking
    # needs the format registry, and a format registered at run time exists only on the driver.
    given = InputConf.model_construct(path=Path(spec["path"]), layout=spec["layout"], pattern=spec["pattern"])
    source = SourceConf.model_construct(name=spec["name"], format=spec["format"], topic=spec["topic"], input=given)
    return FileLanding(source, int(options["max_messages"]), int(options["max_bytes"]), int(options["pieces"]))


class _Range(InputPartition):
    def __init__(self, part: FileRange) -> None:
        super().__init__(part)


class FileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets and partitions of `FileLanding`; an `availableNow` update reads the files up to
    their sizes when it began, so a file that keeps growing cannot keep an update running."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.landing = _landing(options)
        self.frozen: dict[str, int] | None = None

    def initialOffset(self) -> dict:
        return {"files": {}}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.landing.max_messages)

    def prepareForTriggerAvailableNow(self) -> None:
        self.frozen = self.landing.sizes()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self.landing.plan(start, self.frozen, bounded=not isinstance(limit, ReadAllAvailable))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [_Range(part) for part in self.landing.ranges(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from self.landing.read(partition.value).to_batches()

    def commit(self, end: dict) -> None:
        pass


class FileSource(DataSource):
    """`spark.readStream.format("cdc-files").options(**source_options(...)).load()`."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return BRONZE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FileStreamReader(dict(self.options))
