"""The same messages give the same gold through the local runner and through Databricks.

Three sources whose messages hold what engines disagree on: updates that set a column to NULL in
a whole image, partial images of every format that has them (Debezium's TOAST placeholder
`__debezium_unavailable_value`, Qlik's columnMask, SharePlex's `upd`), deletes, a delete then a
re-insert, truncates, and messages landed out of order.

Locally: `run_pipeline` on the files. On Databricks: `transformations/` is evaluated against the
recording stand-ins, and the recorded graph is executed on real Spark by `GraphRun`: every query
function of silver and gold runs over the bronze rows the local run landed (bronze reads Kafka
on Databricks), and each auto CDC flow is applied as Databricks documents it
(`tests/auto_cdc_reference.py`, written apart from `runner/auto_cdc/`). SCD1 must be equal
everywhere; SCD2 too, but for the one documented difference: Databricks' SCD2 takes no
truncates (`declarative/databricks.py`), so a version that was open at a truncate, and whose key
has no later event, ends at the truncate locally and stays open on Databricks. The comparison
encodes exactly that.
"""

from __future__ import annotations

import json
import runpy
import sys
from typing import Any

import pytest
import yaml

from cdc_medallion.config import SPARK_CONF_KEY, load_conf
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.runner.graph import transformation_files
from tests.conftest import REPO, shared_path
from tests.databricks_graph_run import GraphRun
from tests.databricks_standins import STANDINS, Recorder
from tests.helpers import read_rows
from tests.test_qlik_json import METADATA, data_message
from tests.test_shareplex_json import meta

pytestmark = pytest.mark.xdist_group("engine_parity")  # one storage for every test of the module
UNAVAILABLE = "__debezium_unavailable_value"
START, END = "__START_AT", "__END_AT"

TABLES = [
    {
        "source": "shop",
        "table": "inventory.customers",
        "name": "customers",
        "keys": ["id"],
        "columns": {"id": "int", "email": "string", "name": "string", "bio": "string"},
        "track_history_except": ["bio"],
    },
    {
        "source": "shop",
        "table": "inventory.orders",
        "name": "orders",
        "keys": ["id"],
        "columns": {"id": "int", "item": "string"},
    },
    {
        "source": "hr_sp",
        "table": "EMP",
        "name": "emp",
        "keys": ["EMP_ID"],
        "columns": {"EMP_ID": "int", "NAME": "string", "CITY": "string", "BONUS": "int"},
    },
    {
        "source": "hr_sp",
        "table": "DEPT",
        "name": "dept",
        "keys": ["DEPT_ID"],
        "columns": {"DEPT_ID": "int", "TITLE": "string"},
    },
    {
        "source": "hr_qlik",
        "table": "salaries",
        "name": "salaries",
        "keys": ["emp_no", "from_date"],
        "columns": {"emp_no": "int", "salary": "int", "from_date": "date", "to_date": "date"},
    },
]


# --- the messages ---------------------------------------------------------------------------------
def _debezium(op: str, table: str, lsn: int, before: dict | None = None, after: dict | None = None) -> str:
    source = {"connector": "postgresql", "db": "shop", "schema": "inventory", "table": table, "lsn": lsn, "txId": lsn}
    return json.dumps({"before": before, "after": after, "source": source, "op": op, "ts_ms": 1_700_000_000_000 + lsn})


def debezium_lines() -> list[str]:
    ann = {"id": 1, "email": "a@x", "name": "Ann", "bio": "Ann's long bio"}
    bob = {"id": 2, "email": "b@x", "name": "Bob", "bio": "Bob's long bio"}
    lines = [
        _debezium("c", "customers", 100, after=ann),
        _debezium("c", "customers", 101, after=bob),
        _debezium("u", "customers", 102, before=ann, after={**ann, "email": None}),  # email := NULL, whole image
        # REPLICA IDENTITY DEFAULT: no before image, the unchanged TOASTed bio as Debezium's placeholder
        _debezium("u", "customers", 103, after={**bob, "email": "b2@x", "bio": UNAVAILABLE}),
        _debezium("u", "customers", 104, after={"id": 1, "email": "a2@x", "name": None, "bio": UNAVAILABLE}),
        _debezium("d", "customers", 105, before={**bob, "email": "b2@x"}),
        _debezium("c", "customers", 106, after={"id": 2, "email": "c@x", "name": "Bob", "bio": None}),
        # only the untracked bio changes: the open version is updated in place (SCD2)
        _debezium("u", "customers", 107, after={"id": 1, "email": "a2@x", "name": None, "bio": "Ann's new bio"}),
        _debezium("c", "orders", 110, after={"id": 10, "item": "x"}),
        _debezium("c", "orders", 111, after={"id": 11, "item": "y"}),
        _debezium("t", "orders", 112),
        _debezium("c", "orders", 113, after={"id": 12, "item": "z"}),
    ]
    order = [3, 0, 7, 6, 1, 4, 2, 5, 9, 11, 8, 10]  # landed out of order: the lsn orders them
    return [lines[i] for i in order]


