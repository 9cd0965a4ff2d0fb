"""Configuration and rule files fail at startup, naming the file, the key and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_medallion.config import load_conf
from cdc_medallion.errors import ConfigError
from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.quality.rules import load_rules
from tests.conftest import REPO

VALID = """
pipeline:
  name: p
  storage: ./storage
sources:
  - name: s
    format: debezium-json
    input: {path: ./in, layout: json-lines}
tables:
  - {source: s, table: t, keys: [id], columns: {id: INTEGER, amount: "DECIMAL(9,2)", name: VARCHAR(20)}}
"""


def conf_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf.yml"
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_conf_is_typed(tmp_path):
    conf = load_conf(conf_file(tmp_path, VALID))
    assert conf.storage == (tmp_path / "storage").resolve()
    assert conf.sources[0].input.layout == "json-lines"
    assert conf.tables[0].columns == {"id": "int", "amount": "decimal(9,2)", "name": "string"}
    assert conf.tables[0].gold_name == "gold_t"
    assert conf.max_concurrent_flows == 4


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("  name: p\n", "  name: p\n  stroage: x\n"), "key 'pipeline.stroage': unknown key"),
        (("format: debezium-json", "format: nope"), "key 'sources[0].format': unknown format 'nope'"),
        (("layout: json-lines", "layout: csv"), "key 'sources[0].input.layout': must be one of"),
        (("keys: [id]", "keys: id"), "key 'tables[0].keys': must be list"),
        (("table: t,", "table: '../../x',"), "key 'tables[0].table': '../../x' is not a table name"),
        (("{source: s,", "{source: other,"), "key 'tables[0].source': unknown source 'other'"),
        (("name: VARCHAR(20)", "name: WIBBLE"), "key 'tables[0].columns': name: [INVALID_CONFIG] unknown column type"),
        (("  - name: s\n", "  - name: 's; DROP'\n"), "key 'sources[0].name': 's; DROP' is not a safe identifier"),
        (
            ("  name: p\n", "  name: p\n  max_concurrent_flows: 0\n"),
            "key 'pipeline.max_concurrent_flows': must be 1 or more, got 0",
        ),
    ],
)
def test_bad_conf_names_file_key_and_reason(tmp_path, edit, message):
    path = conf_file(tmp_path, VALID.replace(*edit))
    with pytest.raises(ConfigError) as error:
        load_conf(path)
    assert str(path) in str(error.value)
    assert message in str(error.value)


def test_included_fragment_errors_name_the_fragment(tmp_path):
    (tmp_path / "sources").mkdir()
    fragment = tmp_path / "sources" / "a.yml"
    fragment.write_text("sources:\n  - {name: a, format: debezium-json, colour: red}\n", encoding="utf-8")
    path = conf_file(tmp_path, "pipeline: {name: p, storage: ./s}\ninclude: [sources/*.yml]\n")
    with pytest.raises(ConfigError, match=r"a\.yml: key 'sources\[0\]\.colour': unknown key"):
        load_conf(path)


def test_unknown_format_option_is_a_startup_error(tmp_path):
    from cdc_medallion.formats import get_format

    with pytest.raises(ConfigError, match="unknown option 'tabel' for format debezium-json"):
        get_format("debezium-json")("s", {"tabel": "x"})


def test_every_shipped_conf_and_rule_file_loads(spark):
    conf = load_conf(REPO / "conf" / "local.yml")
    assert conf.sources, "the embedded sample has sources"
    for source in conf.sources:
        assert source.input is not None and source.input.path.exists(), source
        assert load_rules(conf.expectations, "silver", source.format, EVENT_SCHEMA)


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            "{name: r1, constraint: 'no_such_column > 1', action: warn}",
            "rule 'r1': constraint 'no_such_column > 1' is invalid",
        ),
        ("{name: r2, constraint: 'op IN (', action: drop}", "rule 'r2': constraint 'op IN (' is invalid"),
        (  # among good rules, the bad one is named
            "{name: fine, constraint: 'op IS NOT NULL'}\n  - {name: r5, constraint: 'nope(', action: warn}",
            "rule 'r5': constraint 'nope(' is invalid",
        ),
        ("{name: r3, constraint: 'op IS NULL', action: explode}", "(r3): key 'action': must be one of"),
        ("{name: r4, constraint: 'op IS NULL', severity: high}", "key 'severity': unknown key"),
    ],
)
def test_bad_rules_fail_naming_file_and_rule(spark, tmp_path, rule, message):
    (tmp_path / "silver.yml").write_text(f"rules:\n  - {rule}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_rules(tmp_path, "silver", None, EVENT_SCHEMA)
    assert str(tmp_path / "silver.yml") in str(error.value)
    assert message in str(error.value)
