"""Lines of JSON-lines text (Delta's commit log, json-lines and Kafka-dump inputs, psql's output):
ended by "\\n" only.

JSON lets a string hold U+2028, U+2029 and U+0085 as they are (Jackson, Debezium's converter and
Python's `json.dumps(ensure_ascii=False)` write them so), and a raw message landed byte-exact may
hold any byte but "\\n". `str.splitlines` also ends a line at those three and at \\r, \\x0b, \\x0c
and \\x1c-\\x1e, and a file read in text mode ends one at \\r: either cuts such a value in two, and
what follows is no JSON. So every reader of lines here splits at "\\n" and nothing else (binary
files: `bytes.split`, `readline`; text files: `open(..., newline="\\n")`).

`Lines` gives a block's lines as arrays (numpy finds the newlines, the values are one Arrow
buffer): landing tens of megabytes a `bytes` object per line cost more than reading them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AnyStr

import numpy as np
import pyarrow as pa

NEWLINE = "\n"
NEWLINE_BYTE = ord(NEWLINE)


def lines_of(text: AnyStr, keepends: bool = False) -> list[AnyStr]:
    """`text` cut after each "\\n" (which `keepends` keeps); a last line without one is a line,
    an empty text has none."""
    newline = NEWLINE if isinstance(text, str) else NEWLINE.encode()
    parts = text.split(newline)
    last = parts.pop()
    if keepends:
        parts = [part + newline for part in parts]
    return [*parts, last] if last else parts


@dataclass(frozen=True)
class Lines:
    """Line i of a block is `block[starts[i]:ends[i]]`: its b'\\n' left out (a b'\\r' before it
    is part of the message), a final line without a newline a line too."""

    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, block: bytes) -> Lines:
        newlines = np.flatnonzero(np.frombuffer(block, np.uint8) == NEWLINE_BYTE)
        ends = newlines if not block or block.endswith(b"\n") else np.append(newlines, len(block))
        starts = np.concatenate(([0], newlines + 1))[: len(ends)]
        return cls(starts.astype(np.int64), ends.astype(np.int64))

    def __len__(self) -> int:
        return len(self.ends)

    def line(self, block: bytes, index: int) -> bytes:
        return block[self.starts[index] : self.ends[index]]

    def values(self, block: bytes) -> pa.Array:
        """The lines as one binary array: the block without its newlines, and where each starts
        (line i begins i bytes earlier there, each line before it having lost one newline)."""
        count = len(self)
        if len(block) - count > np.iinfo(np.int32).max:
            raise ValueError(f"a block of {len(block):,} bytes is beyond what one Arrow binary array holds")
        shift = np.arange(count, dtype=np.int64)
        offsets = np.append(self.starts - shift, self.ends[-1] - (count - 1) if count else 0).astype(np.int32)
        data = block.replace(b"\n", b"")
        return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
