"""On Databricks the facade hands Lakeflow the same graph the local runner runs.

`pyspark.pipelines` (Databricks' module) and `dlt` are replaced by the recording stand-ins of
`tests/databricks_standins.py`, as strict as the runtime (each rule names its source there): every
decorator returns a new object and only that object carries what was declared; each comes also
as `(*args, **kwargs)` wrappers, whose signatures say nothing. `transformations/` is then
executed as Lakeflow does — each file run with no local registry active and the conf path in the
Spark conf key `cdc_medallion.conf`, and, as a warm interpreter may, more than once — and the
recorded graph, read back (the quarantine pattern and each auto CDC flow's input view folded into
what they implement), must equal `load_graph(conf)` for the same conf. Its query functions then
run under a recording reader (`tests/databricks_graph_run.py`): every name they read is a dataset.
"""

from __future__ import annotations

import base64
import inspect
import json
import re
import runpy
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql.types import StructType

from cdc_medallion import dp
from cdc_medallion.config import SPARK_CONF_KEY, SourceConf, load_conf, parse_source
from cdc_medallion.declarative import databricks
from cdc_medallion.declarative.constraints import null_safe
from cdc_medallion.declarative.definitions import Action, AutoCdcFlow, DatasetKind, Flow
from cdc_medallion.declarative.runtime import reading_with
from cdc_medallion.errors import ConfigError, GraphError
from cdc_medallion.formats import format_names
from cdc_medallion.model import BRONZE_SCHEMA, EVENT_SCHEMA
from cdc_medallion.quality.rules import load_rules
from cdc_medallion.runner.graph import Graph, load_graph, transformation_files
from cdc_medallion.sources.kafka import kafka_options, parse_kafka, to_bronze
from cdc_medallion.sources.kafka_settings import DEFAULT_MAX_OFFSETS_PER_TRIGGER
from tests.databricks_graph_run import GraphRun
from tests.databricks_standins import STANDINS, Recorder, pipelines_standin

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(params=sorted(STANDINS))
def standin(request, monkeypatch) -> tuple[str, Recorder]:
    """A recording stand-in installed in sys.modules as Databricks would provide it."""
    return install(request.param, monkeypatch)


def install(variant: str, monkeypatch) -> tuple[str, Recorder]:
    recorder = Recorder()
    standin = STANDINS[variant]
    monkeypatch.setitem(sys.modules, standin.module, standin.make(recorder))
    if standin.module == "dlt":  # an older runtime: pyspark.pipelines is Apache Spark's (no expectations)
        import pyspark.pipelines as oss

        monkeypatch.setitem(sys.modules, "pyspark.pipelines", oss)
    return standin.module, recorder


# --- reading a recorded graph back -----------------------------------------------------------
NATIVE_ACTION = {"expect": Action.WARN, "expect_or_drop": Action.DROP, "expect_or_fail": Action.FAIL}
_NULL_SAFE = re.compile(r"^COALESCE\(\(\n(.*)\n\), FALSE\)$", re.DOTALL)


def _unwrap_constraint(constraint: str) -> str:
    match = _NULL_SAFE.match(constraint)
    assert match and null_safe(match.group(1)) == constraint, f"native constraint {constraint!r} is not null_safe's"
    return match.group(1)


class _Read(Exception):
    """Raised by `first_read`'s reader: the name a query function reads first."""


class _Probe:
    def read(self, name: str):
        raise _Read(name)

    read_stream = read


def first_read(query: Any) -> str:
    """The dataset a query function reads (its first read), without running anything else."""
    with reading_with(_Probe()):
        try:
            query()
        except _Read as read:
            return read.args[0]
    raise AssertionError(f"{query} reads no dataset")


def _code(func: Any) -> Any:
    return inspect.unwrap(func).__code__ if func is not None else None


def _expectations(items: list[tuple[str, str, str]], action: dict[str, Action]) -> dict[str, tuple[str, Action]]:
    return {name: (_unwrap_constraint(constraint), action[kind]) for kind, name, constraint in items}


def _schema(schema: Any) -> Any:
    return schema.json() if isinstance(schema, StructType) else schema


def _dataset_entry(api: str, options: dict[str, Any], query: Any, expectations: dict[str, tuple[str, Action]]) -> dict:
    return {
        "api": api,
        "comment": options.get("comment"),
        "table_properties": dict(options.get("table_properties") or {}),
        "partition_cols": list(options.get("partition_cols") or []),
        "cluster_by": list(options.get("cluster_by") or []),
        "schema": _schema(options.get("schema")),
        "spark_conf": dict(options.get("spark_conf") or {}),
        "expectations": expectations,
        "query": _code(query),
    }


