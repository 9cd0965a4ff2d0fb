"""One renderer per format: the same history written with that vendor's conventions.

A renderer writes files under a folder and returns a `RenderedSource`: what a pipeline needs
to read them (format, layout, options) and the tables to key in gold. Renderers register
themselves with `@register_renderer`; every module in this package is imported here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def register_renderer(fmt: str) -> Callable[[Renderer], Renderer]:
    def register(func: Renderer) -> Renderer:
        RENDERERS[fmt] = func
        return func

    return register


def render(history: History, fmt: str, out: Path) -> RenderedSource:
    if fmt not in RENDERERS:
        raise KeyError(f"no renderer for format {fmt!r} (have: {', '.join(sorted(RENDERERS))})")
    out.mkdir(parents=True, exist_ok=True)
    return RENDERERS[fmt](history, out)


for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        importlib.import_module(f"{__name__}.{_module}")
