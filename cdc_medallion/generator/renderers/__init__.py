"""One renderer per format: the same history written with that vendor's conventions.

A renderer writes files under a folder and returns a `RenderedSource`: what a pipeline needs
to read them (format, layout, options) and the tables to key in gold. The renderer modules are
listed by name in `RENDERER_MODULES` and imported here; each registers its renderer with
`@register_renderer`. A list rather than discovery, so helper modules (`kafka_dump`,
`_json_common`) need no exception and a second renderer for one format is an error, not a
silent replacement.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_medallion.formats import FORMAT_MODULES
from cdc_medallion.generator.history import History


@dataclass(frozen=True)
class RenderedSource:
    format: str
    path: Path
    layout: str
    options: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> key columns
    columns: dict[str, dict[str, str]] = field(default_factory=dict)  # table -> column -> SQL type, if needed
    messages: int = 0


Renderer = Callable[[History, Path], RenderedSource]
RENDERERS: dict[str, Renderer] = {}


def _qualified(func: Renderer) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def register_renderer(fmt: str) -> Callable[[Renderer], Renderer]:
    def register(func: Renderer) -> Renderer:
        if fmt in RENDERERS:
            raise ValueError(
                f"renderer for format {fmt!r} registered twice: {_qualified(RENDERERS[fmt])} and {_qualified(func)}"
            )
        RENDERERS[fmt] = func
        return func

    return register


def render(history: History, fmt: str, out: Path) -> RenderedSource:
    if fmt not in RENDERERS:
        raise KeyError(f"no renderer for format {fmt!r} (have: {', '.join(sorted(RENDERERS))})")
    out.mkdir(parents=True, exist_ok=True)
    return RENDERERS[fmt](history, out)


#: One renderer module per format module, of the same name: the formats' list is the one list.
RENDERER_MODULES = FORMAT_MODULES

for _module in RENDERER_MODULES:
    importlib.import_module(f"{__name__}.{_module}")
