"""Detecting the JVM Delta Lake (delta-spark) backend.

delta-spark needs its jars on Spark's classpath, normally downloaded from Maven Central via
`configure_spark_with_delta_pip`. Where they resolve (a user's machine with internet access,
Databricks) Spark's own Delta writer can be used; where they do not (these build machines
have no Maven access), the delta-rs backend is used. Both write the same Delta protocol.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"


def delta_spark_status(spark: SparkSession) -> tuple[bool, str]:
    """(available, reason): whether the running JVM can load Delta's Spark extension."""
    try:
        spark._jvm.java.lang.Class.forName(EXTENSION)  # type: ignore[union-attr]
    except Exception:
        return False, (
            f"{EXTENSION} is not on the Spark classpath (delta-spark's jars come from Maven Central, "
            "which this machine cannot reach); the delta-rs backend is used instead"
        )
    return True, "delta-spark jars are on the classpath"
