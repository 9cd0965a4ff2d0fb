"""Ranges in pyproject.toml, exact versions in constraints.txt, and .venv holding exactly those.

The wheel is installed into Databricks environments on top of the runtime's own packages: an
exact pin there makes pip replace the runtime's package with another version, under libraries
built against the runtime's. So the wheel declares ranges (each with a floor and a ceiling), and
local installs are locked by constraints.txt (`make setup` installs with `-c constraints.txt`),
which pins every package, transitive ones included. That the floors work is
`tests/test_worker_env.py`'s: it parses every format with the core at its floors.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
CONSTRAINTS = REPO / "constraints.txt"
SELF = "cdc-medallion"


def project() -> dict:
    with (REPO / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]


def locked() -> dict[str, Version]:
    """constraints.txt as {canonical name: version}; every line `name==version` or a comment."""
    pins: dict[str, Version] = {}
    for number, line in enumerate(CONSTRAINTS.read_text(encoding="utf-8").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        requirement = Requirement(text)
        specifiers = list(requirement.specifier)
        exact = len(specifiers) == 1 and specifiers[0].operator == "=="
        assert exact and not requirement.extras and requirement.marker is None, f"constraints.txt:{number}: {line!r}"
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"constraints.txt:{number}: {requirement.name} pinned twice"
        pins[name] = Version(specifiers[0].version)
    return pins


def declared() -> list[tuple[str, Requirement]]:
    """Every requirement of pyproject.toml but the project's own extras, with where it is."""
    found = [("dependencies", Requirement(text)) for text in project()["dependencies"]]
    for extra, texts in project()["optional-dependencies"].items():
        found += [(f"optional-dependencies.{extra}", Requirement(text)) for text in texts]
    return [(where, r) for where, r in found if canonicalize_name(r.name) != SELF]


def test_the_core_declares_ranges_not_pins():
    """Each core requirement has a floor and a ceiling and nothing exact: a runtime whose own
    version lies in the range keeps it."""
    for text in project()["dependencies"]:
        operators = sorted(s.operator for s in Requirement(text).specifier)
        assert operators == ["<", ">="], f"{text!r}: give a floor (>=) and a ceiling (<), not an exact version"


def test_requires_python_admits_the_runtimes_next_python():
    """Serverless environments 4 and 5 run Python 3.12; nothing in the wheel refuses 3.13 or 3.14."""
    python = SpecifierSet(project()["requires-python"])
    assert [v for v in ("3.11", "3.12", "3.13", "3.14") if not python.contains(v)] == []
    assert not python.contains("3.10")  # the code uses 3.11 (tomllib, typing)


def test_every_requirement_is_locked_within_its_range():
    pins = locked()
    problems = []
    for where, requirement in declared():
        pin = pins.get(canonicalize_name(requirement.name))
        if pin is None:
            problems.append(f"{where}: {requirement} has no pin in constraints.txt")
        elif not requirement.specifier.contains(pin, prereleases=True):
            problems.append(f"{where}: {requirement} does not admit the pinned {pin}")
    assert problems == []


def _needed(name: str, extras: frozenset[str], seen: set[tuple[str, frozenset[str]]]) -> None:
    """Adds to `seen` the installed distributions `name[extras]` needs, transitively."""
    key = (canonicalize_name(name), extras)
    if key in seen:
        return
    seen.add(key)
    for text in metadata.distribution(name).requires or ():
        requirement = Requirement(text)
        wanted = [{"extra": extra} for extra in extras] or [{"extra": ""}]
        if requirement.marker is None or any(requirement.marker.evaluate(env) for env in wanted):
            _needed(requirement.name, frozenset(requirement.extras), seen)


def test_the_environment_is_the_lock():
    """What `make setup` installed is the lock: every package `.[dev]` needs, transitively, is
    pinned, and installed at its pin (an install without `-c constraints.txt` fails here)."""
    pins = locked()
    seen: set[tuple[str, frozenset[str]]] = set()
    _needed(SELF, frozenset({"dev"}), seen)
    needed = {name for name, _ in seen} - {SELF}
    assert "pydantic" in needed and "pyspark" in needed  # the walk reached the core and the extras
    assert sorted(needed - set(pins)) == [], "needed but not locked in constraints.txt"
    wrong = {n: (metadata.version(n), str(pins[n])) for n in sorted(needed) if Version(metadata.version(n)) != pins[n]}
    assert wrong == {}, "installed at another version than constraints.txt pins (run make setup)"
