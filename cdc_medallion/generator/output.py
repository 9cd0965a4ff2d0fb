"""`cdc-medallion generate`: render a history in many formats, with a ready pipeline conf and the truth."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import yaml

from cdc_medallion.generator.history import History
from cdc_medallion.generator.renderers import RENDERERS, RenderedSource, render


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, decimal.Decimal | dt.date | dt.datetime):
        return str(value)
    return value


def write_truth(history: History, path: Path) -> None:
    """Final state and SCD2 versions per keyed table, as JSON a person (or another tool) can read."""
    truth: dict[str, Any] = {}
    for table, versions in history.versions().items():
        truth[table] = {
            "keys": list(history.table(table).keys),
            "final": [{k: _jsonable(v) for k, v in row.items()} for row in history.final_state()[table].values()],
            "versions": [
                {
                    "key": [_jsonable(k) for k in key],
                    "row": {c: _jsonable(v) for c, v in version.row.items()},
                    "open": version.end is None,
                }
                for key, history_of_key in versions.items()
                for version in history_of_key
            ],
        }
    path.write_text(json.dumps(truth, indent=1, ensure_ascii=False), encoding="utf-8")


def generate(history: History, formats: list[str], out: Path) -> list[RenderedSource]:
    """Render `formats` ("all" = every renderer) under `out`, plus conf.yml and truth.json."""
    chosen = sorted(RENDERERS) if formats == ["all"] else formats
    unknown = [f for f in chosen if f not in RENDERERS]
    if unknown:
        raise KeyError(f"no renderer for {unknown} (have: {', '.join(sorted(RENDERERS))})")
    rendered = [render(history, fmt, out / fmt) for fmt in chosen]
    conf = pipeline_conf(rendered, out / "storage")
    (out / "conf.yml").write_text(yaml.safe_dump(conf, sort_keys=False, allow_unicode=True), encoding="utf-8")
    write_truth(history, out / "truth.json")
    return rendered


def pipeline_conf(rendered: list[RenderedSource], storage: Path, name: str = "generated") -> dict[str, Any]:
    """The conf (as YAML-ready data) that runs `rendered` sources into `storage`."""
    sources, tables = [], []
    for item in rendered:
        source = item.format.replace("-", "_")
        sources.append(
            {
                "name": source,
                "format": item.format,
                "options": item.options,
                "input": {"path": str(item.path), "layout": item.layout},
            }
        )
        for table, keys in item.keys.items():
            entry: dict[str, Any] = {"source": source, "table": table, "keys": list(keys), "name": f"{source}_{table}"}
            if item.columns.get(table):
                entry["columns"] = item.columns[table]
            tables.append(entry)
    return {"pipeline": {"name": name, "storage": str(storage)}, "sources": sources, "tables": tables}
