"""Expectation rules loaded from `expectations/*.yml`.

Files: `<layer>.yml` applies to every source of that layer, `<layer>.<format>.yml` adds rules
for one format. Each rule: name, constraint (SQL boolean), action (warn|drop|fail|quarantine),
description. A rule naming an unknown column or with bad SQL fails at startup, naming the
file and the rule.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_medallion.declarative.definitions import Action, Expectation
from cdc_medallion.errors import ConfigError

_RULE_KEYS = {"name", "constraint", "action", "description"}
_FILE_KEYS = {"rules", "description"}


def _load_file(file: Path) -> list[tuple[Expectation, Path]]:
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{file}: not valid YAML: {error}") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: top level must be a mapping with a 'rules' list")
    unknown = sorted(set(raw) - _FILE_KEYS)
    if unknown:
        raise ConfigError(f"{file}: key '{unknown[0]}': unknown key (known: {', '.join(sorted(_FILE_KEYS))})")
    rules = raw.get("rules") or []
    if not isinstance(rules, list):
        raise ConfigError(f"{file}: key 'rules': must be a list")
    loaded = []
    for index, rule in enumerate(rules):
        where = f"{file}: rules[{index}]"
        if not isinstance(rule, dict):
            raise ConfigError(f"{where}: must be a mapping")
        unknown = sorted(set(rule) - _RULE_KEYS)
        if unknown:
            raise ConfigError(f"{where}: key '{unknown[0]}': unknown key (known: {', '.join(sorted(_RULE_KEYS))})")
        for key in ("name", "constraint"):
            if not isinstance(rule.get(key), str) or not rule[key].strip():
                raise ConfigError(f"{where}: key '{key}': is required and must be text")
        try:
            action = Action(rule.get("action", "warn"))
        except ValueError:
            raise ConfigError(
                f"{where} ({rule['name']}): key 'action': must be one of {', '.join(a.value for a in Action)}"
            ) from None
        loaded.append((Expectation(rule["name"], rule["constraint"], action, rule.get("description", "")), file))
    return loaded


def load_rules(folder: Path | None, layer: str, fmt: str | None, schema: StructType) -> tuple[Expectation, ...]:
    """Rules for a layer (and format), checked against the schema they will run on."""
    if folder is None or not folder.is_dir():
        return ()
    files = [folder / f"{layer}.yml"]
    if fmt:
        files.append(folder / f"{layer}.{fmt}.yml")
    rules: list[tuple[Expectation, Path]] = []
    for file in files:
        if file.is_file():
            rules.extend(_load_file(file))
    names = [r.name for r, _ in rules]
    for rule, file in rules:
        if names.count(rule.name) > 1:
            raise ConfigError(f"{file}: rule {rule.name!r} is defined more than once for {layer}/{fmt}")
    check_rules(rules, schema)
    return tuple(rule for rule, _ in rules)


_CHECKED: set[tuple[str, str]] = set()  # (constraint, schema) pairs already analysed in this process


def check_rules(rules: list[tuple[Expectation, Path]], schema: StructType) -> None:
    """Analyse every constraint against an empty frame of `schema`, all in one plan.

    Each update of each run loads the rules again; analysing them one frame each cost seconds
    per update in a fresh JVM. One plan for all, remembered per process, costs one analysis;
    only when that fails is each rule analysed alone, to name the one at fault.
    """
    spark = SparkSession.getActiveSession()
    key = schema.json()
    pending = [(rule, file) for rule, file in rules if (rule.constraint, key) not in _CHECKED]
    if spark is None or not pending:
        return
    empty = spark.createDataFrame([], schema)
    try:
        empty.select(*[F.expr(r.constraint).cast("boolean") for r, _ in pending]).schema  # noqa: B018
    except Exception as error:
        for rule, file in pending:
            check_rule(rule, schema, file, empty)
        files = sorted({str(file) for _, file in pending})
        raise ConfigError(f"{', '.join(files)}: the rules cannot be analysed together: {error}") from None
    _CHECKED.update((rule.constraint, key) for rule, _ in pending)


def check_rule(rule: Expectation, schema: StructType, file: Path | str, empty: DataFrame | None = None) -> None:
    """Analyse the constraint against an empty frame of `schema`: bad SQL or columns fail here."""
    spark = SparkSession.getActiveSession()
    if spark is None:
        return
    try:
        frame = empty if empty is not None else spark.createDataFrame([], schema)
        frame.select(F.expr(rule.constraint).cast("boolean")).schema  # noqa: B018
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"{file}: rule {rule.name!r}: constraint {rule.constraint!r} is invalid: {first_line}"
        ) from None
