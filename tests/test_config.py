"""Configuration and rule files fail at startup, naming the file, the key and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_medallion.config import load_conf
from cdc_medallion.errors import ConfigError
from cdc_medallion.model import EVENT_SCHEMA
from cdc_medallion.quality.rules import load_rules, stale_keys_check
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
        (("name: VARCHAR(20)", "name: WIBBLE"), "key 'tables[0].columns.name': unknown column type 'WIBBLE'"),
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

    with pytest.raises(ConfigError) as error:
        get_format("debezium-json")("s", {"tabel": "x"})
    assert str(error.value).endswith(
        "source 's', format debezium-json: key 'options.tabel': unknown key "
        "(known: native_parse, schema, table, unavailable_value_placeholder)"
    )


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
        (
            "{name: r3, constraint: 'op IS NULL', action: explode}",
            "rule 'r3': key 'rules[0].action': must be one of warn, drop, fail, quarantine, got 'explode'",
        ),
        (
            "{name: r4, constraint: 'op IS NULL', severity: high}",
            "rule 'r4': key 'rules[0].severity': unknown key (known: action, constraint, description, name)",
        ),
    ],
)
def test_bad_rules_fail_naming_file_and_rule(spark, tmp_path, rule, message):
    (tmp_path / "silver.yml").write_text(f"rules:\n  - {rule}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_rules(tmp_path, "silver", None, EVENT_SCHEMA)
    assert str(tmp_path / "silver.yml") in str(error.value)
    assert message in str(error.value)


# --- every model: a misspelled key, a value of the wrong type, a choice not offered -------------
CONF = """
pipeline: {name: p, storage: ./storage}
sources:
  - name: s
    format: canal-json
    input: {path: ./in, layout: json-lines}
    options: {delete_rows: old}
  - name: k
    format: qlik-json
    kafka: {bootstrap_servers: "b:9092", subscribe: hr, security_protocol: SASL_SSL, sasl: {mechanism: AWS_MSK_IAM}}
tables:
  - {source: s, table: accounts, keys: [id]}
