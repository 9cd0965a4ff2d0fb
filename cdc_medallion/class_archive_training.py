"""Training the driver's class archive (`class_archive.py`), once per JDK, jar set and checkout:
`make setup` runs `python -m cdc_medallion.class_archive_training`.

The training is a pipeline run (the CLI's `ingest` of the embedded sample), so it lives apart
from `class_archive.py`, which the session imports: the session must not import the pipeline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from cdc_medallion.class_archive import SAMPLE, SAMPLE_KEYS, SWITCH, archive_path


def train(say=print) -> Path | None:
    """Run the sample once in a JVM that archives its classes at exit; keep the archive."""
    path = archive_path()
    if path is None:
        say("no java on PATH: no class archive")
        return None
    if path.is_file():
        return path
    if not SAMPLE.is_file():
        say(f"{SAMPLE} not found: no class archive (the driver starts without one)")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    say(f"training the driver's class archive on {SAMPLE.name} (once per JDK, jar set and checkout)")
    with tempfile.TemporaryDirectory(prefix="cdc-medallion-class-archive-") as storage:
        code = _run_once(Path(storage), partial)
    if code != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        say(f"the training run ended with {code}: no class archive (the driver starts without one)")
        return None
    partial.replace(path)  # whole or absent: a start never maps half an archive
    say(f"class archive: {path} ({path.stat().st_size // 2**20} MiB)")
    return path


def _run_once(storage: Path, archive: Path) -> int:
    """One pipeline run in a child process, whose JVM is started to dump `archive` at exit."""
    jvm = os.environ.get("CDC_MEDALLION_JAVA_OPTIONS", "")
    # The archive holds classes, not compiled code: the JIT's quick tier alone trains the same
    # archive, without the optimizing tier's compilations of a run that then ends.
    archiving = f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
    env = {**os.environ, SWITCH: "0", "CDC_MEDALLION_JAVA_OPTIONS": f"{jvm} {archiving}"}
    command = [sys.executable, "-m", "cdc_medallion.class_archive_training", "--sample-run", str(storage)]
    return subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=False).returncode


def _sample_run(storage: Path) -> int:
    """The training run: the sample through every layer, then the JVM's normal exit, awaited
    (it writes the archive as it exits, after this process would otherwise be gone)."""
    from pyspark import SparkContext

    from cdc_medallion.cli import main
    from cdc_medallion.spark import get_spark

    args = ["ingest", "--format", "debezium-json", "--quiet", "--input", str(SAMPLE), "--layout", "kafka-dump"]
    args += ["--storage", str(storage / "tables")]
    for key in SAMPLE_KEYS:
        args += ["--key", key]
    code = main(args)
    jvm = SparkContext._gateway.proc  # pyspark's handle on the JVM it started
    get_spark().stop()
    jvm.stdin.close()  # the JVM exits when its stdin closes
    jvm.wait(timeout=600)
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["--sample-run"]:
        sys.exit(_sample_run(Path(sys.argv[2])))
    train()
