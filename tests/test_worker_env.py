"""Spark workers holding only the core dependencies parse every format, as on Databricks.

The bundle installs the project's wheel into the pipeline's environment, on top of the runtime's
own pyspark, pyarrow, pandas and numpy; nothing of the `local` extra (delta-spark, deltalake,
GX) is there. This test builds that environment: a venv without system site packages, holding
the `spark` extra at constraints.txt's pins (the runtime's own packages) and the core
dependencies of pyproject.toml at their floors, the oldest versions the wheel admits and so the
oldest a runtime's own may be (cached under `~/.cache/cdc-medallion/`, rebuilt when a range or a
pin changes), plus the wheel the bundle's build script builds from this checkout.
`tests/worker_parse.py` runs there, driver and Python workers alike (PYSPARK_PYTHON), over every
embedded sample and a generated history of each format without one. A parser that imported an
undeclared package fails the Spark job, or quarantines its messages naming the ImportError.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cdc_medallion.config import load_conf
from cdc_medallion.formats import format_names, get_format
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.output import generate
from cdc_medallion.lines import lines_of
from tests.test_pins import locked

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
# A parser's exception becomes a quarantined event naming it (formats/base.py), so an import that
# fails inside a parser shows in the events' errors rather than failing the job.
_IMPORT_FAILURE = re.compile(r"ImportError|ModuleNotFoundError|No module named")
LOCAL_ONLY = ("deltalake", "delta", "great_expectations")  # the `local` extra's packages


def worker_requirements() -> list[str]:
    """The core dependencies at their floors and the runtime's own packages (the `spark` extra)
    at their pins; what those need, pip resolves."""
    with (REPO / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    pins = locked()
    floors = [f"{r.name}=={_floor(r)}" for r in map(Requirement, project["dependencies"])]
    runtime = [Requirement(text) for text in project["optional-dependencies"]["spark"]]
    return [*floors, *(f"{r.name}=={pins[canonicalize_name(r.name)]}" for r in runtime)]


def _floor(requirement: Requirement) -> str:
    (floor,) = [s.version for s in requirement.specifier if s.operator == ">="]  # test_pins: each has one
    return floor


def lean_python() -> Path:
    """A venv with exactly `worker_requirements()`, made once per set of pins."""
    requirements = worker_requirements()
    key = hashlib.sha1("\n".join([sys.version, *requirements]).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cdc-medallion"
    folder = cache / f"worker-venv-{key}"
    python = folder / "bin" / "python"
    if (folder / "ready").exists():
        return python
    work = cache / f"worker-venv-{key}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    venv.create(work, system_site_packages=False, with_pip=True)
    pip = [str(work / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *requirements], check=True)
    (work / "ready").touch()
    try:
        work.rename(folder)  # a venv's interpreter finds its packages relative to itself
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
        if not (folder / "ready").exists():
            raise
    return python


def project_wheel(out: Path) -> Path:
    """This checkout's wheel, built as the bundle builds it (pipelines/build_wheel.py: out of
    tree), unpacked into `out` (a pure-Python wheel installs by unpacking)."""
    dist = out / "dist"
    subprocess.run([sys.executable, str(REPO / "pipelines" / "build_wheel.py"), str(dist)], check=True, cwd=out)
    (wheel,) = dist.glob("cdc_medallion-*.whl")
    site = out / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def test_every_format_parses_on_workers_with_only_the_core(tmp_path):
    python = lean_python()
    for module in LOCAL_ONLY:  # the venv really is lean
        probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, cwd=tmp_path)
        assert probe.returncode != 0, f"{module} is importable in the worker venv"
    site = project_wheel(tmp_path)

    local = REPO / "conf" / "local.yml"
    sampled = {s.format for s in load_conf(local).sources}
    others = sorted(set(shipped_formats()) - sampled)
    generated = tmp_path / "generated"
    generate(generate_history(tables=2, transactions=12, seed=7), others, generated)
    confs = [local, generated / "conf.yml"]

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH=str(site), PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    script = shutil.copy(REPO / "tests" / "worker_parse.py", tmp_path / "worker_parse.py")  # not beside cdc_medallion
    run = subprocess.run(
        [str(python), script, *map(str, confs)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=540
    )
    assert run.returncode == 0, run.stderr[-4000:]
    lean = json.loads(lines_of(run.stdout.strip())[-1])

    formats = {s.name: s.format for path in confs for s in load_conf(path).sources}
    assert set(formats.values()) == set(shipped_formats()) and sorted(lean) == sorted(formats)
    for name, rows in lean.items():
        missing = [error for _, _, _, error in rows if error and _IMPORT_FAILURE.search(error)]
        assert not missing, f"{name} ({formats[name]}): {missing[0]}"
        assert any(kind == "change" for kind, *_ in rows), f"{name} ({formats[name]}): no change event parsed"


def shipped_formats() -> list[str]:
    """The formats the package ships (tests register formats of their own, e.g. `pair-lines`)."""
    return [name for name in format_names() if get_format(name).__module__.startswith("cdc_medallion.")]