def recorded_graph(recorder: Recorder, flavor: str) -> tuple[dict, dict]:
    """The recorded calls as a logical graph: quarantine patterns folded back into their dataset,
    auto CDC flows pointed back from their `<flow>__input` view to the dataset it reads."""
    datasets = dict(recorder.datasets)
    logical: dict[str, dict] = {}
    inputs = {}  # `<flow>__input` view -> the dataset it reads
    for flow in recorder.flows.values():
        name = flow.options.get("source")
        if isinstance(name, str) and name.endswith(databricks.INPUT_SUFFIX) and name in datasets:
            view = datasets.pop(name)
            assert view.api in ("temporary_view", "view") and not view.expectations, view
            inputs[name] = first_read(view.query)
    for twin_name in [n for n in datasets if n.endswith("__checked")]:
        base = twin_name.removesuffix("__checked")
        twin, valid, quarantine = datasets.pop(twin_name), datasets.pop(base), datasets.pop(f"{base}_quarantine")
        private = "private" if flavor == "pyspark.pipelines" else "temporary"
        assert twin.options.get(private) is True or twin.api in ("temporary_view", "view"), twin
        assert twin.api == valid.api, (twin.api, valid.api)
        if twin.api not in ("temporary_view", "view"):
            assert twin.options["partition_cols"] == ["__quarantined"]
        assert quarantine.options["table_properties"] == {"layer": "quarantine", "quarantine_of": base}
        assert quarantine.api in ("table", "materialized_view") and not quarantine.expectations
        rules = _expectations(twin.expectations, {"expect": Action.QUARANTINE, "expect_or_fail": Action.FAIL})
        rules.update(_expectations(valid.expectations, NATIVE_ACTION))
        logical[base] = _dataset_entry(valid.api, valid.options, twin.query, rules)
    for name, recorded in datasets.items():
        logical[name] = _dataset_entry(
            recorded.api, recorded.options, recorded.query, _expectations(recorded.expectations, NATIVE_ACTION)
        )
    flows: dict[str, dict] = {}
    for name, recorded in recorder.flows.items():
        options = recorded.options
        if recorded.api == "append_flow":
            flows[name] = {
                "type": "append",
                "target": options["target"],
                "once": options["once"],
                "comment": options["comment"],
                "spark_conf": dict(options["spark_conf"] or {}),
                "query": _code(recorded.query),
            }
        else:
            assert int(options["stored_as_scd_type"]) == 1 or options["apply_as_truncates"] is None, name
            flows[name] = {
                "type": "auto_cdc",
                **{k: options[k] for k in AUTO_CDC_KEYS},
                "source": inputs.get(options["source"], options["source"]),
                "reads_input_view": options["source"] in inputs,
                "keys": list(options["keys"]),
                "ignore_null_updates": bool(options["ignore_null_updates"]),
                "stored_as_scd_type": int(options["stored_as_scd_type"]),
            }
    for name, entry in logical.items():  # a streaming table defined by its query has an implicit flow
        if entry["api"] == "table" and entry["query"] is not None:
            flows[name] = {
                "type": "append",
                "target": name,
                "once": False,
                "comment": entry["comment"],
                "spark_conf": {},
                "query": entry["query"],
            }
            entry["query"] = None
    return logical, flows


AUTO_CDC_KEYS = (
    "target",
    "source",
    "sequence_by",
    "apply_as_deletes",
    "apply_as_truncates",
    "column_list",
    "except_column_list",
    "track_history_column_list",
    "track_history_except_column_list",
    "once",
)


