"""The Databricks bundle: valid against the official schema, complete, consistent, free of secrets.

The schema is `../shared/schemas/databricks-bundle.schema.json` (Databricks License, see the
files beside it). Its patterns use `\\p{L}`, which Python's `re` rejects, so `pattern` is checked
with the `regex` package.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc_medallion.config import load_conf
from cdc_medallion.formats import get_format

# One worker builds this module's shared storage once (make test runs pytest-xdist).
pytestmark = pytest.mark.xdist_group("bundle")

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO.parent / "shared" / "schemas" / "databricks-bundle.schema.json"
BUNDLE = REPO / "databricks.yml"
INTERPOLATION = re.compile(r"\$\{([^}]+)\}")


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data


def bundle_files() -> list[Path]:
    root = _load(BUNDLE)
    files = [BUNDLE]
    for pattern in root.get("include", []):
        matched = sorted(REPO.glob(pattern))
        assert matched, f"include {pattern!r} matches no file"
        files += matched
    return files


def merged_bundle() -> dict[str, Any]:
    """databricks.yml with its includes merged in, as the CLI does (resources by name)."""
    merged = _load(BUNDLE)
    for path in bundle_files()[1:]:
        for section, value in _load(path).items():
            assert section not in ("bundle", "targets", "include"), f"{path}: {section} belongs in databricks.yml"
            if isinstance(value, dict):
                target = merged.setdefault(section, {})
                for kind, items in value.items():
                    group = target.setdefault(kind, {})
                    duplicates = set(group) & set(items)
                    assert not duplicates, f"{path}: {section}.{kind} {duplicates} defined twice"
                    group.update(items)
            else:
                merged[section] = value
    return merged


@pytest.fixture(scope="module")
def validator():
    if not SCHEMA.is_file():
        pytest.skip(f"{SCHEMA} is not present (../shared must sit beside the repository)")
    import jsonschema
    import regex

    def pattern(validator, pattern, instance, schema):
        if validator.is_type(instance, "string") and not regex.search(pattern, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": pattern})
    return cls(schema)


def _errors(validator, document: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
        for e in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))
    ]


@pytest.mark.parametrize("path", bundle_files(), ids=lambda p: p.name)
def test_each_bundle_file_validates_against_the_official_schema(validator, path):
    assert _errors(validator, _load(path)) == []


def test_merged_bundle_validates(validator):
    assert _errors(validator, merged_bundle()) == []


def test_validator_rejects_what_databricks_rejects(validator):
    """The schema check has teeth: unknown keys, wrong types and bad references fail."""
    bundle = merged_bundle()
    pipeline = bundle["resources"]["pipelines"]["cdc_medallion"]
    assert _errors(validator, {**bundle, "resources": {"pipelines": {"p": {**pipeline, "serverles": True}}}})
    assert _errors(validator, {**bundle, "resources": {"pipelines": {"p": {**pipeline, "continuous": "no"}}}})
    assert _errors(validator, {**bundle, "resources": {"pipelines": {"p": {**pipeline, "photon": "${var.x-}"}}}})
    assert _errors(validator, {**bundle, "targets": {"dev": {"mode": "development", "defualt": True}}})


def test_targets_dev_and_prod():
    targets = merged_bundle()["targets"]
    assert targets["dev"]["mode"] == "development" and targets["dev"]["default"] is True
    assert targets["prod"]["mode"] == "production"
    assert "service_principal_name" in targets["prod"]["run_as"]
    assert targets["prod"]["permissions"]
    assert [name for name, target in targets.items() if target.get("default")] == ["dev"]
    pipeline = "cdc_medallion"
    assert targets["dev"]["resources"]["pipelines"][pipeline]["development"] is True
    assert targets["prod"]["resources"]["pipelines"][pipeline]["development"] is False


def test_pipeline_resource():
    bundle = merged_bundle()
    pipeline = bundle["resources"]["pipelines"]["cdc_medallion"]
    assert pipeline["catalog"] == "${var.catalog}" and pipeline["schema"] == "${var.schema}"
    assert pipeline["serverless"] is True and pipeline["continuous"] is False
    assert pipeline["channel"] in ("CURRENT", "PREVIEW") and "photon" in pipeline
    # The pipeline installs the project's wheel (with its core dependencies), nothing else.
    assert pipeline["environment"]["dependencies"] == [WHEEL_FROM_PIPELINES]
    assert pipeline["configuration"]["cdc_medallion.conf"] == "${workspace.file_path}/conf/databricks.yml"
    log = pipeline["event_log"]
    job = bundle["resources"]["jobs"]["cdc_medallion_update"]
    update, report = job["tasks"]
    assert update["pipeline_task"]["pipeline_id"] == "${resources.pipelines.cdc_medallion.id}"
    assert report["depends_on"] == [{"task_key": update["task_key"]}]
    parameters = report["spark_python_task"]["parameters"]
    table = parameters[parameters.index("--event-log-table") + 1]
    assert table == f"{log['catalog']}.{log['schema']}.{log['name']}"
    script = REPO / "pipelines" / report["spark_python_task"]["python_file"]
    assert script.is_file()
    (environment,) = [e for e in job["environments"] if e["environment_key"] == report["environment_key"]]
    assert environment["spec"]["dependencies"] == [WHEEL_FROM_PIPELINES]


# pipelines/*.yml name the wheel relative to themselves; the artifact builds it under dist/.
WHEEL_FROM_PIPELINES = "../dist/*.whl"


def test_bundle_builds_the_project_wheel():
    """`artifacts` builds this project's wheel where the environments look for it, with pip alone."""
    (artifact,) = merged_bundle()["artifacts"].values()
    assert artifact["type"] == "whl" and artifact["path"] == "."
    assert artifact["build"].split()[:3] == ["python3", "-m", "pip"] and "--no-deps" in artifact["build"]
    build = artifact["build"].split()
    assert build[build.index("--wheel-dir") + 1] == "dist"
    (built,) = artifact["files"]
    wheel_glob = (REPO / "pipelines" / WHEEL_FROM_PIPELINES).resolve().relative_to(REPO)
    assert built["source"].removeprefix("./").startswith("dist/cdc_medallion-") and str(wheel_glob) == "dist/*.whl"
    with (REPO / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    assert project["name"] == "cdc-medallion"  # the wheel's file name: cdc_medallion-<version>-...
    # The core is exactly pinned and holds none of the runtime's packages, which it would replace.
    core = project["dependencies"]
    assert core and all("==" in d for d in core)
    runtime = {d.split("==")[0] for d in project["optional-dependencies"]["spark"]}
    assert runtime == {"pyspark", "pyarrow", "pandas", "numpy"}
    assert not runtime & {d.split("==")[0] for d in core}


def test_libraries_reach_transformations():
    pipeline = merged_bundle()["resources"]["pipelines"]["cdc_medallion"]
    includes = [lib["glob"]["include"] for lib in pipeline["libraries"] if "glob" in lib]
    assert includes
    reached = set()
    for include in includes:
        assert include.endswith("/**"), include
        folder = (REPO / "pipelines" / include.removesuffix("/**")).resolve()  # relative to the including file
        reached |= {p.resolve() for p in folder.rglob("*.py")}
    expected = {p.resolve() for p in (REPO / "transformations").glob("*.py")}
    assert expected and expected <= reached


def test_references_resolve():
    """Every ${var.*} is declared, every ${resources.*} exists, every {{conf:*}} is configured."""
    bundle = merged_bundle()
    text = "\n".join(p.read_text(encoding="utf-8") for p in bundle_files())
    declared = set(bundle["variables"])
    used = {m.split(".", 1)[1] for m in INTERPOLATION.findall(text) if m.startswith("var.")}
    assert used <= declared, used - declared
    assert declared <= used, f"unused variables {declared - used}"
    for ref in (m for m in INTERPOLATION.findall(text) if m.startswith("resources.")):
        _, kind, name, _field = ref.split(".")
        assert name in bundle["resources"][kind], ref
    configured = set(bundle["resources"]["pipelines"]["cdc_medallion"]["configuration"])
    values = [v for _, v in _walk(_load(REPO / "conf" / "databricks.yml")) if isinstance(v, str)]
    referenced = {key for v in values for key in re.findall(r"\{\{conf:([^{}]+)\}\}", v)}
    assert referenced and referenced <= configured, referenced - configured


def test_databricks_conf_loads_and_lists_tables_with_keys_and_columns():
    conf = load_conf(REPO / "conf" / "databricks.yml")
    assert conf.sources and all(s.kafka and s.input is None for s in conf.sources)
    assert conf.tables and all(t.keys and t.columns for t in conf.tables), "Databricks has no discovery"
    assert {t.source for t in conf.tables} == {s.name for s in conf.sources}
    # One source of each seed format; the stateful ones parse through their state store operator there too.
    assert {s.format for s in conf.sources} == SEED_FORMATS
    assert {s.format for s in conf.sources if get_format(s.format).stateful} == {
        "qlik-json",
        "dataworks-json",
        "ibm-qrep-delimited",
    }
    topics = set(merged_bundle()["resources"]["pipelines"]["cdc_medallion"]["configuration"])
    for source in conf.sources:
        assert f"cdc_medallion.kafka.topics.{source.name}" in topics


SEED_FORMATS = {
    "debezium-json",
    "qlik-json",
    "dataworks-json",
    "ibm-qrep-delimited",
    "dts-avro",
    "shareplex-json",
    "canal-json",
}


# --- no secret in any YAML -------------------------------------------------------------------
_SENSITIVE_KEY = re.compile(r"password|passwd|secret|token|credential|api[_-]?key|private[_-]?key|jaas", re.I)
_ALLOWED_VALUE = re.compile(
    r"^(\{\{secrets/[^/{}]+/[^/{}]+\}\}|\{\{conf:[^{}]+\}\}|\$\{var\.[\w.-]+\})$"  # references only
)
_SECRET_LOOKING = [
    re.compile(r"dapi[0-9a-f]{32}"),  # Databricks personal access token
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access key id
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"password\s*=\s*\"(?!\{\{)[^\"]+\"", re.I),  # a JAAS config with a literal password
    re.compile(r"(?:xox[bap]|ghp|glpat)-?[0-9A-Za-z_-]{16,}"),  # Slack / GitHub / GitLab tokens
]


