"""Validation of names that come from messages or config before they reach SQL, paths or table names.

Source systems can name tables anything; a hostile or broken message must not be able to
escape the storage root (`../../x`) or inject SQL (`t; DROP TABLE y`). We accept a conservative
identifier alphabet for what becomes a path or a table name, and quote everything we put into
SQL. Column names only ever reach SQL quoted (and Delta stores any name with column mapping), so a
column may be named anything a source allows: spaces, punctuation, any script.
"""

from __future__ import annotations

import hashlib
import re

from cdc_medallion.errors import IdentifierError

# Letters (any script), digits, underscore, `$` (Oracle/Db2 names use it) and `#` (MySQL allows it;
# Alibaba DataWorks names its row-id column `#alibaba_rds_row_id#`); must not start with a digit.
# Never quotes, backticks, dots, slashes, spaces or semicolons: names are always backtick-quoted in SQL.
_IDENTIFIER = re.compile(r"(?:[^\W\d]|#)[\w$#]{0,254}", re.UNICODE)
_DATASET = re.compile(r"[a-z_][a-z0-9_]{0,254}")
_NOT_DATASET_CHARACTER = re.compile(r"[^a-z0-9_]")


def is_safe_identifier(name: object) -> bool:
    """True for a name safe as a column or table name (no dots, slashes, quotes, spaces)."""
    return isinstance(name, str) and bool(_IDENTIFIER.fullmatch(name))


def check_identifier(name: object, what: str = "identifier") -> str:
    """Return `name` if it is a safe identifier, else raise naming what it was for."""
    if not is_safe_identifier(name):
        raise IdentifierError(f"unsafe {what} {name!r}: use letters, digits, _ $ or #, not starting with a digit")
    return name  # type: ignore[return-value]


# A column: any text a source allows, except control characters (which no SQL dialect's quoted
# identifiers take and which would break the report and logs) and the backtick (Delta's change
# data feed fails a MERGE into a table with such a column); at most 255 characters.
_UNUSABLE = re.compile(r"[\x00-\x1f\x7f`]")
#: Characters Delta refuses in a column name unless the table has column mapping on.
_NEEDS_MAPPING = re.compile(r"[ ,;{}()\n\t=]")
COLUMN_MAPPING = {"delta.columnMapping.mode": "name"}


COLUMN_NAME_RULE = "empty, over 255 characters, or with a control character or a backtick"


def is_column_name(name: object) -> bool:
    """True for a name a column may carry: non-empty text, no control characters, no backtick."""
    return isinstance(name, str) and 0 < len(name) <= 255 and not _UNUSABLE.search(name)


def check_column(name: object, what: str = "column") -> str:
    """Return `name` if a column may carry it, else raise naming what it was for."""
    if not is_column_name(name):
        raise IdentifierError(f"unusable {what} name {name!r}: {COLUMN_NAME_RULE}")
    return name  # type: ignore[return-value]


def needs_column_mapping(names: object) -> bool:
    """True when a Delta table must map columns by name to hold these column names."""
    return any(_NEEDS_MAPPING.search(name) for name in names)  # type: ignore[attr-defined]


def dataset_name(*parts: str) -> str:
    """Build a dataset name (also a directory name) from safe parts, lower-cased."""
    name = "_".join(p for p in parts if p).lower()
    if not _DATASET.fullmatch(name):
        raise IdentifierError(f"unsafe dataset name {name!r}: use a-z, 0-9 and '_'")
    return name


TABLE_NAME_RULE = f"{COLUMN_NAME_RULE}, or with a dot or a slash"


def is_table_name(name: object) -> bool:
    """True for a source table's name as a message or conf may give it: any column name without a
    dot (which separates the schema) or a slash. It reaches SQL only as a quoted literal and
    paths only through `dataset_part`."""
    return is_column_name(name) and not any(c in name for c in "./\\")  # type: ignore[operator]


def dataset_part(name: str) -> str:
    """A source name as a dataset-name part: `Käse$Tab#1` -> `k_se_tab_1`. A name beyond the
    identifier alphabet (`order lines`, `t; x`) gets a digest of itself too, so that two such
    names never share a folder; the table's properties keep the name as sent."""
    if is_safe_identifier(name):
        return _NOT_DATASET_CHARACTER.sub("_", name.lower()).strip("_") or "_"
    if not is_table_name(name):
        raise IdentifierError(f"unusable name {name!r}: {TABLE_NAME_RULE}")
    readable = re.sub("_+", "_", _NOT_DATASET_CHARACTER.sub("_", name.lower())).strip("_")[:40]
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return f"{readable}_{digest}" if readable else f"t_{digest}"


def quote(name: str) -> str:
    """Backtick-quote a column (or dataset) name for Spark SQL."""
    return "`" + check_column(name) + "`"


def sql_text(value: str) -> str:
    """A Spark SQL string literal for any text (rule names, table names): quotes and backslashes
    escaped, so the text stays a value however it is spelled."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def gold_column(name: str) -> str:
    """A source column's name in gold: one more leading `_` on a name that starts with `__`.

    Gold's own columns (`__sequence`, `__START_AT`, `__END_AT`, the change feed's `__op`, ...)
    are `__` and a letter; a source may legally name a column `__START_AT` too. Escaped, no
    source name can be one of ours, and `source_column` takes the `_` off again.
    """
    return "_" + name if name.startswith("__") else name


def source_column(name: str) -> str:
    """The source's name of gold column `name` (the inverse of `gold_column`)."""
    return name[1:] if name.startswith("___") else name


GOLD_COLUMN_SQL = "CASE WHEN startswith({0}, '__') THEN concat('_', {0}) ELSE {0} END"  # gold_column in SQL
