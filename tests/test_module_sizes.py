"""The runner's modules stay small enough to read whole: none over 400 lines, no class with more
than 15 methods (issue 71). A module that grows past that is split by concept (as `local.py` was,
into `checkpoints.py`, `queries.py`, `streaming.py` and `results.py`, and `auto_cdc.py` into the
package `auto_cdc/`), not by line count. Modules of the runner's packages count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

RUNNER = Path(__file__).resolve().parent.parent / "cdc_medallion" / "runner"
MAX_LINES = 400
MAX_METHODS = 15


def methods(source: str) -> dict[str, int]:
    """How many methods each class of `source` defines (nested classes counted on their own)."""
    return {
        node.name: sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    }


def test_the_count_sees_methods_of_every_kind():
    source = "class A:\n    def f(self): ...\n    async def g(self): ...\n    @property\n    def h(self): ...\n"
    source += "    x = 1\n    class B:\n        def i(self): ...\n"
    assert methods(source) == {"A": 3, "B": 1}


def test_no_runner_module_is_over_400_lines():
    paths = sorted(RUNNER.rglob("*.py"))
    assert {p.name for p in paths} >= {"local.py", "applier.py"}
    lengths = {str(p.relative_to(RUNNER)): len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    over = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not over, f"runner modules over {MAX_LINES} lines: {over}"


def test_no_runner_class_has_more_than_15_methods():
    over = {
        f"{path.relative_to(RUNNER)}:{name}": count
        for path in sorted(RUNNER.rglob("*.py"))
        for name, count in methods(path.read_text(encoding="utf-8")).items()
        if count > MAX_METHODS
    }
    assert not over, f"runner classes with more than {MAX_METHODS} methods: {over}"