"""
KAFKA_KEYS = (
    "assign, bootstrap_servers, fail_on_data_loss, max_offsets_per_trigger, options, sasl, secret_scope, "
    "security_protocol, service_credential, starting_offsets, subscribe, subscribe_pattern"
)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # the pipeline
        (
            ("storage: ./storage}", "storage: ./storage, max_concurent_flows: 2}"),
            "key 'pipeline.max_concurent_flows': unknown key (known: expectations, max_bytes_per_batch, "
            "max_concurrent_flows, max_messages_per_batch, name, storage, transformations)",
        ),
        (
            ("storage: ./storage}", "storage: ./storage, max_concurrent_flows: '2'}"),
            "key 'pipeline.max_concurrent_flows': must be an integer, got str '2'",
        ),
        (
            ("storage: ./storage}", "storage: ./storage, max_messages_per_batch: 0}"),
            "key 'pipeline.max_messages_per_batch': must be 1 or more, got 0",
        ),
        (("name: p,", "name: 'p q',"), "key 'pipeline.name': 'p q' is not a safe identifier"),
        # a source
        (
            ("format: canal-json", "fromat: canal-json"),
            "key 'sources[0].fromat': unknown key (known: format, input, kafka, name, options, topic)",
        ),
        (("format: canal-json", "format: canal-json\n    topic: 7"), "key 'sources[0].topic': must be text, got int 7"),
        (
            ("layout: json-lines", "layout: jsonl"),
            "key 'sources[0].input.layout': must be one of json-lines, kafka-dump, files, got 'jsonl'",
        ),
        (
            ("format: canal-json", "format: canal"),
            "key 'sources[0].format': unknown format 'canal' (known: aws-dms-json,",
        ),
        # its format's options
        (
            ("delete_rows: old", "delete_row: old"),
            "key 'sources[0].options.delete_row': unknown key (known: delete_rows, table)",
        ),
        (
            ("delete_rows: old", "delete_rows: old, table: [a]"),
            "key 'sources[0].options.table': must be text, got list ['a']",
        ),
        (
            ("delete_rows: old", "delete_rows: both"),
            "key 'sources[0].options.delete_rows': must be one of auto, data, old, got 'both'",
        ),
        (
            ("format: qlik-json", "format: qlik-json\n    options: {wait_for_metadata: flase}"),
            "key 'sources[1].options.wait_for_metadata': must be true or false, got str 'flase'",
        ),
        (
            ("format: qlik-json", "format: qlik-json\n    options: {wait_for_metadata: yes please}"),
            "key 'sources[1].options.wait_for_metadata': must be true or false, got str 'yes please'",
        ),
        # a Kafka block: checked when the conf is loaded, not when the stream is defined
        (
            ('bootstrap_servers: "b:9092"', 'bootstrap_server: "b:9092"'),
            f"key 'sources[1].kafka.bootstrap_server': unknown key (known: {KAFKA_KEYS})",
        ),
        (
            ("subscribe: hr,", "subscribe: [hr, dept],"),
            "key 'sources[1].kafka.subscribe': must be text, a number or a secret reference ({secret: KEY}), got list",
        ),
        (
            ("security_protocol: SASL_SSL", "security_protocol: SASL"),
            "key 'sources[1].kafka.security_protocol': must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL "
            "(or a {{conf:KEY}} reference), got 'SASL'",
        ),
        (
            ("mechanism: AWS_MSK_IAM", "mechanism: GSSAPI"),
            "key 'sources[1].kafka.sasl.mechanism': must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, AWS_MSK_IAM",
        ),
        (
            ("mechanism: AWS_MSK_IAM}", "mechanism: PLAIN, username: u, password: hunter2}"),
            "key 'sources[1].kafka.sasl.password': must be a secret reference",
        ),
        (("subscribe: hr, ", ""), "key 'sources[1].kafka.subscribe': is required (or subscribe_pattern, assign"),
        # a table
        (
            ("keys: [id]", "key: [id]"),
            "key 'tables[0].key': unknown key (known: columns, keys, name, source, table, track_history_except)",
        ),
        (("keys: [id]", "keys: id"), "key 'tables[0].keys': must be list, got str 'id'"),
        (("keys: [id]", "keys: [id, 3]"), "key 'tables[0].keys[1]': must be text, got int 3"),
        (
            ("table: accounts", "table: a/b"),
            "key 'tables[0].table': 'a/b' is not a table name (empty, over 255 characters, or with a control "
            "character or a backtick, or with a dot or a slash in a part)",
        ),
        (("keys: [id]", "keys: [id], columns: {id: NUMBR}"), "key 'tables[0].columns.id': unknown column type 'NUMBR'"),
    ],
)
def test_every_conf_model_names_file_key_and_what_is_allowed(tmp_path, edit, message):
    assert edit[0] in CONF
    path = conf_file(tmp_path, CONF.replace(*edit))
    with pytest.raises(ConfigError) as error:
        load_conf(path)
    text = str(error.value)
    assert text.startswith(f"[INVALID_CONFIG] {path}: key '"), text
    assert message in text
    assert "\n" not in text and "validation error" not in text and "pydantic" not in text


def test_the_conf_edited_by_those_cases_is_valid(tmp_path):
    conf = load_conf(conf_file(tmp_path, CONF))
    assert conf.source("s").options == {"delete_rows": "old"}
    assert conf.source("k").kafka.sasl.mechanism == "AWS_MSK_IAM"


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            "ruls:\n  - {name: r, constraint: 'op IS NULL'}",
            "key 'ruls': unknown key (known: description, rules)",
        ),
        (
            "rules:\n  - {name: r, constriant: 'op IS NULL'}",
            "key 'rules[0].constriant': unknown key (known: action, constraint, description, name)",
        ),
        ("rules: {name: r, constraint: 'op IS NULL'}", "key 'rules': must be list, got dict"),
        ("rules:\n  - {name: r, constraint: [op]}", "key 'rules[0].constraint': must be text, got list ['op']"),
        ("rules:\n  - {name: ' ', constraint: 'op IS NULL'}", "key 'rules[0].name': must not be empty"),
        (
            "rules:\n  - {name: r, constraint: 'op IS NULL', action: quarantined}",
            "key 'rules[0].action': must be one of warn, drop, fail, quarantine, got 'quarantined'",
        ),
        ("rules: [", "not valid YAML at line 2, column 1: expected the node content"),
    ],
)
def test_rule_file_errors_name_file_key_and_what_is_allowed(tmp_path, rules, message):
    path = tmp_path / "silver.yml"
    path.write_text(rules + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_rules(tmp_path, "silver", None, EVENT_SCHEMA)
    text = str(error.value)
    assert text.startswith(f"[INVALID_CONFIG] {path}: ")
    assert message in text and "\n" not in text


@pytest.mark.parametrize(
    ("layer", "text", "message"),
    [
        ("silver", "stale_keys: {action: warn}", "key 'stale_keys': unknown key (known: description, rules)"),
        ("gold", "stale_keys: {action: drop}", "key 'stale_keys.action': must be warn or fail, got 'drop'"),
        ("gold", "stale_keys: {acton: warn}", "key 'stale_keys.acton': unknown key (known: action, description)"),
    ],
)
def test_stale_keys_is_a_setting_of_gold_yml_alone(tmp_path, layer, text, message):
    """`stale_keys` says what gold's stale keys are to the checks: only gold.yml may say it."""
    path = tmp_path / f"{layer}.yml"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        if layer == "gold":
            stale_keys_check(tmp_path)
        else:
            load_rules(tmp_path, layer, None, EVENT_SCHEMA)
    assert str(error.value).startswith(f"[INVALID_CONFIG] {path}: ")
    assert message in str(error.value)


