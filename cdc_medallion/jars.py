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
from collections.abc import Callable
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
    return cache_root() / f"spark-{spark_version()}-delta-{delta_version()}"


def cache_root() -> Path:
    """The user cache folder under which each set of fetched jars has a folder of its own."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "cdc-medallion" / "jars"


_COMPLETE = ".complete"


def cached_jars() -> list[str] | None:
    """The jars of a complete fetch, or None when there is none yet."""
    return complete_jars(jar_folder())


def fetch(say=print) -> list[str]:
    """Fetch the packages with Maven into `jar_folder()` (once; later calls return the cache)."""
    found = cached_jars()
    if found is not None:
        return found
    if shutil.which("mvn") is None:
        say("Maven (mvn) not found: Spark's own resolver fetches the packages into its Ivy cache")
        _resolve_with_spark()
        return []
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    copy_packages(packages(), jar_folder(), keep=lambda jar: _artifact(jar) not in shipped, say=say)
    return cached_jars() or []


def complete_jars(folder: Path) -> list[str] | None:
    """The jars of a complete `copy_packages` into `folder`, or None when there is none yet."""
    if not (folder / _COMPLETE).is_file():
        return None
    return sorted(str(p) for p in folder.glob("*.jar"))


def copy_packages(
    coordinates: list[str], folder: Path, keep: Callable[[str], bool] = lambda jar: True, say=print
) -> list[str]:
    """Have Maven copy `coordinates` and their runtime dependencies into `folder` (once).

    `keep` picks jars by file name. The folder appears whole or not at all: a fetch killed
    halfway leaves no folder that looks complete. Raises `FileNotFoundError` without `mvn`.
    """
    found = complete_jars(folder)
    if found is not None:
        return found
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FileNotFoundError(f"Maven (mvn) is needed to fetch {', '.join(coordinates)}")
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(coordinates), encoding="utf-8")
        copied = Path(work) / "jars"
        say(f"fetching {', '.join(coordinates)} from Maven Central")
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
        staged = Path(tempfile.mkdtemp(prefix=".fetching-", dir=_parent(folder)))
        for jar in sorted(copied.glob("*.jar")):
            if keep(jar.name):
                shutil.copy2(jar, staged / jar.name)
        (staged / _COMPLETE).write_text("\n".join(coordinates) + "\n", encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staged, folder)
    return complete_jars(folder) or []


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
