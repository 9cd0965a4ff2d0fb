"""The driver JVM's class data sharing archive (JDK CDS): Spark's, Delta's and the connectors'
classes, parsed and verified once at setup and mapped into every later start.

A Spark driver loads thousands of classes from nearly three hundred jars on every start,
each class looked up jar by jar; with the archive a session starts in 7 s instead of 11.6 s and
a cold `cdc-medallion ingest` spends a quarter less CPU in its JVM (bench/HISTORY.md, 2026-11-28).
That is most of what a short run costs, and every subprocess run of the tests pays it.

`make setup` trains it (`python -m cdc_medallion.class_archive`): one pipeline run over the
embedded Debezium sample, with the JVM told to archive the classes it loaded when it exits.
The archive is named by what it depends on (the `java` binary, pyspark's jars and ours, where
they are), so a new JDK, jar set or checkout trains a new one; the JVM checks it again at every start and, if anything
still differs, starts without it (`-Xshare:auto`), never failing for it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from cdc_medallion.jars import cache_root, cached_jars

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "debezium" / "shop.jsonl"
SAMPLE_KEYS = ["customers=id", "orders=order_id", "order_lines=order_id,line_no"]
#: Set to 0 to start without the archive (a comparison, or a JVM that refuses it).
SWITCH = "CDC_MEDALLION_CLASS_ARCHIVE"


def archive_path() -> Path | None:
    """Where the archive of this JDK and jar set lives, or None without a `java` on PATH."""
    java = shutil.which("java", path=_java_path())
    if java is None:
        return None
    real = Path(java).resolve()
    # The JVM maps an archive only for the class path it was made with, folders included: a
    # second checkout (its own .venv) needs an archive of its own.
    # The JVM also checks each jar's modification time and size: a .venv made again in the same
    # place has the same paths but new jars, and an archive named by paths alone went unused.
    jars = [*sorted((Path(pyspark.__file__).resolve().parent / "jars").glob("*.jar")), *map(Path, cached_jars() or [])]
    identity = [f"{real}:{real.stat().st_mtime_ns}", *(f"{j}:{j.stat().st_mtime_ns}:{j.stat().st_size}" for j in jars)]
    digest = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:16]
    return cache_root().parent / "class-archives" / f"driver-{digest}.jsa"


def _java_path() -> str | None:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin") if home else None


def java_options() -> str:
    """The driver's options that map the archive, or "" when there is none (yet)."""
    if os.environ.get(SWITCH) == "0":
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


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
    command = [sys.executable, "-m", "cdc_medallion.class_archive", "--sample-run", str(storage)]
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
