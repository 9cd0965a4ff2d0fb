"""Vendor formats, one module each, registered by name (`debezium-json`, ...).

Every module in this package except the shared ones is imported here, and each registers its
`Format` subclass with `@register_format`: a new format is one new module plus its fixtures.
"""

from __future__ import annotations

import importlib
import pkgutil

from cdc_medallion.formats.base import Format, ParseError, format_names, get_format, register_format

_SHARED = {"base", "message", "values", "json_common", "masks"}  # helpers, not formats

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in _SHARED and not _module.startswith("_"):
        importlib.import_module(f"{__name__}.{_module}")

__all__ = ["Format", "ParseError", "format_names", "get_format", "register_format"]