def local_graph(graph: Graph, flavor: str) -> tuple[dict, dict]:
    """The local runner's graph in the same shape, with the documented translations applied."""
    apis = {
        DatasetKind.MATERIALIZED_VIEW: "materialized_view" if flavor == "pyspark.pipelines" else "table",
        DatasetKind.TEMPORARY_VIEW: "temporary_view" if flavor == "pyspark.pipelines" else "view",
    }
    datasets = {}
    for name, dataset in graph.datasets.items():
        if dataset.kind is DatasetKind.STREAMING_TABLE:
            implicit = graph.flows.get(name)
            api = "table" if isinstance(implicit, Flow) and implicit.target == name else "create_streaming_table"
        else:
            api = apis[dataset.kind]
        options = {
            "comment": dataset.comment,
            "table_properties": dataset.table_properties,
            "partition_cols": list(dataset.partition_cols),
            "cluster_by": list(dataset.cluster_by),
            "schema": dataset.schema,
            "spark_conf": dataset.spark_conf,
        }
        expectations = {e.name: (e.constraint, e.action) for e in dataset.expectations}
        datasets[name] = _dataset_entry(api, options, dataset.query, expectations)
    flows = {}
    for name, flow in graph.flows.items():
        if isinstance(flow, AutoCdcFlow):
            flows[name] = {
                "type": "auto_cdc",
                "target": flow.target,
                "source": flow.source,
                "sequence_by": flow.sequence_by,
                "apply_as_deletes": flow.apply_as_deletes,
                # Databricks: SCD type 1 only; SCD2 reads its source without truncates instead
                "apply_as_truncates": flow.apply_as_truncates if flow.stored_as_scd_type == 1 else None,
                "column_list": list(flow.column_list) if flow.column_list is not None else None,
                "except_column_list": list(flow.except_column_list) if flow.except_column_list is not None else None,
                "track_history_column_list": list(flow.track_history_column_list or []) or None,
                "track_history_except_column_list": list(flow.track_history_except_column_list or []) or None,
                "once": flow.once,
                "keys": list(flow.keys),
                # Databricks takes partial images filled, and SCD2 without truncates, from `<flow>__input`
                "reads_input_view": flow.present_columns_column is not None
                or (flow.stored_as_scd_type == 2 and flow.apply_as_truncates is not None),
                "ignore_null_updates": flow.ignore_null_updates,
                "stored_as_scd_type": flow.stored_as_scd_type,
            }
        else:
            flows[name] = {
                "type": "append",
                "target": flow.target,
                "once": flow.once,
                "comment": flow.comment,
                "spark_conf": dict(flow.spark_conf),
                "query": _code(flow.query),
            }
    return datasets, flows


def run_as_databricks(spark: Any, conf_path: Path, monkeypatch) -> None:
    """What Lakeflow does: the conf path in the pipeline configuration, each source file executed.
    Nothing is reset first: the facade must give a runtime the same graph every evaluation."""
    spark.conf.set(SPARK_CONF_KEY, str(conf_path))
    try:
        conf = load_conf(conf_path)
        assert conf.transformations is not None
        for file in transformation_files(conf.transformations):
            runpy.run_path(str(file), run_name=f"lakeflow.{file.stem}")
    finally:
        spark.conf.unset(SPARK_CONF_KEY)


# --- the confs ---------------------------------------------------------------------------------
def every_format_conf(tmp_path: Path) -> Path:
    """One Kafka source per registered format, each with a gold table (keys, columns, history)."""
    sources, tables = [], []
    for index, fmt in enumerate(format_names()):
        name = f"src_{fmt.replace('-', '_')}"
        sources.append(
            {
                "name": name,
                "format": fmt,
                "topic": f"{fmt}.events",
                "kafka": {
                    "bootstrap_servers": "{{conf:cdc_medallion.kafka.bootstrap_servers}}",
                    "subscribe_pattern": f"{fmt}\\..*",
                },
            }
        )
        tables.append(
            {
                "source": name,
                "table": f"app.items_{index}",
                "name": f"items_{index}",
                "keys": ["id"],
                "columns": {"id": "BIGINT", "label": "VARCHAR(40)", "price": "DECIMAL(9,2)", "updated": "TIMESTAMP"},
                "track_history_except": ["updated"] if index % 2 else [],
            }
        )
    conf = {
        "pipeline": {
            "name": "every_format",
            "storage": str(tmp_path / "storage"),
            "transformations": str(REPO / "transformations"),
            "expectations": str(REPO / "expectations"),
        },
        "sources": sources,
        "tables": tables,
    }
    path = tmp_path / "every_format.yml"
    path.write_text(yaml.safe_dump(conf, sort_keys=False), encoding="utf-8")
    return path


def _conf_path(which: str, tmp_path: Path) -> Path:
    return every_format_conf(tmp_path) if which == "every-format" else REPO / "conf" / which


