"""The Jinja environment the quality report's pages render with (`quality/templates/`).

Autoescaping is on for every template: table, column and rule names, reasons and raw messages come
from the data, and a message can hold anything, `<script>` included. An undefined name fails the
render instead of printing as nothing, so a renamed field cannot silently empty a column. The
templates ship inside the package (package data in pyproject.toml): an installed wheel, as in the
Databricks report job, renders without this checkout.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined


def number(value: Any) -> str:
    """A count with thousands separators; nothing for a count that was not reported (None)."""
    if value is None:
        return ""
    return f"{value:,}" if isinstance(value, int) else str(value)


def duration(seconds: float | None) -> str:
    """A lag in the largest unit it fills (days, hours, minutes, seconds)."""
    if seconds is None:
        return "–"
    seconds = float(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.1f} s"


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("cdc_medallion.quality", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(num=number, duration=duration)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
