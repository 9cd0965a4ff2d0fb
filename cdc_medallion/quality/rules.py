"""Expectation rules loaded from `expectations/*.yml`.

Files: `<layer>.yml` applies to every source of that layer, `<layer>.<format>.yml` adds rules
for one format. Each rule: name, constraint (SQL boolean), action (warn|drop|fail|quarantine),
description. A rule naming an unknown column or with bad SQL fails at startup, naming the
file and the rule.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_medallion.declarative.definitions import Action, Expectation
from cdc_medallion.errors import ConfigError
from cdc_medallion.strict import NullMeansAbsent, check, load_yaml


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


class Rule(NullMeansAbsent):
    """One rule: a SQL boolean every row is checked against, and what befalls a row that fails it."""

    name: Annotated[str, AfterValidator(_text)]
    constraint: Annotated[str, AfterValidator(_text)]
    action: Action = Action.WARN
    description: str = ""


def _warn_or_fail(action: Action) -> Action:
    if action not in (Action.WARN, Action.FAIL):
        raise ValueError(f"must be warn or fail, got {action.value!r}")
    return action


class StaleKeysCheck(NullMeansAbsent):
    """`stale_keys:` in gold.yml: what a gold table with keys a quarantined change left stale is
    to the quality checks (`runner/stale_keys.py` says when a key is stale): a failed check
    (`fail`, the default) or a warning (`warn`)."""

    action: Annotated[Action, AfterValidator(_warn_or_fail)] = Action.FAIL
    description: str = ""


class RuleFile(NullMeansAbsent):
    """An `expectations/*.yml` file."""

    description: str = ""
    rules: tuple[Rule, ...] = ()


class GoldRuleFile(RuleFile):
    """gold.yml, the one file that also says what stale keys are to the checks: a `stale_keys`
    key in any other file is a mistake, named as one."""

    stale_keys: StaleKeysCheck = StaleKeysCheck()


GOLD_RULES = "gold"  # gold.yml: the rules of every table's change feed, and `stale_keys`


def _load_file(file: Path) -> list[tuple[Expectation, Path]]:
    """The file's rules, read and checked once per version of the file in this process: every
    update declares each gold table's rules, hundreds of times the same file."""
    stat = file.stat()
    return list(_load_version(file, stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=64)
def _load_version(file: Path, _mtime_ns: int, _size: int) -> tuple[tuple[Expectation, Path], ...]:
    raw = load_yaml(file) or {}
    listed = raw.get("rules") if isinstance(raw, dict) else None
    for i, item in enumerate(listed if isinstance(listed, list) else []):
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str):  # a person looks a rule up by its name, not by counting
            check(Rule, item, f"{file}: rule {name!r}", at=f"rules[{i}]")
    loaded = _rule_file(file, _mtime_ns, _size)
    return tuple((Expectation(r.name, r.constraint, r.action, r.description), file) for r in loaded.rules)


def stale_keys_check(folder: Path | None) -> StaleKeysCheck:
    """The `stale_keys` setting of `<folder>/gold.yml` (the default where there is none)."""
    file = folder / f"{GOLD_RULES}.yml" if folder is not None else None
    if file is None or not file.is_file():
        return StaleKeysCheck()
    stat = file.stat()
    loaded = _rule_file(file, stat.st_mtime_ns, stat.st_size)
    assert isinstance(loaded, GoldRuleFile)
    return loaded.stale_keys


def read_rule_file(file: Path) -> RuleFile:
    """A rule file read and checked: gold.yml as a `GoldRuleFile`, any other as a `RuleFile`."""
    model = GoldRuleFile if file.name == f"{GOLD_RULES}.yml" else RuleFile
    return check(model, load_yaml(file) or {}, str(file))


@lru_cache(maxsize=64)
def _rule_file(file: Path, _mtime_ns: int, _size: int) -> RuleFile:
    return read_rule_file(file)


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

    Each update of each run loads the rules again, and a fresh JVM analyses each frame slowly:
    one frame per rule cost an analysis per rule per update. One plan for all, remembered per
    process, costs one analysis; only when that fails is each rule analysed alone, to name the
    one at fault.
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
