"""`cdc-medallion discover`: the tables section from sample messages, merged into a conf."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cdc_medallion.cli import main
from cdc_medallion.config import load_conf
from cdc_medallion.errors import ConfigError
from cdc_medallion.tables_conf import GUESSED_KEY, discover_tables, sample_source

REPO = Path(__file__).resolve().parent.parent
DATABRICKS = REPO / "conf" / "databricks.yml"


def _sources_only(tmp_path: Path) -> Path:
    """conf/databricks.yml without its tables section, beside the real one's relative folders."""
    text = DATABRICKS.read_text(encoding="utf-8")
    conf = tmp_path / "conf" / "databricks.yml"
    conf.parent.mkdir()
    conf.write_text(text[: text.index("\ntables:\n") + 1], encoding="utf-8")
    return conf


def test_discover_merges_into_a_conf_and_keeps_what_it_lists(spark, tmp_path, capsys):
    conf = _sources_only(tmp_path)
    head = conf.read_text(encoding="utf-8")
    sample = REPO / "samples" / "shareplex-json" / "hr.jsonl"  # SharePlex messages name no key
    assert main(["discover", "--format", "shareplex-json", "--input", str(sample), "--conf", str(conf)]) == 0
    assert "3 table(s) added to source 'sp_hr'" in capsys.readouterr().out
    text = conf.read_text(encoding="utf-8")
    assert text.startswith(head)  # the sources and every comment kept
    assert text.count(f"# {GUESSED_KEY}") == 3
    tables = {t.table: t for t in load_conf(conf).tables}
    assert sorted(tables) == ["DEPARTMENTS", "EMPLOYEES", "PROJECTS"]
    assert tables["EMPLOYEES"].keys == ("EMPLOYEE_ID",)  # the guess: the first column
    assert list(tables["EMPLOYEES"].columns)[:3] == ["EMPLOYEE_ID", "DEPARTMENT_ID", "FIRST_NAME"]  # message order

    # A reviewed entry is never rewritten; only tables the conf does not list are added.
    reviewed = text.replace("keys: [EMPLOYEE_ID] # " + GUESSED_KEY, "keys: [EMPLOYEE_ID] # reviewed")
    conf.write_text(reviewed, encoding="utf-8")
    qlik = REPO / "samples" / "qlik" / "hr.jsonl"
    for fmt, path in (("shareplex-json", sample), ("qlik-json", qlik)):
        assert main(["discover", "--format", fmt, "--input", str(path), "--conf", str(conf)]) == 0
    merged = conf.read_text(encoding="utf-8")
    assert merged.startswith(reviewed)
    out = capsys.readouterr().out
    assert "0 table(s) added to source 'sp_hr', 3 already listed" in out
    assert "2 table(s) added to source 'hr'" in out
    by_name = {(t.source, t.table): t for t in load_conf(conf).tables}
    employees = by_name[("hr", "employees")]
    assert employees.keys == ("emp_no",) and employees.columns["salary"] == "decimal(10,2)"
    # Qlik's employees and SharePlex's EMPLOYEES would both be gold_employees: the later is renamed.
    assert by_name[("sp_hr", "EMPLOYEES")].name is None and employees.name == "hr_employees"
    golds = [t.gold_name for t in by_name.values()]
    assert len(set(golds)) == len(golds)


def test_discover_prints_the_section_without_a_conf(spark, capsys):
    sample = REPO / "samples" / "dts-avro" / "warehouse.jsonl"
    assert main(["discover", "--format", "dts-avro", "--input", str(sample)]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    items = {t["table"]: t for t in printed["tables"]}
    assert items["stock_items"]["keys"] == ["item_id"]
    assert items["stock_items"]["columns"]["label_png"] == "binary"
    assert items["suppliers"]["source"] == "dts_avro"


def test_discover_names_the_problem(tmp_path):
    conf = _sources_only(tmp_path)
    with pytest.raises(ConfigError, match="--source 'nope'"):
        sample_source("canal-json", REPO / "samples" / "canal-json" / "crm.jsonl", load_conf(conf), "nope")
    with pytest.raises(ConfigError, match="is canal-json, not qlik-json"):
        sample_source("qlik-json", REPO / "samples" / "qlik" / "hr.jsonl", load_conf(conf), "canal_crm")
    with pytest.raises(ConfigError, match="unknown format"):
        sample_source("avro-json", REPO / "samples" / "qlik" / "hr.jsonl")


def test_databricks_conf_lists_what_discover_finds_in_the_samples(spark):
    """conf/databricks.yml's tables are discover's output for the embedded samples: every table,
    its columns in order with their types, and its key (a guessed key may have been reviewed)."""
    conf = load_conf(DATABRICKS)
    samples = {s.name: s for s in load_conf(REPO / "conf" / "local.yml").sources}
    assert {s.format for s in conf.sources} == {s.format for s in samples.values()}  # the seven seed formats
    listed = {(t.source, t.table): t for t in conf.tables}
    found = set()
    for source in conf.sources:
        local = samples[source.name]
        entries = discover_tables(spark, sample_source(source.format, local.input.path, conf, source.name))
        assert entries, source.name
        for entry in entries:
            table = listed.get((entry.source, entry.table))
            assert table is not None, f"{entry.source}:{entry.table} is not in conf/databricks.yml"
            assert list(table.columns.items()) == list(entry.columns.items()), entry.table
            assert entry.guessed_key or table.keys == entry.keys, entry.table
            found.add((entry.source, entry.table))
    assert found == set(listed)
