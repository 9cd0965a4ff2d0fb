"""A local Spark Connect server, started from pyspark's own jars with our sessions' settings.

Databricks serverless runs a pipeline's Python through Spark Connect: the query functions build
their DataFrames in a client that has no JVM, so anything that reaches for one (`sparkContext`,
`_jdf`, `_jvm`) fails there. To run the definitions the same way here, this starts pyspark's own
`SparkConnectServer` (the class Spark's `sbin/start-connect-server.sh` starts) through pyspark's
`spark-submit`, in a JVM of its own, with the settings of our classic sessions
(`spark.session_settings()`: Delta Lake, Spark's Kafka and Avro jars, the quiet log, ...), on a
free loopback port. A client connects with `SparkSession.builder.remote(server.url)`; it must be
a process of its own, since a Connect session switches pyspark's functions to their Connect
implementations for the whole process (`pyspark.sql.utils.is_remote`).

    with ConnectServer(Path("/tmp/connect")) as server:
        ...  # a client process: SparkSession.builder.remote(server.url).getOrCreate()
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

import pyspark

from cdc_medallion.services.process import JavaService, free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Spark's placeholder for an application whose main class ships with Spark (no jar of its own).
INTERNAL_RESOURCE = "spark-internal"


def spark_submit() -> Path:
    """pyspark's own `spark-submit` (it execs the JVM, so the process is the server)."""
    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


class ConnectServer(JavaService):
    """One Spark Connect server on `master` (default `local[2]`), serving on a loopback port."""

    LOG_NAME = "connect-server.log"

    def __init__(self, folder: Path | None = None, master: str = "local[2]", port: int | None = None) -> None:
        made = folder is None
        super().__init__(Path(tempfile.mkdtemp(prefix="cdc-medallion-connect-")) if made else folder, made)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.master = master
        self.port = port or free_port()

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        from cdc_medallion.spark import session_settings

        settings = {
            **session_settings(),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
        }
        confs = [part for key, value in settings.items() for part in ("--conf", f"{key}={value}")]
        return [str(spark_submit()), "--master", self.master, "--class", SERVER_CLASS, *confs, INTERNAL_RESOURCE]

    def start(self, timeout: float = 240.0) -> ConnectServer:
        """Start the server and wait until its port takes connections."""
        if not self.exited():
            return self
        command = self.command()  # sets the environment Spark's processes inherit (session_settings)
        self.spawn(command, env=dict(os.environ))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited ({self.process.returncode}):\n{self.log_tail(30)}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.5)
        self.kill()
        raise TimeoutError(f"the Spark Connect server did not start within {timeout:.0f} s:\n{self.log_tail(30)}")