# --- the same graph ----------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["every-format", "databricks.yml", "local.yml"])
def test_databricks_declares_the_local_graph(spark, standin, which, tmp_path, monkeypatch):
    flavor, recorder = standin
    path = _conf_path(which, tmp_path)
    expected = local_graph(load_graph(load_conf(path)), flavor)

    run_as_databricks(spark, path, monkeypatch)
    recorded = recorded_graph(recorder, flavor)

    assert sorted(recorded[0]) == sorted(expected[0])
    assert sorted(recorded[1]) == sorted(expected[1])
    for name in expected[0]:
        assert recorded[0][name] == expected[0][name], name
    for name in expected[1]:
        assert recorded[1][name] == expected[1][name], name
    conf = load_conf(path)
    if which != "local.yml":  # local.yml lists no columns (discovered locally), so it has no gold
        gold = [f for f in expected[1].values() if f["type"] == "auto_cdc"]
        assert len(gold) == 2 * len(conf.tables), "an SCD1 and an SCD2 flow per table"
        assert {f["stored_as_scd_type"] for f in gold} == {1, 2}
        # partial images are filled in each flow's input view: no flow ignores NULLs (explicit ones are values)
        assert not any(f["ignore_null_updates"] for f in gold) and all(f["reads_input_view"] for f in gold)
    if which == "every-format":
        formats = {d["table_properties"].get("format") for d in expected[0].values()}
        assert set(format_names()) <= formats
    # every quarantine rule has its quarantine table on Databricks, as locally
    quarantined = [
        n for n, d in expected[0].items() if any(a is Action.QUARANTINE for _, a in d["expectations"].values())
    ]
    assert quarantined and all(f"{n}_quarantine" in recorder.datasets for n in quarantined)


@pytest.mark.parametrize("which", ["every-format", "databricks.yml"])
def test_a_second_evaluation_in_a_warm_interpreter_declares_the_same_graph(
    spark, standin, which, tmp_path, monkeypatch
):
    """The runtime may evaluate the pipeline's files again in the interpreter that ran them: the
    API module is the same object, the graph a new one, and nothing of ours is reset between."""
    flavor, recorder = standin
    path = _conf_path(which, tmp_path)
    run_as_databricks(spark, path, monkeypatch)
    first = Recorder()
    first.datasets, first.flows = dict(recorder.datasets), dict(recorder.flows)
    recorder.datasets.clear()
    recorder.flows.clear()

    run_as_databricks(spark, path, monkeypatch)
    assert sorted(recorder.datasets) == sorted(first.datasets)
    assert sorted(recorder.flows) == sorted(first.flows)
    for name, flow in first.flows.items():
        assert recorder.flows[name].options.get("source") == flow.options.get("source"), name
    assert recorded_graph(recorder, flavor) == recorded_graph(first, flavor)


# Each run is tens of seconds of analysis (every gold view of every format): two variants, not all.
@pytest.mark.parametrize(
    ("variant", "which"), [("pyspark.pipelines", "every-format"), ("dlt-wrapped", "databricks.yml")]
)
def test_every_recorded_query_runs_and_reads_datasets_of_the_graph(spark, variant, which, tmp_path, monkeypatch):
    """Each query function and flow of the recorded graph, run under a recording reader over
    real (empty) DataFrames: every name read is a dataset, every auto CDC source, target, key,
    sequence and column list exists, every constraint parses (`GraphRun` checks each)."""
    _, recorder = install(variant, monkeypatch)
    run_as_databricks(spark, _conf_path(which, tmp_path), monkeypatch)
    bronze = {n: spark.createDataFrame([], BRONZE_SCHEMA) for n in recorder.datasets if n.startswith("bronze_")}
    run = GraphRun(recorder, spark, bronze, execute=False)
    run.run_all()
    queries = {n for n, d in recorder.datasets.items() if d.query is not None and n not in bronze}
    assert set(run.reads) == queries | set(recorder.flows)
    cdc = [n for n, f in recorder.flows.items() if f.api in ("create_auto_cdc_flow", "apply_changes")]
    assert cdc and all(run.reads[n] == [recorder.flows[n].options["source"]] for n in cdc)
    for name in cdc:  # each gold flow's input view reads the table's typed change feed
        [view_read] = run.reads[recorder.flows[name].options["source"]]
        assert view_read.startswith("changes_") and recorder.datasets[view_read].api in ("temporary_view", "view")


