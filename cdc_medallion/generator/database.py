"""Tables of the simulated source database and the values their columns take.

Values are chosen to stress parsers: delimiters, quotes, newlines and non-ASCII text in
strings, NULLs, negative and long decimals, binary data, long values.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
from dataclasses import dataclass
from typing import Any

TRICKY_TEXT = [
    "plain",
    "comma, separated",
    'double "quoted"',
    "single 'quoted'",
    "line\nbreak",
    "tab\tand; semicolon",
    "Ünïcødé — 東京 ✓",
    "trailing space ",
    "",
    "back\\slash",
]


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str  # source type name, e.g. DECIMAL(12,2)
    spark_type: str  # the gold column type

    def value(self, rnd: random.Random, long: bool = False) -> Any:
        kind = self.spark_type
        if kind == "int":
            return rnd.randint(-1_000, 100_000)
        if kind == "bigint":
            return rnd.randint(-(2**40), 2**50)
        if kind.startswith("decimal"):
            scale = int(kind.split(",")[1].rstrip(")"))
            return decimal.Decimal(f"{rnd.randint(-(10**9), 10**9)}E-{scale}")  # exact, not in a 28-digit context
        if kind == "double":
            return round(rnd.uniform(-1e6, 1e6), 6)
        if kind == "boolean":
            return rnd.random() < 0.5
        if kind == "date":
            return dt.date(1990, 1, 1) + dt.timedelta(days=rnd.randint(0, 12_000))
        if kind == "timestamp":
            return dt.datetime(2020, 1, 1) + dt.timedelta(microseconds=rnd.randint(0, 10**14))
        if kind == "binary":
            return bytes(rnd.randint(0, 255) for _ in range(rnd.randint(0, 24)))
        text = rnd.choice(TRICKY_TEXT) + f" #{rnd.randint(0, 999)}"
        return text * 200 if long else text


@dataclass(frozen=True)
class TableSpec:
    schema: str
    name: str
    columns: tuple[Column, ...]
    keys: tuple[str, ...]  # empty: a table without a primary key

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def values(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.name not in self.keys)


def _accounts(name: str) -> TableSpec:
    return TableSpec(
        "app",
        name,
        (
            Column("id", "INTEGER", "int"),
            Column("name", "VARCHAR(200)", "string"),
            Column("balance", "DECIMAL(12,2)", "decimal(12,2)"),
            Column("score", "DOUBLE", "double"),
            Column("active", "BOOLEAN", "boolean"),
            Column("born", "DATE", "date"),
            Column("updated_at", "TIMESTAMP", "timestamp"),
            Column("notes", "CLOB", "string"),
        ),
        ("id",),
    )


def _order_lines(name: str) -> TableSpec:
    return TableSpec(
        "app",
        name,
        (
            Column("order_id", "BIGINT", "bigint"),
            Column("line_no", "INTEGER", "int"),
            Column("sku", "VARCHAR(40)", "string"),
            Column("qty", "INTEGER", "int"),
            Column("price", "DECIMAL(10,3)", "decimal(10,3)"),
            Column("photo", "BLOB", "binary"),
        ),
        ("order_id", "line_no"),
    )


def _audit(name: str) -> TableSpec:
    return TableSpec(
        "app",
        name,
        (Column("event", "VARCHAR(100)", "string"), Column("at", "TIMESTAMP", "timestamp")),
        (),
    )


TEMPLATES = (_accounts, _order_lines, _audit)
ADDED_COLUMN = Column("tier", "VARCHAR(20)", "string")  # added by DDL during the history


def make_tables(count: int) -> list[TableSpec]:
    """`count` tables cycling through the templates: a simple key, a composite key, no key."""
    tables = []
    for index in range(count):
        template = TEMPLATES[index % len(TEMPLATES)]
        base = template.__name__.lstrip("_")
        tables.append(template(base if index < len(TEMPLATES) else f"{base}_{index // len(TEMPLATES)}"))
    return tables