def yaml_files() -> list[Path]:
    files = {*REPO.glob("*.yml"), *REPO.glob("*.yaml")}
    for folder in ("pipelines", "conf", "expectations", ".ci"):
        files |= {*(REPO / folder).rglob("*.yml"), *(REPO / folder).rglob("*.yaml")}
    return sorted(files)


def _walk(node: Any, keys: tuple[str, ...] = ()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, (*keys, str(key)))
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value, keys)
    else:
        yield keys, node


def _sensitive(key: str) -> bool:
    return bool(_SENSITIVE_KEY.search(key)) and key not in ("secret_scope", "description")


def secrets_in(data: Any) -> list[str]:
    """Literal values under secret-looking keys, and anything that looks like a credential."""
    found = []
    for keys, value in _walk(data):
        where = ".".join(keys)
        if isinstance(value, str) and any(p.search(value) for p in _SECRET_LOOKING):
            found.append(f"{where}: credential-looking value")
            continue
        if value is None or value == "" or not keys:
            continue
        leaf, parent = keys[-1], keys[-2] if len(keys) > 1 else ""
        if leaf in ("secret", "scope") and parent:
            continue  # {secret: KEY, scope: SCOPE}: names where the secret lives, not the secret
        owner = parent if leaf in ("default", "value") else leaf  # a variable's default names its variable
        if _sensitive(owner) and not (isinstance(value, str) and _ALLOWED_VALUE.match(value)):
            found.append(f"{where}: {value!r} is not a secret reference")
    return found