def test_silver_quarantine_pattern_calls(spark, standin, tmp_path, monkeypatch):
    """The exact calls for one silver table: twin, valid table, quarantine table."""
    flavor, recorder = standin
    run_as_databricks(spark, REPO / "conf" / "databricks.yml", monkeypatch)
    twin, silver, quarantine = (
        recorder.datasets[n] for n in ("silver_shop__checked", "silver_shop", "silver_shop_quarantine")
    )
    assert (twin.api, silver.api, quarantine.api) == ("table", "table", "table")
    assert twin.options["private" if flavor == "pyspark.pipelines" else "temporary"] is True
    assert silver.options.get("private", False) is False and silver.options.get("temporary", False) is False
    rules = load_rules(REPO / "expectations", "silver", "debezium-json", EVENT_SCHEMA)
    on_twin = {e.name for e in rules if e.action in (Action.QUARANTINE, Action.FAIL)}
    on_table = {e.name for e in rules if e.action in (Action.WARN, Action.DROP)}
    assert {name for _, name, _ in twin.expectations} == on_twin and on_table
    assert {name for _, name, _ in silver.expectations} == on_table
    assert ("expect", "message_parsed", null_safe("error IS NULL")) in twin.expectations
    assert silver.options["schema"] is not None and twin.options["schema"] is None


def test_quarantine_pattern_splits_rows(spark, monkeypatch):
    """Running the recorded query functions: the twin flags, the valid and quarantine sets split."""
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "pyspark.pipelines", pipelines_standin(recorder))
    raw = spark.createDataFrame([(1, 5), (2, -1), (None, 3), (4, None)], "id INT, amount INT")

    @dp.materialized_view(name="orders_clean", comment="clean orders")
    @dp.expect_or_quarantine("id_present", "id IS NOT NULL")
    @dp.expect_or_quarantine("amount_known", "amount > -100")  # NULL amount -> NULL -> failed
    @dp.expect_or_drop("positive", "amount > 0")
    @dp.expect("small", "amount < 100")
    def orders():
        return dp.read("orders_raw")

    twin = recorder.datasets["orders_clean__checked"]
    assert twin.api == "materialized_view" and twin.options["private"] is True
    assert [(k, n) for k, n, _ in twin.expectations] == [("expect", "id_present"), ("expect", "amount_known")]
    assert [(k, n) for k, n, _ in recorder.datasets["orders_clean"].expectations] == [
        ("expect_or_drop", "positive"),
        ("expect", "small"),
    ]

    class Tables:
        def __init__(self) -> None:
            self.tables = {"orders_raw": raw}

        def read(self, name):
            return self.tables[name]

        read_stream = read

    tables = Tables()
    with reading_with(tables):
        tables.tables["orders_clean__checked"] = recorder.datasets["orders_clean__checked"].query()
        valid = recorder.datasets["orders_clean"].query()
        quarantine = recorder.datasets["orders_clean_quarantine"].query()
    assert valid.columns == ["id", "amount"]
    assert sorted(r["id"] for r in valid.collect()) == [1, 2]  # `positive` is dropped natively
    rows = {r["id"]: r["failed_expectations"] for r in quarantine.collect()}
    assert rows == {None: ["id_present"], 4: ["amount_known", "positive", "small"]}


def test_quarantine_on_a_table_fed_by_append_flows(monkeypatch):
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "pyspark.pipelines", pipelines_standin(recorder))
    dp.create_streaming_table("events", comment="all events", expect_all_or_quarantine={"k": "k IS NOT NULL"})

    @dp.append_flow(target="events", name="events_from_a")
    def from_a():
        return None

    twin = recorder.datasets["events__checked"]
    assert twin.api == "create_streaming_table" and twin.options["private"] is True
    assert twin.expectations == [("expect", "k", null_safe("k IS NOT NULL"))]
    assert recorder.flows["events_from_a"].options["target"] == "events__checked"
    assert inspect.unwrap(recorder.flows["events_from_a"].query) is from_a
    assert recorder.datasets["events"].api == "table" and "events_quarantine" in recorder.datasets
    with pytest.raises(GraphError, match="quarantine expectations"):
        dp.create_auto_cdc_flow(target="events", source="x", keys=["k"], sequence_by="s")


def test_auto_cdc_arguments_on_both_apis(spark, standin):
    from pyspark.sql import functions as F

    flavor, recorder = standin
    sequence, deletes = F.struct("__ts", "__seq"), F.expr("__op = 'DELETE'")  # Columns work as well as SQL text
    dp.create_streaming_table("gold_t")
    dp.create_auto_cdc_flow(
        target="gold_t",
        source="changes_t",
        keys=["id"],
        sequence_by=sequence,
        apply_as_deletes=deletes,
        apply_as_truncates="__op = 'TRUNCATE'",
        except_column_list=["__op", "__seq"],
        stored_as_scd_type=2,
        track_history_except_column_list=["ts"],
        name="gold_t_flow",
        present_columns_column="__present",
    )
    flow = recorder.flows["gold_t_flow"]
    assert flow.api == ("create_auto_cdc_flow" if flavor == "pyspark.pipelines" else "apply_changes")
    assert not flow.options["ignore_null_updates"]  # partial images are filled in the input view instead
    assert flow.options["stored_as_scd_type"] == 2 and flow.options["keys"] == ["id"]
    assert flow.options["track_history_except_column_list"] == ["ts"]
    assert flow.options["sequence_by"] is sequence and flow.options["apply_as_deletes"] is deletes
    # Databricks applies truncates to SCD type 1 only: the SCD2 flow reads its source without them
    assert flow.options["apply_as_truncates"] is None
    assert flow.options["source"] == "gold_t_flow__input"
    view = recorder.datasets["gold_t_flow__input"]
    assert view.api == ("temporary_view" if flavor == "pyspark.pipelines" else "view")
    assert first_read(view.query) == "changes_t"


