"""The JVM packages the engine needs, pinned in one place, fetched once from Maven Central.

Delta Lake (its version is the `delta-spark` pip pin's), Spark's Kafka source and its Avro
functions (Spark's own version). `make setup` runs `python -m cdc_medallion.jars`, which has
Maven copy the packages and their runtime dependencies into a cache folder, keeping only the
jars pyspark does not ship already (a second copy of a library at another version on the
classpath is a class conflict waiting to happen); every later session, and every rerun, reads
that folder and needs no network. Without the folder (a `pip install` with no Maven), Spark's
own resolver fetches the same packages (`spark.jars.packages`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pyspark

SCALA = "2.13"


def spark_version() -> str:
    return pyspark.__version__


def delta_version() -> str:
    return metadata.version("delta-spark")


def packages() -> list[str]:
    """Maven coordinates of what the engine loads, at the versions the pip pins imply."""
    spark = spark_version()
    spark_minor = ".".join(spark.split(".")[:2])
    return [
        f"io.delta:delta-spark_{spark_minor}_{SCALA}:{delta_version()}",
        f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{spark}",
        f"org.apache.spark:spark-avro_{SCALA}:{spark}",
    ]


def jar_folder() -> Path:
    """Where the fetched jars live: CDC_MEDALLION_JARS, else a per-version user cache folder."""
    given = os.environ.get("CDC_MEDALLION_JARS")
    if given:
        return Path(given)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "cdc-medallion" / "jars" / f"spark-{spark_version()}-delta-{delta_version()}"


_COMPLETE = ".complete"


def cached_jars() -> list[str] | None:
    """The jars of a complete fetch, or None when there is none yet."""
    folder = jar_folder()
    if not (folder / _COMPLETE).is_file():
        return None
    return sorted(str(p) for p in folder.glob("*.jar"))


def fetch(say=print) -> list[str]:
    """Fetch the packages with Maven into `jar_folder()` (once; later calls return the cache)."""
    found = cached_jars()
    if found is not None:
        return found
    mvn = shutil.which("mvn")
    if mvn is None:
        say("Maven (mvn) not found: Spark's own resolver fetches the packages into its Ivy cache")
        _resolve_with_spark()
        return []
    folder = jar_folder()
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(packages()), encoding="utf-8")
        copied = Path(work) / "jars"
        say(f"fetching {', '.join(packages())} from Maven Central")
        subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={copied}",
            ],
            check=True,
        )
        shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
        staged = Path(tempfile.mkdtemp(prefix=".fetching-", dir=_parent(folder)))
        for jar in sorted(copied.glob("*.jar")):
            if _artifact(jar.name) not in shipped:
                shutil.copy2(jar, staged / jar.name)
        (staged / _COMPLETE).write_text("\n".join(packages()) + "\n", encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staged, folder)  # a fetch killed halfway leaves no folder that looks complete
    return cached_jars() or []


def _resolve_with_spark() -> None:
    """Have Spark resolve `spark.jars.packages` once, so that sessions find them in its cache."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.master("local[1]").config("spark.jars.packages", ",".join(packages())).getOrCreate()
    session.stop()


def _parent(folder: Path) -> Path:
    folder.parent.mkdir(parents=True, exist_ok=True)
    return folder.parent


def _artifact(jar_name: str) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients`: the name without its version."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", jar_name)


def _pom(coordinates: list[str]) -> str:
    dependencies = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in (c.split(":") for c in coordinates)
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local</groupId><artifactId>cdc-medallion-jars</artifactId><version>0</version>"
        f"<dependencies>{dependencies}</dependencies></project>"
    )


if __name__ == "__main__":
    jars = fetch(say=lambda line: print(line, file=sys.stderr))
    print(f"{len(jars)} jars in {jar_folder()}")
