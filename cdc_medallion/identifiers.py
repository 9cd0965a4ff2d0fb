"""Validation of names that come from messages or config before they reach SQL, paths or table names.

Source systems can name tables anything; a hostile or broken message must not be able to
escape the storage root (`../../x`) or inject SQL (`t; DROP TABLE y`). We accept a conservative
identifier alphabet and quote everything we put into SQL.
"""

from __future__ import annotations

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


def dataset_name(*parts: str) -> str:
    """Build a dataset name (also a directory name) from safe parts, lower-cased."""
    name = "_".join(p for p in parts if p).lower()
    if not _DATASET.fullmatch(name):
        raise IdentifierError(f"unsafe dataset name {name!r}: use a-z, 0-9 and '_'")
    return name


def dataset_part(name: str) -> str:
    """A source name as a dataset-name part: `Käse$Tab#1` -> `k_se_tab_1` (validated names only)."""
    return _NOT_DATASET_CHARACTER.sub("_", check_identifier(name, "name").lower()).strip("_") or "_"


def quote(name: str) -> str:
    """Backtick-quote a validated identifier for Spark SQL."""
    return "`" + check_identifier(name).replace("`", "``") + "`"


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