def test_expectations_reach_the_dataset(standin):
    """Each native expectation decorator's result is what the dataset decorator receives."""
    _, recorder = standin

    @dp.table(name="orders")
    @dp.expect("amount_known", "amount IS NOT NULL")
    @dp.expect_or_drop("positive", "amount > 0")
    @dp.expect_all_or_fail({"id_present": "id IS NOT NULL"})
    def orders():
        return None

    assert recorder.datasets["orders"].expectations == [
        ("expect", "amount_known", null_safe("amount IS NOT NULL")),
        ("expect_or_drop", "positive", null_safe("amount > 0")),
        ("expect_or_fail", "id_present", null_safe("id IS NOT NULL")),
    ]


def test_truncates_leave_scd2_history_alone_on_databricks(spark, monkeypatch):
    """SCD1 gets the truncate condition; SCD2 reads every event but the truncates (never fails)."""
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "pyspark.pipelines", pipelines_standin(recorder))
    common = {"source": "changes_t", "keys": ["id"], "sequence_by": "seq", "apply_as_truncates": "op = 'TRUNCATE'"}
    dp.create_streaming_table("gold_t")
    dp.create_auto_cdc_flow(target="gold_t", stored_as_scd_type=1, **common)
    dp.create_streaming_table("gold_t_history")
    dp.create_auto_cdc_flow(target="gold_t_history", stored_as_scd_type=2, **common)
    dp.create_streaming_table("gold_t_history2")
    dp.create_auto_cdc_flow(target="gold_t_history2", stored_as_scd_type=2, **common)  # a view of its own

    assert recorder.flows["gold_t"].options["apply_as_truncates"] == "op = 'TRUNCATE'"
    assert recorder.flows["gold_t"].options["source"] == "changes_t"
    for name in ("gold_t_history", "gold_t_history2"):
        assert recorder.flows[name].options["apply_as_truncates"] is None
        assert recorder.flows[name].options["source"] == f"{name}__input"
    events = spark.createDataFrame(
        [(1, "INSERT", "a"), (2, "UPDATE", "b"), (None, "TRUNCATE", "c"), (3, None, "d")],
        "id INT, op STRING, seq STRING",
    )

    class Tables:
        def read_stream(self, name):
            assert name == "changes_t"
            return events

        read = read_stream

    with reading_with(Tables()):
        kept = recorder.datasets["gold_t_history__input"].query()
    assert sorted(r["seq"] for r in kept.collect()) == ["a", "b", "d"]  # a NULL op is not a truncate


def test_what_databricks_cannot_take_is_an_error(standin):
    flavor, _ = standin

    def expectation_above():
        @dp.expect("late", "x > 0")
        @dp.table(name="t")
        def t():
            return None

    with pytest.raises(GraphError, match="below @table"):
        expectation_above()
    if flavor == "pyspark.pipelines":  # Databricks' temporary_view takes no spark_conf
        with pytest.raises(GraphError, match="spark_conf"):
            dp.temporary_view(name="v", spark_conf={"a": "b"})(lambda: None)


def test_importable_pipelines_module_is_not_databricks(monkeypatch):
    """pyspark 4.2 ships Apache Spark's pyspark.pipelines: importable, but not the Databricks API."""
    import pyspark.pipelines as oss

    assert not databricks.is_databricks_api(oss)
    dlthub = types.ModuleType("dlt")  # dltHub's `dlt` on PyPI: a different API altogether
    dlthub.pipeline = dlthub.source = dlthub.resource = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, "dlt", dlthub)
    assert databricks.find_pipelines_module() is None
    with pytest.raises(GraphError, match="no active pipeline registry"):
        dp.create_streaming_table("x")
    stub = pipelines_standin(Recorder())
    monkeypatch.setitem(sys.modules, "pyspark.pipelines", stub)
    assert databricks.find_pipelines_module() is stub


