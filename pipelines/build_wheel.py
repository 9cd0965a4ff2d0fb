"""The project's wheel for the bundle (databricks.yml `artifacts`): built out of the source tree,
with a version of its own each time.

    python3 pipelines/build_wheel.py [DIST]    # DIST defaults to dist/ beside pyproject.toml

Out of tree: pip builds a local project in place, and setuptools packs whatever `build/lib`
holds, so a module deleted from the source but left in a stale `build/` ships again. The wheel is
built from a fresh copy of what it is made of (pyproject.toml, README.md, `cdc_medallion/`) in a
temporary folder, which is removed afterwards; nothing is written into the source tree but DIST.

A version per build: serverless environments cache an installed wheel by its file name, so a
redeploy of the same `cdc_medallion-0.1.0-...whl` could run new driver code beside old worker
code. Each build's version is pyproject.toml's plus a PEP 440 local label, the build time in
nanoseconds (`0.1.0+1764590400123456789`), as the Databricks CLI's own `dynamic_version` names
patched wheels. That option is no substitute: the CLI swaps patched wheels into jobs' libraries
and environments only, never into a pipeline's environment (bundle/libraries/
switch_to_patched_wheels.go), which would keep installing the unpatched name. Older wheels of
this project are removed from DIST, so `dist/*.whl` names exactly the one just built.

The standard library and pip only: the bundle runs it as `python3` on the deploying machine.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Everything the wheel is built from (pyproject.toml's `readme` and `packages.find`).
SOURCES = ("pyproject.toml", "README.md", "cdc_medallion")
_SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
_VERSION_LINE = re.compile(r'^(version\s*=\s*")([^"]+)("\s*)$', re.MULTILINE)


def build_version(base: str, nanoseconds: int | None = None) -> str:
    """`base` with the build time as its local label (any label `base` had is replaced)."""
    stamp = time.time_ns() if nanoseconds is None else nanoseconds
    return f"{base.split('+', 1)[0]}+{stamp}"


def stamped_pyproject(text: str, version: str) -> str:
    """pyproject.toml's text with `[project] version` set to `version`; exactly one such line."""
    declared = tomllib.loads(text)["project"]["version"]
    stamped, count = _VERSION_LINE.subn(lambda m: m.group(1) + version + m.group(3), text)
    if count != 1 or tomllib.loads(stamped)["project"]["version"] != version:
        raise SystemExit(f'build_wheel: pyproject.toml must hold one `version = "{declared}"` line, found {count}')
    return stamped


def build(dist: Path, root: Path = ROOT) -> Path:
    """Builds the wheel into `dist` from a copy of `root`'s sources; returns its path."""
    dist = dist.resolve()
    with tempfile.TemporaryDirectory(prefix="cdc-medallion-wheel-") as work:
        project = Path(work) / "project"
        project.mkdir()
        for name in SOURCES:
            source = root / name
            if source.is_dir():
                shutil.copytree(source, project / name, ignore=_SKIPPED)
            else:
                shutil.copy2(source, project / name)
        pyproject = project / "pyproject.toml"
        base = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
        version = build_version(base)
        pyproject.write_text(stamped_pyproject(pyproject.read_text(encoding="utf-8"), version), encoding="utf-8")
        out = Path(work) / "dist"
        pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "--wheel-dir", str(out), str(project)], check=True, cwd=work)
        (wheel,) = out.glob("cdc_medallion-*.whl")
        dist.mkdir(parents=True, exist_ok=True)
        for old in dist.glob("cdc_medallion-*.whl"):
            old.unlink()
        return Path(shutil.move(str(wheel), dist / wheel.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", nargs="?", default=str(ROOT / "dist"), help="where the wheel goes (default: dist/)")
    wheel = build(Path(parser.parse_args(argv).dist))
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
