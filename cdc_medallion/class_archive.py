"""The driver JVM's class data sharing archive (JDK CDS): Spark's, Delta's and the connectors'
classes, parsed and verified once at setup and mapped into every later start.

A Spark driver loads thousands of classes from nearly three hundred jars on every start,
each class looked up jar by jar; with the archive a session starts in 7 s instead of 11.6 s and
a cold `cdc-medallion ingest` spends a quarter less CPU in its JVM (bench/HISTORY.md, 2026-11-28).
That is most of what a short run costs, and every subprocess run of the tests pays it.

`make setup` trains it (`python -m cdc_medallion.class_archive_training`): one pipeline run over
the embedded Debezium sample, with the JVM told to archive the classes it loaded when it exits.
This module only says where the archive is and how a driver maps it, so that the session
(`spark.py`) can import it without importing the pipeline the training runs.
The archive is named by what it depends on (the `java` binary, pyspark's jars and ours, where
they are), so a new JDK, jar set or checkout trains a new one; the JVM checks it again at every start and, if anything
still differs, starts without it (`-Xshare:auto`), never failing for it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
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