# --- Kafka bronze --------------------------------------------------------------------------------
def _source(kafka: dict, topic: str | None = None) -> SourceConf:
    """A source as the conf loader reads one (an empty `kafka` block: none)."""
    raw = {"name": "shop", "format": "debezium-json", "topic": topic, **({"kafka": kafka} if kafka else {})}
    return parse_source("conf.yml", raw, "sources[0]")


CONF = {
    "cred": "msk-reader",
    "cdc_medallion.kafka.bootstrap_servers": "b1:9096,b2:9096",
    "cdc_medallion.secret_scope": "kafka-prod",
    "cdc_medallion.kafka.topics.shop": "shop\\.public\\..*",
}
SECRETS = {("kafka-prod", "kafka-username"): "svc-cdc", ("kafka-prod", "kafka-password"): 'p"w\\d', ("tls", "ts"): "t"}


def _options(kafka: dict, shaded: bool = True, topic: str | None = None) -> dict[str, str]:
    return kafka_options(_source(kafka, topic), CONF.get, lambda s, k: SECRETS[(s, k)], shaded=shaded)


def test_kafka_options_resolve_references():
    options = _options(
        {
            "bootstrap_servers": "{{conf:cdc_medallion.kafka.bootstrap_servers}}",
            "subscribe_pattern": "{{conf:cdc_medallion.kafka.topics.shop}}",
            "starting_offsets": "latest",
            "max_offsets_per_trigger": 5000,
            "fail_on_data_loss": False,
            "security_protocol": "SASL_SSL",
            "secret_scope": "{{conf:cdc_medallion.secret_scope}}",
            "sasl": {
                "mechanism": "SCRAM-SHA-512",
                "username": {"secret": "kafka-username"},
                "password": {"secret": "kafka-password"},
            },
            "options": {"kafka.ssl.truststore.password": "{{secrets/tls/ts}}"},
        }
    )
    assert options == {
        "kafka.bootstrap.servers": "b1:9096,b2:9096",
        "subscribePattern": "shop\\.public\\..*",
        "startingOffsets": "latest",
        "includeHeaders": "true",
        "maxOffsetsPerTrigger": "5000",
        "failOnDataLoss": "false",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "kafkashaded.org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="svc-cdc" password="p\\"w\\\\d";',
        "kafka.ssl.truststore.password": "t",
    }


def test_kafka_options_plain_unshaded_msk_iam_and_topic_default():
    plain = _options(
        {
            "bootstrap_servers": "b:9092",
            "sasl": {"mechanism": "PLAIN", "username": "u", "password": "{{secrets/tls/ts}}"},
        },
        shaded=False,
        topic="shop.events",
    )
    assert plain["subscribe"] == "shop.events"
    assert plain["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="t";'
    )
    iam = _options({"bootstrap_servers": "b:9098", "subscribe": "t", "sasl": {"mechanism": "AWS_MSK_IAM"}})
    assert iam["kafka.sasl.jaas.config"].startswith("shadedmskiam.software.amazon.msk.auth.iam.IAMLoginModule")
    assert "kafka.sasl.client.callback.handler.class" in iam


