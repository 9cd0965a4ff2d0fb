"""Vendor formats, one module each, registered by name (`debezium-json`, ...).

A new format is one new module subclassing `Format` plus its fixtures; see `base.py`.
"""

from __future__ import annotations

from cdc_medallion.formats import debezium_json as _debezium_json  # noqa: F401  (registers itself)
from cdc_medallion.formats.base import Format, ParseError, format_names, get_format, register_format

__all__ = ["Format", "ParseError", "format_names", "get_format", "register_format"]