def test_gold_yml_sets_stale_keys_to_warn(tmp_path):
    (tmp_path / "gold.yml").write_text("stale_keys: {action: warn}\n", encoding="utf-8")
    assert stale_keys_check(tmp_path).action.value == "warn"
    assert stale_keys_check(tmp_path / "absent").action.value == "fail"


def test_a_format_given_its_options_in_code_names_the_source(tmp_path):
    """Outside a conf file (`ingest --option`, a test) the error names the source and its format."""
    from cdc_medallion.formats import get_format

    with pytest.raises(ConfigError) as error:
        get_format("qlik-json")("hr", {"wait_for_metadata": "perhaps"})
    assert str(error.value) == (
        "[INVALID_CONFIG] source 'hr', format qlik-json: key 'options.wait_for_metadata': "
        "must be true or false, got str 'perhaps'"
    )
    assert get_format("qlik-json")("hr", {"wait_for_metadata": "false"}).settings.wait_for_metadata is False


def test_a_misspelled_key_is_reported_before_the_key_it_should_have_been(tmp_path):
    path = conf_file(tmp_path, VALID.replace("storage: ./storage", "storge: ./storage"))
    with pytest.raises(ConfigError, match=r"key 'pipeline\.storge': unknown key \(known: expectations, "):
        load_conf(path)


# --- every YAML file the repository ships loads --------------------------------------------------
def shipped_yaml() -> list[Path]:
    """Every YAML file of the repository, outside hidden folders (.venv, .data, bench/.work)."""
    found = [*REPO.rglob("*.yml"), *REPO.rglob("*.yaml")]
    return sorted(p for p in found if not any(part.startswith(".") for part in p.relative_to(REPO).parts[:-1]))


def test_every_shipped_yaml_file_loads():
    """Pipeline confs (and the files they include) load as confs, rule files as rule files; the
    bundle's own files are checked against Databricks' schema in test_bundle.py. A YAML file that
    is none of these has nothing that reads it, and fails here."""
    from cdc_medallion.conf_files import IncludedFile
    from cdc_medallion.quality.rules import read_rule_file
    from cdc_medallion.strict import check, load_yaml
    from tests.test_bundle import bundle_files

    unread = set(shipped_yaml())
    assert REPO / "conf" / "databricks.yml" in unread and REPO / "expectations" / "silver.yml" in unread
    for path in bundle_files():  # databricks.yml and pipelines/*.yml
        assert isinstance(load_yaml(path), dict), path
        unread.discard(path)
    for path in sorted((REPO / "expectations").glob("*.yml")):
        assert read_rule_file(path).rules, path
        unread.discard(path)
    for path in sorted((REPO / "conf").rglob("*.yml")):
        data = load_yaml(path)
        if "pipeline" in data:
            conf = load_conf(path)
            assert conf.sources and conf.conf_file == path, path
        else:  # a fragment: loaded by the confs that include it, and on its own
            assert check(IncludedFile, data, str(path)).sources, path
        unread.discard(path)
    included = {s.name for s in load_conf(REPO / "conf" / "local.yml").sources}
    assert included == {s["name"] for p in (REPO / "conf" / "sources").glob("*.yml") for s in load_yaml(p)["sources"]}
    assert not unread, f"YAML files nothing loads: {sorted(str(p.relative_to(REPO)) for p in unread)}"
