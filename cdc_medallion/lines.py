"""Lines of JSON-lines text (Delta's commit log, json-lines and Kafka-dump inputs, psql's output):
ended by "\\n" only.

JSON lets a string hold U+2028, U+2029 and U+0085 as they are (Jackson, Debezium's converter and
Python's `json.dumps(ensure_ascii=False)` write them so), and a raw message landed byte-exact may
hold any byte but "\\n". `str.splitlines` also ends a line at those three and at \\r, \\x0b, \\x0c
and \\x1c-\\x1e, and a file read in text mode ends one at \\r: either cuts such a value in two, and
what follows is no JSON. So every reader of lines here splits at "\\n" and nothing else (binary
files: `bytes.split`, `readline`; text files: `open(..., newline="\\n")`).
"""

from __future__ import annotations

from typing import AnyStr

NEWLINE = "\n"


def lines_of(text: AnyStr, keepends: bool = False) -> list[AnyStr]:
    """`text` cut after each "\\n" (which `keepends` keeps); a last line without one is a line,
    an empty text has none."""
    newline = NEWLINE if isinstance(text, str) else NEWLINE.encode()
    parts = text.split(newline)
    last = parts.pop()
    if keepends:
        parts = [part + newline for part in parts]
    return [*parts, last] if last else parts