def shareplex_lines() -> list[str]:
    messages = [
        {"meta": meta("ins", 100, 1, 2), "data": {"EMP_ID": "1", "NAME": "Ann", "CITY": "Oslo", "BONUS": "3"}},
        {"meta": meta("ins", 100, 2, 2), "data": {"EMP_ID": "2", "NAME": "Bob", "CITY": "Rome", "BONUS": "5"}},
        {"meta": meta("upd", 101), "data": {"CITY": "Bergen"}, "key": {"EMP_ID": "1", "CITY": "Oslo"}},  # partial
        {"meta": meta("upd", 102), "data": {"BONUS": None}, "key": {"EMP_ID": "1", "BONUS": "3"}},  # BONUS := NULL
        {"meta": meta("UPDATE AFTER", 103), "data": {"EMP_ID": "2", "BONUS": "7"}},
        {"meta": meta("UPDATE BEFORE", 103), "data": {"EMP_ID": "2", "BONUS": "5"}},
        {"meta": meta("ins", 104, table="HR.DEPT"), "data": {"DEPT_ID": "10", "TITLE": "Ops"}},
        {"meta": meta("truncate", 105, table="HR.DEPT")},
        {"meta": meta("ins", 106, table="HR.DEPT"), "data": {"DEPT_ID": "20", "TITLE": "Sales"}},
        {"meta": meta("del", 107), "data": {"EMP_ID": "2", "NAME": "Bob", "CITY": "Rome", "BONUS": "7"}},
    ]
    return [json.dumps(m) for m in reversed(messages)]  # landed out of order: scn orders them


def qlik_lines() -> list[str]:
    metadata = json.dumps(json.loads(shared_path("fixtures", "qlik-replicate-json", METADATA).read_text("utf-8")))
    row = {"emp_no": 7, "salary": 100, "from_date": "2020-01-01", "to_date": "2020-12-31"}
    other = {"emp_no": 8, "salary": 200, "from_date": "2020-01-01", "to_date": "2021-12-31"}

    def seq(n: int) -> str:
        return f"2018041320135828000000000000000{n:04d}"

    data = [
        data_message("INSERT", row, change_mask="0F", column_mask="0F", sequence=seq(1)),
        data_message("INSERT", other, change_mask="0F", column_mask="0F", sequence=seq(2)),
        # columnMask 07: emp_no, salary, from_date carried; to_date absent, so it keeps its value
        data_message("UPDATE", {**row, "salary": 110, "to_date": None}, row, "02", "07", seq(3)),
        data_message("UPDATE", {**row, "salary": None}, row, "02", "0F", seq(4)),  # salary := NULL, whole image
        data_message("DELETE", None, other, "05", "0F", seq(5)),
    ]
    return [metadata, *reversed(data)]


@pytest.fixture(scope="module")
def parity(spark, tmp_path_factory) -> dict[str, Any]:
    """The local run, once for the module: its conf and storage."""
    folder = tmp_path_factory.mktemp("parity")
    inputs = {"shop": debezium_lines(), "hr_sp": shareplex_lines(), "hr_qlik": qlik_lines()}
    formats = {"shop": "debezium-json", "hr_sp": "shareplex-json", "hr_qlik": "qlik-json"}
    sources = []
    for name, lines in inputs.items():
        path = folder / f"{name}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        sources.append({"name": name, "format": formats[name], "input": {"path": str(path), "layout": "json-lines"}})
    conf = {
        "pipeline": {
            "name": "parity",
            "storage": str(folder / "storage"),
            "transformations": str(REPO / "transformations"),
            "expectations": str(REPO / "expectations"),
        },
        "sources": sources,
        "tables": TABLES,
    }
    conf_path = folder / "parity.yml"
    conf_path.write_text(yaml.safe_dump(conf, sort_keys=False), encoding="utf-8")
    run_pipeline(load_conf(conf_path), spark=spark)
    return {"conf": conf_path, "storage": folder / "storage"}


