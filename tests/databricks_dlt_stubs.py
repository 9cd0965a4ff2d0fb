"""The official `databricks-dlt` stubs from PyPI, imported under a private name.

They are the published reference for the `dlt` module's signatures and decorator contract
(`tests/databricks_standins.py` cites them as [STUBS]). Their requirement `databricks-connect`
would replace pyspark, so only the stubs themselves are installed (`pip install --no-deps
--target`), once, into `~/.cache/cdc-medallion/` (the pin is `[tool.cdc-medallion]` in
pyproject.toml), and loaded as `databricks_dlt_stubs`, so that `import dlt` still finds nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
ALIAS = "databricks_dlt_stubs"


def pinned_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["tool"]["cdc-medallion"]["databricks-dlt"]


def stubs_folder() -> Path:
    """Where the stubs are installed: one folder per version, filled once."""
    version = pinned_version()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cdc-medallion"
    folder = cache / f"databricks-dlt-{version}"
    if (folder / "dlt" / "api.py").exists():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="databricks-dlt-", dir=cache))
    try:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
        subprocess.run([*pip, "--target", str(work), f"databricks-dlt=={version}"], check=True)
        try:
            work.rename(folder)  # atomic: a concurrent worker either wins or finds it there
        except OSError:
            if not (folder / "dlt" / "api.py").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def load_stubs() -> ModuleType:
    """The stubs' `dlt` package, as `databricks_dlt_stubs` (its `.api` holds the functions)."""
    if ALIAS in sys.modules:
        return sys.modules[ALIAS]
    package = stubs_folder() / "dlt"
    spec = importlib.util.spec_from_file_location(
        ALIAS, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[ALIAS] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[ALIAS]
        raise
    return module
