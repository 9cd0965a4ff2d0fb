"""The pipeline's query functions run on Spark Connect, as Databricks serverless runs them.

Serverless runs a pipeline's Python through Spark Connect: its client has no JVM, so
`sparkContext`, `_jdf` and `_jvm` are not there, and a query function may not set a session
conf. Two tests hold the definitions to that:

- one runs the whole graph of a conf with one Kafka source of each format (the Debezium one twice,
  once with its native parse) on a local Spark Connect server: the declarations, then every
  query function, with a few real messages per format from a real broker
  (`tests/connect_graph.py` says how); every function must run, and leave the settings as it
  found them;
- one scans, without any server, every module a query function can reach on Databricks for
  those JVM-only calls, so that a regression shows at once.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cdc_medallion.formats import FORMAT_MODULES, format_names, get_format
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.output import generate
from cdc_medallion.services.connect_server import ConnectServer

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "cdc_medallion"


# --- the graph on a Connect server ---------------------------------------------------------------
def connect_conf(folder: Path) -> dict:
    """A generated history in every format, each a Kafka source with its table listed for gold
    (keys and columns, as conf/databricks.yml lists them), and the dumps the broker is fed."""
    history = generate_history(tables=1, transactions=4, seed=3, snapshot_rows=2)
    rendered = generate(history, ["all"], folder / "generated")
    assert sorted(r.format for r in rendered) == sorted(shipped_formats()), "a format without a renderer"
    columns = {t.name: {c.name: c.spark_type for c in t.columns} for t in history.tables}
    sources, tables, dumps = [], [], []
    variants = [(r, r.format.replace("-", "_"), r.options) for r in rendered]
    debezium = next(r for r in rendered if r.format == "debezium-json")
    variants.append((debezium, "debezium_native", {"native_parse": True}))
    for item, name, options in variants:
        lines = item.path.read_text(encoding="utf-8").splitlines()
        prefix = item.format.replace("-", "_")  # the broker gets each dump under topics of its own
        topics = sorted({f"{prefix}.{json.loads(line)['topic']}" for line in lines if line.strip()})
        sources.append(
            {
                "name": name,
                "format": item.format,
                "options": options,
                "kafka": {
                    "bootstrap_servers": "{{conf:cdc_medallion.kafka.bootstrap_servers}}",
                    "subscribe": ",".join(topics),
                },
            }
        )
        for table, keys in item.keys.items():
            tables.append(
                {
                    "source": name,
                    "table": table,
                    "name": f"{name}_{table}",
                    "keys": list(keys),
                    "columns": columns[table],
                }
            )
        if name != "debezium_native":  # the same topics as debezium_json
            dumps.append(
                {"format": item.format, "path": str(item.path), "messages": len(lines), "topic_prefix": prefix}
            )
    conf = {
        "pipeline": {
            "name": "connect",
            "storage": str(folder / "storage"),
            "transformations": str(REPO / "transformations"),
            "expectations": str(REPO / "expectations"),
        },
        "sources": sources,
        "tables": tables,
    }
    path = folder / "connect.yml"
    path.write_text(yaml.safe_dump(conf, sort_keys=False), encoding="utf-8")
    return {"conf": str(path), "dumps": dumps, "sources": sources, "tables": tables}


def shipped_formats() -> list[str]:
    return [name for name in format_names() if get_format(name).__module__.startswith("cdc_medallion.")]


@pytest.mark.slow
@pytest.mark.xdist_group("spark_connect")
def test_every_query_function_runs_on_spark_connect(kafka_broker, tmp_path):
    made = connect_conf(tmp_path)
    manifest = {**made, "bootstrap": kafka_broker.bootstrap_servers, "work": str(tmp_path / "work")}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    # The client is a process of its own: a Connect session turns pyspark's functions into
    # their Connect implementations for the whole process, this one's shared session included.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with ConnectServer(tmp_path / "server") as server:
        run = subprocess.run(
            [sys.executable, "-m", "tests.connect_graph", server.url, str(tmp_path / "manifest.json")],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=1500,
        )
        log = server.log_tail(60)
    assert run.stdout.strip(), f"the client printed nothing:\n{run.stderr[-6000:]}\n--- server:\n{log}"
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    print("seconds per stage:", outcome["seconds"])
    assert outcome["failures"] == {}, "\n\n".join(f"{k}: {v}" for k, v in outcome["failures"].items())
    assert run.returncode == 0, run.stderr[-4000:]
    # A query function on serverless may set no session conf: none changed while they ran.
    assert outcome["conf_changed"] == {}
    counted = outcome["counted"]

    produced = sum(d["messages"] for d in made["dumps"])
    sources = [s["name"] for s in made["sources"]]
    for source in sources:
        bronze = counted[f"bronze_{source}"]
        assert bronze["rows"] > 0, f"{source}: no message read from Kafka"
        silver = counted[f"silver_{source}"]
        assert silver["kinds"].get("change", 0) > 0, f"{source}: no change parsed ({silver['kinds']})"
        checked = counted[f"silver_{source}__checked"]
        assert checked["rows"] == silver["rows"] + counted[f"silver_{source}_quarantine"]["rows"]
        for target in ("silver_heartbeats", "silver_schema_changes"):
            assert f"flow:{target}_from_{source}" in counted
    assert sum(counted[f"bronze_{s}"]["rows"] for s in sources if s != "debezium_native") == produced
    assert counted["bronze_debezium_native"]["rows"] == counted["bronze_debezium_json"]["rows"]
    for table in made["tables"]:
        view = f"changes_{table['name']}"
        assert counted[view]["rows"] > 0, f"{view}: no change of {table['table']} reached gold's view"
        # The auto CDC flows' keys, sequence and conditions, evaluated over their sources.
        # Each flow reads its own private input view of the changes (`<flow>__input`: absent
        # columns filled, one row per change; an SCD2 flow's truncates left out).
        for flow in (f"gold_{table['name']}", f"gold_{table['name']}_history"):
            source = outcome["auto_cdc_sources"][flow]
            rows = counted[source]["rows"]
            passed = counted[source]["passed"]
            assert passed[f"auto_cdc:{flow}:key:id"] == passed[f"auto_cdc:{flow}:sequence_by"] == rows
            if flow.endswith("_history"):
                assert 0 < rows <= counted[view]["rows"], (flow, source, rows)
            else:
                assert rows == counted[view]["rows"], (flow, source, rows)
            assert f"auto_cdc:{flow}:apply_as_deletes" in passed, passed
        assert f"{view}_quarantine" in counted
    # The native parse and the Python parser gave the same silver on Connect, too.
    assert counted["silver_debezium_native"]["kinds"] == counted["silver_debezium_json"]["kinds"]


# --- the static guard ----------------------------------------------------------------------------
#: Attributes only a classic (Py4J) session has, and what a query function on Spark Connect may
#: not call: a conf is read there, never set (`conf.set`), and `rdd` has no Connect counterpart.
JVM_ONLY = frozenset({"sparkContext", "_jvm", "_jdf", "_jsparkSession", "_jsc", "_sc", "rdd"})
#: Functions that may do so because only the local runner calls them, never a query function;
#: each must be referred to from `runner/` alone (checked below).
LOCAL_ONLY = {
    ("cdc_medallion/formats/stateful.py", "planned_in_layout"): "the runner names a checkpoint's state layout",
}


def reachable_modules() -> list[Path]:
    """Every module of the package that `transformations/*.py` import, directly or not, at module
    level or inside a function (their query functions' imports), plus every format module
    (`formats/__init__.py` imports them by name)."""
    pending = sorted((REPO / "transformations").glob("*.py"))
    pending += [PACKAGE / "formats" / f"{name}.py" for name in FORMAT_MODULES]
    seen: set[Path] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported(path):
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                base = REPO.joinpath(*parts[:end])
                for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                    if candidate.is_file():
                        pending.append(candidate)
    return sorted(p for p in seen if PACKAGE in p.parents)


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.split(".")[0] == "cdc_medallion"}


def jvm_only_uses(path: Path) -> list[str]:
    """`path:line: what` for each JVM-only attribute or conf set, outside the LOCAL_ONLY functions."""
    relative = path.relative_to(REPO).as_posix() if REPO in path.parents else path.name
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (relative, node.name) in LOCAL_ONLY:
            allowed.update(id(inner) for inner in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in allowed:
            continue
        conf_set = node.attr in ("set", "unset") and isinstance(node.value, ast.Attribute) and node.value.attr == "conf"
        if node.attr in JVM_ONLY or conf_set:
            found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_a_query_function_reaches_uses_the_jvm():
    modules = reachable_modules()
    names = {p.relative_to(PACKAGE).as_posix() for p in modules}
    # The scan reaches what the query functions run: the layers, every format, the facade.
    assert {"layers/silver.py", "layers/gold.py", "formats/native.py", "formats/stateful.py"} <= names
    assert {"declarative/databricks.py", "runner/expectations.py", "sources/kafka.py"} <= names
    assert not any(name.startswith("runner/local") for name in names)
    found = [use for path in modules for use in jvm_only_uses(path)]
    assert found == [], "JVM-only calls where Databricks serverless (Spark Connect) runs:\n" + "\n".join(found)


def test_the_local_only_functions_are_called_by_the_runner_alone():
    for (module, function), why in LOCAL_ONLY.items():
        assert f"def {function}(" in (REPO / module).read_text(encoding="utf-8"), (module, function, why)
        callers = [
            path.relative_to(REPO).as_posix()
            for path in sorted(PACKAGE.rglob("*.py"))
            if path != REPO / module and function in path.read_text(encoding="utf-8")
        ]
        assert callers and all(c.startswith("cdc_medallion/runner/") for c in callers), (function, callers)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The guard is only worth something if it sees each call it forbids."""
    module = tmp_path / "probe.py"
    module.write_text(
        "def f(df):\n"
        "    df.sparkSession.conf.set('k', 'v')\n"
        "    n = df.sparkSession.sparkContext.defaultParallelism\n"
        "    return df._jdf, df.rdd, df.sparkSession._jvm, n, df.sparkSession.conf.get('k', None)\n",
        encoding="utf-8",
    )
    found = sorted(use.split(": ", 1)[1] for use in jvm_only_uses(module))
    assert found == sorted(
        ["df.sparkSession.conf.set", "df.sparkSession.sparkContext", "df._jdf", "df.rdd", "df.sparkSession._jvm"]
    )
