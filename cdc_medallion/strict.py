"""Strict models for what users write (conf files, rule files, format options, Kafka blocks).

A silently ignored key in a CDC pipeline means silently wrong data, so every model forbids
unknown keys, and a mistake is one line naming the file, the key path and what is allowed:
pydantic's own multi-line report is for developers, not for someone fixing a YAML file.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from cdc_medallion.errors import ConfigError

Model = TypeVar("Model", bound=BaseModel)


class StrictModel(BaseModel):
    """Unknown keys are errors; a parsed value never changes afterwards."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NullMeansAbsent(StrictModel):
    """A file model where `key:` with nothing after it (YAML null) is the key left out: its default,
    or "is required". Format options do not take this, since there null can mean something."""

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, Mapping) else data


class KeyProblem(ValueError):
    """A validator's complaint about one key of its model (a rule across keys): the error then
    names that key rather than the model that holds it."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


def load_yaml(file: Path) -> Any:
    """A YAML file's data; a syntax error is one line naming the file, the line and the problem."""
    try:
        return yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or " ".join(str(error).split())
        raise ConfigError(f"{file}: not valid YAML{where}: {problem}") from None


def check(model: type[Model], data: Any, where: str, at: str = "", base: Path | None = None) -> Model:
    """`data` as a `model`, or a ConfigError naming `where` (a file) and the key path under `at`.
    Paths in `data` are relative to `base`, the folder of the file they were written in."""
    try:
        return model.model_validate(data, context=None if base is None else {"base": base})
    except ValidationError as error:
        raise ConfigError(one_line(error, model, where, at)) from None


def one_line(error: ValidationError, model: type[BaseModel], where: str, at: str = "") -> str:
    """The first of pydantic's errors as `where: key 'a.b[0].c': reason`, and how many others.

    An unknown key goes first: it is most often a misspelled one, which is also reported missing.
    """
    path, reason = describe(_first(error), model)
    path = _join(at, path)
    text = f"{where}: key '{path}': {reason}" if path else f"{where}: top level: {reason}"
    others = error.error_count() - 1
    return text + (f" (and {others} more {'error' if others == 1 else 'errors'})" if others else "")


def nested_problem(error: ValidationError, model: type[BaseModel], key: str = "") -> KeyProblem:
    """An error of a model validated inside a validator, raised again for the outer model."""
    path, reason = describe(_first(error), model)
    return KeyProblem(_join(key, path), reason)


def _first(error: ValidationError) -> Mapping[str, Any]:
    errors = error.errors()
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def describe(error: Mapping[str, Any], model: type[BaseModel]) -> tuple[str, str]:
    """(key path, reason) of one pydantic error, the reason saying what is allowed."""
    loc = tuple(part for part in error["loc"] if part != "[key]")  # a mapping's key: its path is enough
    kind, value, context = error["type"], error.get("input"), error.get("ctx") or {}
    problem = context.get("error")
    if isinstance(problem, KeyProblem):
        return _join(_path(loc), problem.key), str(problem)
    if isinstance(problem, Exception):
        return _path(loc), str(problem)
    if kind == "extra_forbidden":
        known = _fields(_annotation_at(model, loc[:-1]))
        return _path(loc), f"unknown key (known: {', '.join(sorted(known)) or 'none'})"
    if kind == "missing":
        choices = _choices(_annotation_at(model, loc))
        return _path(loc), "is required" + (f" (one of {', '.join(choices)})" if choices else "")
    if kind in ("literal_error", "enum"):
        choices = _choices(_annotation_at(model, loc)) or [context.get("expected", "?")]
        return _path(loc), f"must be one of {', '.join(choices)}, got {_shown(value)}"
    if kind in ("greater_than_equal", "greater_than"):
        bound = context.get("ge", context.get("gt"))
        bound = f"{bound:g}" if isinstance(bound, float) else bound
        wanted = f"{bound} or more" if kind == "greater_than_equal" else f"more than {bound}"
        return _path(loc), f"must be {wanted}, got {_shown(value)}"
    if kind in _KINDS:
        return _path(loc), f"must be {_KINDS[kind]}, got {type(value).__name__} {_shown(value)}"
    return _path(loc), str(error["msg"]).splitlines()[0]


_KINDS = {
    "string_type": "text",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "list",
    "tuple_type": "list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _join(prefix: str, path: str) -> str:
    if not prefix or not path:
        return prefix or path
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


def _fields(model: Any) -> dict[str, Any]:
    """A model's keys as they are written (an alias where a field has one)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return {}
    return {field.alias or name: field.annotation for name, field in model.model_fields.items()}


def _unwrap(annotation: Any) -> Any:
    """`X | None` and `Annotated[X, ...]` as `X`."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The type a key path leads to in `model` (None where it cannot be followed)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        origin, args = typing.get_origin(current), typing.get_args(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            current = _fields(current).get(part)
        elif origin in (list, tuple, set, frozenset, Sequence) and args:
            current = args[0]
        elif origin in (dict, Mapping) and len(args) == 2:
            current = args[1]
        else:
            return None
    return _unwrap(current)


def _choices(annotation: Any) -> list[str]:
    if typing.get_origin(annotation) is typing.Literal:
        return [str(choice) for choice in typing.get_args(annotation)]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(member.value) for member in annotation]
    return []
