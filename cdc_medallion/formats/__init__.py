"""Vendor formats, one module each, registered by name (`debezium-json`, ...).

The format modules are listed by name in `FORMAT_MODULES` and imported here; each registers its
`Format` subclass with `@register_format`. A list rather than discovery, so a helper module is
never mistaken for a format and what is registered is written down in one place: a new format is
one new module, its line here and its fixtures (a test fails while the line is missing).
"""

from __future__ import annotations

import importlib

from cdc_medallion.formats.base import Format, ParseError, format_names, get_format, register_format

FORMAT_MODULES = (
    "aws_dms_json",
    "canal_json",
    "dataworks_json",
    "debezium_json",
    "dts_avro",
    "ibm_qrep_delimited",
    "maxwell_json",
    "ogg_json",
    "qlik_json",
    "shareplex_json",
)

for _module in FORMAT_MODULES:
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["FORMAT_MODULES", "Format", "ParseError", "format_names", "get_format", "register_format"]