def databricks_gold(spark, parity: dict[str, Any], variant: str, monkeypatch) -> dict[str, list[dict[str, Any]]]:
    """Every gold table as the recorded Databricks graph computes it from the same bronze rows."""
    recorder = Recorder()
    standin = STANDINS[variant]
    monkeypatch.setitem(sys.modules, standin.module, standin.make(recorder))
    if standin.module == "dlt":  # an older runtime: pyspark.pipelines is Apache Spark's
        import pyspark.pipelines as oss

        monkeypatch.setitem(sys.modules, "pyspark.pipelines", oss)
    spark.conf.set(SPARK_CONF_KEY, str(parity["conf"]))  # what Lakeflow does: the conf path, each file run
    try:
        conf = load_conf(parity["conf"])
        assert conf.transformations is not None
        for file in transformation_files(conf.transformations):
            runpy.run_path(str(file), run_name=f"lakeflow.{file.stem}")
    finally:
        spark.conf.unset(SPARK_CONF_KEY)
    bronze = {
        f"bronze_{s.name}": spark.read.format("delta").load(str(parity["storage"] / f"bronze_{s.name}"))
        for s in conf.sources
    }
    served = {name: df.select(*BRONZE_SCHEMA.fieldNames()) for name, df in bronze.items()}
    assert all(df.schema == BRONZE_SCHEMA for df in served.values())
    run = GraphRun(recorder, spark, served)
    gold = {}
    for table in TABLES:
        for name in (f"gold_{table['name']}", f"gold_{table['name']}_history"):
            gold[name] = [r.asDict() for r in run.dataset(name).collect()]
    return gold


def _rows(rows: list[dict[str, Any]], columns: list[str]) -> list[tuple]:
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


def _truncates(spark, parity: dict[str, Any], source: str, table: str) -> set[str]:
    silver = read_rows(spark, parity["storage"], f"silver_{source}")
    return {r["sequence"] for r in silver if r["op"] == "TRUNCATE" and r["source_table"] == table}


@pytest.mark.parametrize("variant", ["pyspark.pipelines", "dlt-wrapped"])
def test_local_and_databricks_give_the_same_gold(spark, parity, variant, monkeypatch):
    on_databricks = databricks_gold(spark, parity, variant, monkeypatch)
    for table in TABLES:
        columns = list(table["columns"])
        current, history = f"gold_{table['name']}", f"gold_{table['name']}_history"
        local = read_rows(spark, parity["storage"], current)
        assert _rows(on_databricks[current], columns) == _rows(local, columns), current
        local_history = _rows(read_rows(spark, parity["storage"], history), [*columns, START, END])
        truncated = _truncates(spark, parity, table["source"], table["table"].split(".")[-1])
        # the documented difference: on Databricks SCD2 takes no truncates, so a version the
        # truncate ended (its key has no later event here) stays open there
        expected = sorted(((*r[:-1], None if r[-1] in truncated else r[-1]) for r in local_history), key=repr)
        assert _rows(on_databricks[history], [*columns, START, END]) == expected, history


def test_the_messages_hold_what_the_engines_could_disagree_on(spark, parity):
    """The gold both engines agree on is what the messages mean (so agreement is not vacuous)."""
    storage = parity["storage"]
    customers = {r["id"]: r for r in read_rows(spark, storage, "gold_customers")}
    assert (customers[1]["email"], customers[1]["name"], customers[1]["bio"]) == ("a2@x", None, "Ann's new bio")
    assert (customers[2]["email"], customers[2]["bio"]) == ("c@x", None)  # re-inserted: nothing carried over
    emp = {r["EMP_ID"]: r for r in read_rows(spark, storage, "gold_emp")}
    assert list(emp) == [1] and (emp[1]["CITY"], emp[1]["BONUS"], emp[1]["NAME"]) == ("Bergen", None, "Ann")
    [salary] = read_rows(spark, storage, "gold_salaries")
    assert (salary["emp_no"], salary["salary"], str(salary["to_date"])) == (7, None, "2020-12-31")
    assert [r["id"] for r in read_rows(spark, storage, "gold_orders")] == [12]
    assert [r["TITLE"] for r in read_rows(spark, storage, "gold_dept")] == ["Sales"]
    ann = sorted(
        (r for r in read_rows(spark, storage, "gold_customers_history") if r["id"] == 1), key=lambda r: r[START]
    )
    assert [(r["email"], r["name"], r["bio"]) for r in ann] == [
        ("a@x", "Ann", "Ann's long bio"),
        (None, "Ann", "Ann's long bio"),  # email := NULL: a tracked change, a version
        ("a2@x", None, "Ann's new bio"),  # bio kept through the TOAST placeholder, then updated in place
    ]
    history = read_rows(spark, storage, "gold_orders_history")
    assert sorted(r[END] is None for r in history) == [False, False, True]  # closed by the truncate, locally
