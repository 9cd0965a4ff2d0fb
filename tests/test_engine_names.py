"""Every name the engine owns is spelled in `cdc_medallion/names.py` only.

Dataset names, side tables, storage folders and gold's bookkeeping columns are read by the local
runner, the Databricks graph, the quality step and the JVM-free readers alike; a second spelling
is a name that can drift from the first. The test reads every module's string literals (f-strings'
text included, docstrings and comments left out) and fails on one that spells such a name.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cdc_medallion"
OWNER = PACKAGE / "names.py"
#: Spelled whole: folders, suffixes, side tables and columns.
WHOLE = {
    "__START_AT",
    "__END_AT",
    "__sequence",
    "_checkpoints",
    "_state",
    "_system",
    "_lock",
    "event_log",
    "_history",
    "_quarantine",
    "__checked",
    "__input",
    "__stale",
    "failed_expectations",
    "silver_schema_changes",
    "silver_heartbeats",
}
#: A dataset name's layer prefix, as the start of a literal (`f"silver_{source}"`).
PREFIXES = ("bronze_", "silver_", "gold_")
#: Not a dataset name: the change model's column `bronze_ref` (`model.py`), and names derived from it.
ALLOWED = "bronze_ref"


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def spelled_names(path: Path) -> list[str]:
    """`file:line: text` for each literal of `path` that spells an engine-owned name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
            continue
        text = node.value
        pieces = {text, *text.split("/")}
        if pieces & WHOLE or (text.startswith(PREFIXES) and not text.startswith(ALLOWED)):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {text!r}")
    return found


def test_engine_owned_names_are_spelled_in_one_module():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != OWNER for hit in spelled_names(path)]
    assert not found, "engine-owned names spelled outside names.py:\n" + "\n".join(found)


def test_the_check_finds_a_second_spelling(tmp_path):
    module = tmp_path / "cdc_medallion" / "elsewhere.py"
    module.parent.mkdir()
    module.write_text('"""A docstring may say _checkpoints."""\nX = f"{root}/_checkpoints"\nY = "silver_" + s\n')
    global PACKAGE
    saved, PACKAGE = PACKAGE, module.parent
    try:
        assert [hit.split(": ", 1)[1] for hit in spelled_names(module)] == ["'/_checkpoints'", "'silver_'"]
    finally:
        PACKAGE = saved
