"""The Databricks bundle: valid against the official schema, complete, consistent, free of secrets.

The schema is `../shared/schemas/databricks-bundle.schema.json` (Databricks License, see the
files beside it). Its patterns use `\\p{L}`, which Python's `re` rejects, so `pattern` is checked
with the `regex` package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from cdc_medallion.config import load_conf
from cdc_medallion.formats import get_format
from tests.bundle_targets import BundleError, resolve

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
    # The schema the bundle creates (pipelines/cdc_medallion.catalog.yml), by reference: the name
    # each target gives it, and created before the pipeline.
    assert pipeline["catalog"] == "${var.catalog}" and pipeline["schema"] == SCHEMA_NAME
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
SCHEMA_NAME = "${resources.schemas.cdc_medallion.name}"


def test_bundle_builds_the_project_wheel():
    """`artifacts` builds this project's wheel where the environments look for it, with the build
    script (pip alone, out of tree); what it builds: test_the_wheel_has_a_new_version_each_build."""
    (artifact,) = merged_bundle()["artifacts"].values()
    assert artifact["type"] == "whl" and artifact["path"] == "."
    assert artifact["build"] == "python3 pipelines/build_wheel.py"
    (built,) = artifact["files"]
    wheel_glob = (REPO / "pipelines" / WHEEL_FROM_PIPELINES).resolve().relative_to(REPO)
    assert built["source"].removeprefix("./").startswith("dist/cdc_medallion-") and str(wheel_glob) == "dist/*.whl"
    with (REPO / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    assert project["name"] == "cdc-medallion"  # the wheel's file name: cdc_medallion-<version>-...
    # The core holds none of the runtime's packages, which it would replace (its ranges: test_pins.py).
    runtime = {Requirement(d).name for d in project["optional-dependencies"]["spark"]}
    assert runtime == {"pyspark", "pyarrow", "pandas", "numpy"}
    assert not runtime & {Requirement(d).name for d in project["dependencies"]}


def _checkout(into: Path) -> Path:
    """This checkout's files as a clone of it would hold them: tracked and new, nothing ignored."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"the files of this checkout cannot be listed with git: {error}")
    for name in filter(None, listed.decode().split("\0")):
        if (REPO / name).is_file():  # not one deleted but still tracked
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, into / name)
    return into