def test_no_secret_in_any_yaml():
    files = yaml_files()
    assert BUNDLE in files and REPO / "conf" / "databricks.yml" in files
    problems = [f"{path.relative_to(REPO)}: {p}" for path in files for p in secrets_in(_load_any(path))]
    assert problems == []


def _load_any(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "leak",
    [
        {"kafka": {"sasl": {"password": "hunter2"}}},
        {"configuration": {"cdc_medallion.kafka.sasl_password": "hunter2"}},
        {"options": {"kafka.sasl.jaas.config": 'PlainLoginModule required username="u" password="hunter2";'}},
        {"variables": {"token": {"default": "dapi0123456789abcdef0123456789abcdef"}}},
        {"api_key": "abc"},
    ],
)
def test_secret_scan_finds_leaks(leak):
    assert secrets_in(leak)


@pytest.mark.parametrize(
    "fine",
    [
        {"sasl": {"password": {"secret": "kafka-password"}, "username": {"secret": "kafka-username"}}},
        {"options": {"kafka.ssl.truststore.password": "{{secrets/kafka/truststore-password}}"}},
        {"secret_scope": "${var.secret_scope}", "sasl": {"password": "{{conf:cdc_medallion.kafka.password}}"}},
    ],
)
def test_secret_scan_accepts_references(fine):
    assert secrets_in(fine) == []