def test_msk_iam_through_a_unity_catalog_service_credential():
    """`service_credential` becomes `databricks.serviceCredential`, with no SASL options at all."""
    options = _options(
        {
            "bootstrap_servers": "b-1.msk:9098",
            "subscribe_pattern": "{{conf:cdc_medallion.kafka.topics.shop}}",
            "service_credential": "msk-reader",
            "options": {"databricks.serviceCredential.scope": "https://msk.example/.default"},
        }
    )
    assert options == {
        "kafka.bootstrap.servers": "b-1.msk:9098",
        "subscribePattern": "shop\\.public\\..*",
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        "maxOffsetsPerTrigger": str(DEFAULT_MAX_OFFSETS_PER_TRIGGER),  # none set: the default bounds it
        "databricks.serviceCredential": "msk-reader",
        "databricks.serviceCredential.scope": "https://msk.example/.default",
    }
    referenced = _options(
        {"bootstrap_servers": "b", "subscribe": "t", "service_credential": "{{conf:cred}}"}, topic=None
    )
    assert referenced["databricks.serviceCredential"] == "msk-reader"  # a {{conf:}} reference, resolved


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        (
            {
                "bootstrap_servers": "b",
                "subscribe": "t",
                "service_credential": "c",
                "sasl": {"mechanism": "AWS_MSK_IAM"},
            },
            "either service_credential or sasl",
        ),
        (
            {"bootstrap_servers": "b", "subscribe": "t", "service_credential": "c", "security_protocol": "SASL_SSL"},
            "either service_credential",
        ),
        ({"bootstrap_servers": "b", "subscribe": "t", "service_credential": ""}, "service credential"),
        ({"bootstrap_servers": "b", "subscribe": "t", "service_credential": {"secret": "x"}}, "service credential"),
        (
            {"bootstrap_servers": "b", "subscribe": "t", "options": {"databricks.serviceCredential": "c"}},
            "use kafka.service_credential",
        ),
        (
            {
                "bootstrap_servers": "b",
                "subscribe": "t",
                "sasl": {"mechanism": "PLAIN", "username": "u", "password": "hunter2"},
            },
            "sasl.password",
        ),
        (
            {"bootstrap_servers": "b", "subscribe": "t", "options": {"kafka.ssl.key.password": "hunter2"}},
            "holds a secret",
        ),
        (
            {
                "bootstrap_servers": "b",
                "subscribe": "t",
                "options": {"kafka.sasl.jaas.config": 'x password="hunter2";'},
            },
            "literal password",
        ),
        ({"bootstrap_servers": "b", "subscribe": "t", "topics": "x"}, "unknown key"),
        ({"bootstrap_servers": "b", "subscribe": "t", "subscribe_pattern": "x"}, "not several"),
        ({"subscribe": "t"}, "bootstrap_servers"),
        ({"bootstrap_servers": "b"}, "kafka.subscribe"),
        ({"bootstrap_servers": "b", "subscribe": "t", "security_protocol": "SASL"}, "security_protocol"),
        ({"bootstrap_servers": "b", "subscribe": "t", "sasl": {"mechanism": "GSSAPI"}}, "sasl.mechanism"),
        ({"bootstrap_servers": "b", "subscribe": "t", "options": {"includeHeaders": "false"}}, "set by cdc-medallion"),
        ({}, "no 'kafka' settings"),
    ],
)
def test_kafka_settings_are_checked(kafka, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_kafka(_source(kafka))


def test_unset_pipeline_configuration_is_named():
    with pytest.raises(ConfigError, match=r"cdc_medallion\.kafka\.missing.*pipeline configuration"):
        _options({"bootstrap_servers": "{{conf:cdc_medallion.kafka.missing}}", "subscribe": "t"})


def test_kafka_rows_land_as_the_local_kafka_dump_lands_them(spark, tmp_path):
    """The Kafka source's columns become exactly BRONZE_SCHEMA, the same row a kafka-dump file gives."""
    from cdc_medallion.config import InputConf
    from cdc_medallion.sources.files import FileLanding

    key, value = b'{"id":1}', b'{"op":"c","after":{"id":1}}'
    kafka_row = (key, value, "shop.public.customers", 2, 41, 1_700_000_000_123, 0, [("trace", b"abc")])
    kafka = (
        spark.createDataFrame(
            [kafka_row],
            "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp BIGINT, "
            "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>",
        )
        .selectExpr("*", "timestamp_millis(timestamp) AS ts")
        .drop("timestamp")
        .withColumnRenamed("ts", "timestamp")
    )
    bronze = to_bronze(kafka, "shop")
    assert bronze.schema == BRONZE_SCHEMA

    dump = tmp_path / "dump.jsonl"
    line = {
        "topic": "shop.public.customers",
        "partition": 2,
        "offset": 41,
        "timestamp": 1_700_000_000_123,
        "key_base64": base64.b64encode(key).decode(),
        "value": value.decode(),
        "headers": {"trace": "abc"},
    }
    dump.write_text(json.dumps(line) + "\n", encoding="utf-8")
    source = SourceConf(name="shop", format="debezium-json", input=InputConf(path=dump, layout="kafka-dump"))
    landed = spark.createDataFrame(FileLanding(source, 10).next_batch().to_arrow(), schema=BRONZE_SCHEMA)
    kafka_columns = [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "headers",
        "_source",
        "_landing_error",
    ]
    assert bronze.select(kafka_columns).collect() == landed.select(kafka_columns).collect()
    assert bronze.first()["_file"] is None and bronze.first()["_ingest_ts"] is not None


def test_databricks_conf_sources_read_kafka():
    conf = load_conf(REPO / "conf" / "databricks.yml")
    assert conf.sources and all(s.input is None for s in conf.sources)
    for source in conf.sources:
        settings = parse_kafka(source)
        assert settings.sasl is not None and settings.sasl.password is not None