@pytest.mark.slow
def test_the_wheel_has_a_new_version_each_build_and_nothing_of_a_stale_build_folder(tmp_path):
    """The artifact's build command, run twice in a checkout as `bundle deploy` runs it: each
    wheel has a version of its own (serverless caches a wheel by its file name), and a module left
    in a stale build/ (deleted from the source since) is not in it, nor is the checkout written to."""
    checkout = _checkout(tmp_path / "checkout")
    stale = checkout / "build" / "lib" / "cdc_medallion" / "removed_module.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("REMOVED = True\n", encoding="utf-8")
    before = _tree(checkout)
    (artifact,) = merged_bundle()["artifacts"].values()
    (built,) = artifact["files"]
    root = checkout / artifact["path"]
    with (REPO / "pyproject.toml").open("rb") as file:
        declared = tomllib.load(file)["project"]["version"]
    sources = {str(p.relative_to(checkout)) for p in (checkout / "cdc_medallion").rglob("*.py")}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # its python3
    versions = []
    for _ in range(2):
        run = subprocess.run(artifact["build"], shell=True, cwd=root, env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
        (wheel,) = root.glob(built["source"])  # the older wheel is gone: `dist/*.whl` names one
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
            version = re.search(r"^Version: (\S+)$", archive.read(metadata).decode(), re.MULTILINE).group(1)
        assert wheel.name.startswith(f"cdc_medallion-{version}-")
        assert not [n for n in names if "removed_module" in n], "a stale build/ reached the wheel"
        assert {n for n in names if n.endswith(".py")} == sources
        versions.append(version)
    assert versions[0] != versions[1], f"two builds, one version: {versions[0]}"
    assert all(v.startswith(f"{declared}+") for v in versions), versions
    assert _tree(checkout) == before, "the build wrote into the source tree"


def _tree(root: Path) -> list[str]:
    """Every path under `root` but the wheel's folder, dist/."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.relative_to(root).parts[0] != "dist")


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


# --- each target as the CLI resolves it (tests/bundle_targets.py) -------------------------------
USER = "ada.lovelace@example.com"  # short name ada_lovelace
REQUIRED = {"catalog": "lake", "kafka_bootstrap_servers": "b-1.kafka:9096"}


def _deployed(target: str, **cli_vars: str) -> dict[str, Any]:
    return resolve(merged_bundle(), target, USER, {**REQUIRED, **cli_vars})


def _published(deployed: dict[str, Any]) -> tuple[str, str]:
    """(catalog, schema) of the pipeline, after checking that everything else names the same."""
    resources = deployed["resources"]
    pipeline = resources["pipelines"]["cdc_medallion"]
    (schema,) = resources["schemas"].values()
    where = (pipeline["catalog"], pipeline["schema"])
    assert where == (schema["catalog_name"], schema["name"]), "the pipeline publishes into the schema the bundle makes"
    log = pipeline["event_log"]
    assert (log["catalog"], log["schema"]) == where
    (volume,) = resources["volumes"].values()
    assert (volume["catalog_name"], volume["schema_name"]) == where
    (report,) = [t for t in resources["jobs"]["cdc_medallion_update"]["tasks"] if "spark_python_task" in t]
    parameters = report["spark_python_task"]["parameters"]
    assert parameters[parameters.index("--event-log-table") + 1] == ".".join([*where, log["name"]])
    assert parameters[parameters.index("--tables-schema") + 1] == ".".join(where)
    assert parameters[parameters.index("--output") + 1] == f"/Volumes/{where[0]}/{where[1]}/{volume['name']}/quality"
    return where


def test_dev_and_prod_publish_into_schemas_of_their_own(validator):
    """A table belongs to one pipeline: were dev and prod one schema, whichever deployed second
    would fail. dev's carries the user (mode development's prefix), prod's is the variable's."""
    dev = _deployed("dev")
    prod = _deployed("prod", prod_service_principal="6f3c1e0a-app-id")
    assert _published(dev) == ("lake", "dev_ada_lovelace_cdc_medallion")
    assert _published(prod) == ("lake", "cdc_medallion")
    assert dev["resources"]["pipelines"]["cdc_medallion"]["name"] == "[dev ada_lovelace] cdc-medallion"
    # Two developers do not share one either.
    other = resolve(merged_bundle(), "dev", "grace.hopper@example.com", REQUIRED)
    assert _published(other)[1] == "dev_grace_hopper_cdc_medallion"
    for deployed in (dev, prod):  # what each target deploys is a valid bundle (less the CLI's own keys)
        bundle = {k: v for k, v in deployed["bundle"].items() if k not in ("mode", "target")}
        assert _errors(validator, {**deployed, "bundle": bundle}) == []
    assert prod["resources"]["schemas"]["cdc_medallion"]["lifecycle"] == {"prevent_destroy": True}


def test_the_catalog_is_required_and_unset_stops_the_cli():
    """No `main` is assumed: without a catalog the CLI stops, naming --var and BUNDLE_VAR_catalog."""
    assert "default" not in merged_bundle()["variables"]["catalog"]
    with pytest.raises(BundleError, match=r'required variable catalog\. .*"--var", the BUNDLE_VAR_catalog'):
        resolve(merged_bundle(), "dev", USER, {"kafka_bootstrap_servers": "b:9092"})
    environ = {"BUNDLE_VAR_catalog": "analytics", "BUNDLE_VAR_kafka_bootstrap_servers": "b:9092"}
    assert _published(resolve(merged_bundle(), "dev", USER, environ=environ))[0] == "analytics"


# The first CLI release with each feature this bundle uses, from the CLI's CHANGELOG.md: an older
# CLI warns of an unknown field and deploys without it (a pipeline without its wheel).
CLI_FEATURES = {
    ("resources", "schemas"): "0.225.0",
    ("resources", "volumes"): "0.236.0",
    ("resources", "pipelines", "*", "environment"): "0.258.0",  # local wheels in a pipeline's environment
    ("lifecycle", "prevent_destroy"): "0.269.0",  # 0.267.0; right for several resources since 0.269.0
}
# bundle/config/mutator/verify_cli_version.go: the constraint syntax the CLI accepts.
_CLI_VERSION = r"(\d+\.\d+\.\d+(\-\w+)?|\d+\.\d+.\*|\d+\.\*)"
_CLI_CONSTRAINT = re.compile(rf"^(>=|<=|>|<|!=)? ?{_CLI_VERSION}(, (>=|<=|>|<|!=)? {_CLI_VERSION})?$")


def _uses(node: Any, path: tuple[str, ...]) -> bool:
    """Whether `path` (`*` any key) occurs anywhere in `node`."""
    if isinstance(node, dict):
        head = path[0]
        for key, value in node.items():
            if head in ("*", key) and (len(path) == 1 or _uses(value, path[1:])):
                return True
        return any(_uses(value, path) for value in node.values())
    return isinstance(node, list) and any(_uses(value, path) for value in node)


def test_the_bundle_requires_a_cli_that_knows_what_it_uses():
    bundle = merged_bundle()
    constraint = bundle["bundle"]["databricks_cli_version"]
    assert _CLI_CONSTRAINT.match(constraint), f"{constraint!r}: the CLI rejects this syntax"
    floor = re.match(r">= ?(\d+\.\d+\.\d+)$", constraint)
    assert floor, f"{constraint!r}: a lower bound, and no upper one that would refuse newer CLIs"
    used = [(path, version) for path, version in CLI_FEATURES.items() if _uses(bundle, path)]
    assert len(used) == len(CLI_FEATURES), "each feature listed is used (else drop it from the list)"
    needed = max(Version(version) for _, version in used)
    assert Version(floor.group(1)) >= needed, f"{constraint} admits CLIs older than {needed}"


def test_the_kafka_bound_of_the_bundle_is_the_engines_default():
    """conf/databricks.yml bounds each source with the bundle variable; its default is the engine's."""
    from cdc_medallion.sources.kafka import kafka_options
    from cdc_medallion.sources.kafka_settings import DEFAULT_MAX_OFFSETS_PER_TRIGGER

    deployed = _deployed("dev")
    default = deployed["variables"]["kafka_max_offsets_per_trigger"]["default"]
    assert int(default) == DEFAULT_MAX_OFFSETS_PER_TRIGGER
    configuration = deployed["resources"]["pipelines"]["cdc_medallion"]["configuration"]
    bounds = {
        source.name: kafka_options(source, configuration.get, lambda scope, key: "x", shaded=True)
        for source in load_conf(REPO / "conf" / "databricks.yml").sources
    }
    assert bounds and {name: o.get("maxOffsetsPerTrigger") for name, o in bounds.items()} == dict.fromkeys(
        bounds, str(DEFAULT_MAX_OFFSETS_PER_TRIGGER)
    )


def test_databricks_conf_loads_and_lists_tables_with_keys_and_columns():
    conf = load_conf(REPO / "conf" / "databricks.yml")
    assert conf.sources and all(s.kafka and s.input is None for s in conf.sources)
    assert conf.tables and all(t.keys and t.columns for t in conf.tables), "Databricks has no discovery"
    assert {t.source for t in conf.tables} == {s.name for s in conf.sources}
    # One source of each seed format; the stateful ones parse through applyInPandasWithState there too.
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
