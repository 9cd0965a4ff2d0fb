"""The range of keys a MERGE's source holds, as a condition on the target that prunes files.

delta-rs MERGE reads every target file its predicate cannot rule out, and holds the rows of
each such file until the scan ends, when it knows whether the file was touched (its
`MergeBarrier`). Loading 10M rows in batches of 200k made each batch read the whole table so
far: the Python process peaked at 7.3 GiB. Its own pruning from the source's key range needs a
plain `=` on the keys and a source it may read twice (`streamed_exec=False`); ours is null-safe
and streamed. So the range is computed here, from the batch's written changes, and added to the
predicate as literals: delta-rs then skips by file statistics every file whose keys lie outside
it. Files are pruned, never rows (delta-rs copies a touched file's other rows), and a target
row outside the range matches no source row anyway: the result is the same.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from cdc_medallion.identifiers import quote


def within_source_keys(rows: ds.Dataset | None, keys: list[str], alias: str | None = "t") -> str | None:
    """`t.k BETWEEN lo AND hi` for each key with values this can spell as literals; None when
    no key narrows anything (no rows, only NULLs, or a type without a literal here). Without an
    alias it is a file pruning predicate for delta-rs's own reads (`file_pruning_predicate`)."""
    if rows is None:
        return None
    prefix = f"{alias}." if alias else ""
    table = rows.to_table(columns=keys)
    conditions = []
    for key in keys:
        column = table.column(key)
        bounds = pc.min_max(column)
        low, high = (_literal(bounds[end].as_py(), column.type) for end in ("min", "max"))
        if low is None or high is None:
            continue
        condition = f"{prefix}{quote(key)} BETWEEN {low} AND {high}"
        if column.null_count:  # a NULL key still matches a NULL one (the keys compare null-safe)
            condition = f"({condition} OR {prefix}{quote(key)} IS NULL)"
        conditions.append(condition)
    return " AND ".join(conditions) or None


def bounded(predicate: str, rows: ds.Dataset | None, keys: list[str]) -> str:
    """A MERGE predicate (target alias `t`) with the source's key range added, when it has one."""
    bounds = within_source_keys(rows, keys)
    return predicate if bounds is None else f"{predicate} AND {bounds}"


def _literal(value: Any, kind: pa.DataType) -> str | None:
    """A SQL literal DataFusion reads back as `value`, for the key types that are common."""
    if value is None:
        return None
    if pa.types.is_integer(kind):
        return str(int(value))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        # Only text whose quoting is beyond doubt: no backslash (escape rules differ between
        # SQL dialects) and nothing unprintable. Anything else is left unbounded.
        if "\\" in value or not value.isprintable():
            return None
        return "'" + value.replace("'", "''") + "'"
    return None
