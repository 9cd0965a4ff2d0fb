"""Measuring another engine: the old one (delta-rs commits, the driver's Arrow route) back to back
with this one, each with its own harness.

    BENCH_ENGINE_ROOT=/work/old-engine python -m bench      # or --engine-root /work/old-engine

runs `python -m bench` with the same arguments (less the engine root), the same virtualenv, its
working directory and PYTHONPATH at that root: the harness and the engine of that checkout. A
root that is missing and is the default old root becomes a git worktree of `OLD_ENGINE_COMMIT`.
The inputs are this checkout's (`BENCH_WORK`, default bench/.work), so both engines read the very
same bytes and the 10M input (29 GB) is made once; the results go to that root's bench/results.

Two things are added to what the old harness writes, and nothing it measures is changed:

- the growth part's seconds per stage: the old harness times them (`ours.run`) but its growth
  part kept only the total; a shim run in the old harness's process keeps them too;
- the `cold` part, which the old harness does not have: measured here (bench/cold.py) with that
  root's `cdc-medallion ingest`, and added to its latest.json.

The two runs must not overlap: they share the inputs, and the machine has two cores.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OLD_ENGINE_COMMIT = "d072676"  # the last commit on delta-rs and the driver's Arrow route
OLD_ENGINE_ROOT = Path("/work/old-engine")

# Run as `python -c` in the other root's process: its bench package is the old harness. The old
# growth part calls `ours.run` once per size, in ascending order, and keeps only the total.
GROWTH_STAGES_SHIM = """
import sys
import bench.ours
import bench.run

runs = []
measure = bench.ours.run


def recording(*args, **kwargs):
    result = measure(*args, **kwargs)
    runs.append(result)
    return result


bench.ours.run = recording
growth = bench.run.growth


def growth_by_stage(spark, sampler, args):
    runs.clear()
    results = growth(spark, sampler, args)
    for size, run in zip(sorted(results, key=int), runs, strict=True):
        results[size]["stages_s"] = {stage: round(s, 2) for stage, s in run.stages.items()}
    return results


bench.run.growth = growth_by_stage
sys.exit(bench.run.main(sys.argv[1:]))
"""


def is_this_repo(root: Path) -> bool:
    return root.resolve() == REPO


def environment(root: Path) -> dict[str, str]:
    """This process's environment with `root`'s code first on the path (the driver's and, through
    the JVM, the Python workers'), run by this virtualenv's Python."""
    env = dict(os.environ)
    env.pop("BENCH_ENGINE_ROOT", None)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYSPARK_PYTHON"] = sys.executable
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def ensure_root(root: Path, say=print) -> None:
    """The default old root, made a git worktree of the old engine's commit if it is missing."""
    if (root / "cdc_medallion").is_dir() and (root / "bench").is_dir():
        return
    if root.resolve() != OLD_ENGINE_ROOT or root.exists():
        raise SystemExit(f"bench: {root} is not a checkout of this project (no cdc_medallion/ and bench/)")
    say(f"engine: git worktree add {root} {OLD_ENGINE_COMMIT}")
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", str(root), OLD_ENGINE_COMMIT], check=True)


def without(argv: list[str], options: set[str]) -> list[str]:
    """`argv` less each of `options`, given as `--option value` or `--option=value`."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif arg.split("=", 1)[0] not in options:
            kept.append(arg)
    return kept


def run_other(root: Path, argv: list[str], args: Any, say=print) -> int:
    """`python -m bench` at `root` (its harness, its engine), then its cold ingest."""
    from bench import cold
    from bench.run import carried

    ensure_root(root, say)
    root = root.resolve()
    results = (args.results or root / "bench" / "results").resolve()
    others = sorted(args.parts - {"cold"})
    argv = without(argv, {"--engine-root", "--parts", "--results"})
    env = environment(root) | {"BENCH_WORK": str(args.work.resolve()), "BENCH_PARTS": ",".join(others)}
    latest = results / "latest.json"
    before = carried(latest, {"cold"})  # the other harness does not know the part: it would drop it
    code = 0
    if others:
        say(f"engine: the harness and engine at {root} ({commit_of(root)}), parts {', '.join(others)}")
        command = [sys.executable, "-c", GROWTH_STAGES_SHIM, *argv, "--results", str(results)]
        code = subprocess.run(command, cwd=root, env=env, check=False).returncode
    if "cold" not in args.parts:
        if before and latest.is_file():
            measured = json.loads(latest.read_text(encoding="utf-8"))
            measured["cold"] = before["cold"]
            measured.setdefault("carried_from", {}).update(before["carried_from"])
            latest.write_text(json.dumps(measured, indent=2) + "\n", encoding="utf-8")
        return code
    if others and latest.is_file():
        measured = json.loads(latest.read_text(encoding="utf-8"))
    else:  # the other harness did not run now: what its latest.json holds is carried
        measured = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "n": args.n, "parts": []}
        measured |= carried(latest, {"formats", "peer", "growth", "incremental", "tables"})
    try:
        measured["cold"] = cold.measure(root, args.work / "cold", say=say) | {"measured_by": "bench/engine.py"}
    except Exception as error:
        measured.setdefault("errors", {})["cold"] = f"{type(error).__name__}: {str(error).strip()[:500]}"
        say(f"cold failed: {measured['errors']['cold']}")
        code = code or 1
    measured["parts"] = sorted({*measured.get("parts", ()), "cold"})
    measured["engine"] = {"root": str(root), "commit": commit_of(root)}
    results.mkdir(parents=True, exist_ok=True)
    latest.write_text(json.dumps(measured, indent=2) + "\n", encoding="utf-8")
    say(f"results: {latest}")
    return code


def commit_of(root: Path) -> str:
    """The checkout's commit, `+` when its tracked files (results aside) differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        status = ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"]
        dirty = subprocess.run(status, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "") if head.returncode == 0 else "unknown"
