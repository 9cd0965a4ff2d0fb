"""A single-node Apache Kafka broker in KRaft mode, started from Maven Central jars.

Our users' messages arrive through Kafka, so the Kafka path is tested against a real broker, not a
stand-in. No Docker engine runs on our machines, and Kafka's distribution archive is not on Maven
Central, so the broker is `org.apache.kafka:kafka_2.13` and its runtime dependencies, fetched once
with Maven (`jars.copy_packages`) into the user cache, and run as `kafka.Kafka` in its own JVM
(its classpath never meets Spark's). One process is broker and controller, on two free loopback
ports, with its data in a temporary folder (or one you give, to keep topics across restarts).

Auto-created topics get `partitions` partitions (3 by default), so a producer that names a
partition, or a Spark Kafka write with a `partition` column, gets several without an admin call.

    python -m cdc_medallion.services.kafka_broker [--port N] [--data DIR] [--partitions N]

runs one in the foreground (`make kafka`) and prints its bootstrap servers; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from cdc_medallion import jars
from cdc_medallion.services.process import JavaService, free_port, java_binary

KAFKA_VERSION = "4.4.0"
# Kafka logs through SLF4J 1.x and ships no binding; with this one its log4j2 writes the log the
# broker's readiness is read from ("Kafka Server started").
PACKAGES = (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",
)
STARTED = "Kafka Server started"
# A test broker holds a few thousand messages: a small heap, the quick JIT, the serial collector.
JAVA_OPTIONS = ("-Xms64m", "-Xmx384m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
_LOG4J = """rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


def broker_jars(say=print) -> list[str]:
    """The broker's classpath, fetched from Maven Central the first time."""
    return jars.copy_packages(list(PACKAGES), jars.cache_root() / f"kafka-{KAFKA_VERSION}", say=say)


class KafkaBroker(JavaService):
    """One broker process. `start()` again after `stop()` (or `kill()`) brings back the same
    broker: same ports, same data, so its topics and offsets are kept, as after an outage."""

    LOG_NAME = "broker.log"

    def __init__(self, data_dir: Path | None = None, port: int | None = None, partitions: int = 3, say=print) -> None:
        folder = Path(tempfile.mkdtemp(prefix="cdc-medallion-kafka-")) if data_dir is None else data_dir
        super().__init__(folder, owns_folder=data_dir is None)
        self.port = port or free_port()
        self.controller_port = free_port()
        self.partitions = partitions
        self.say = say

    @property
    def data_dir(self) -> Path:
        return self.folder

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        """Start the broker (formatting its storage the first time) and wait until it serves."""
        if not self.exited():
            return self
        classpath = broker_jars(self.say)
        config = self._write_config()
        if not (self.data_dir / "logs" / "meta.properties").exists():
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
            tool = [
                java_binary("the Kafka broker"),
                *JAVA_OPTIONS,
                "-cp",
                os.pathsep.join(classpath),
                "kafka.tools.StorageTool",
            ]
            subprocess.run([*tool, "format", "-t", cluster, "-c", config], check=True, capture_output=True)
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        self.launch(JAVA_OPTIONS, _LOG4J, classpath, ["kafka.Kafka", config])
        self._wait_started(offset, timeout)
        return self

    def _write_config(self) -> str:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": str(self.partitions),
            "auto.create.topics.enable": "true",
            # One node: every internal topic has one replica, and consumers join at once.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
        return str(path)

    def _wait_started(self, offset: int, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.log_file.open("rb") as log:
                log.seek(offset)
                if STARTED.encode() in log.read():
                    return
            if self.process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited ({self.process.returncode}):\n{self.log_tail(30)}")
            time.sleep(0.2)
        self.kill()
        raise TimeoutError(f"the Kafka broker did not start within {timeout:.0f} s:\n{self.log_tail(30)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdc_medallion.services.kafka_broker", description=__doc__)
    parser.add_argument("--port", type=int, default=9092, help="the broker's port (default 9092; 0: any free one)")
    parser.add_argument("--data", type=Path, help="data folder, kept across restarts (default: a temporary one)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of an auto-created topic")
    args = parser.parse_args(argv)
    broker = KafkaBroker(args.data, args.port or None, args.partitions, say=lambda line: print(line, file=sys.stderr))
    # A process manager's SIGTERM ends the run like Ctrl-C: the broker is stopped, its folder removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with broker:
        print(f"Kafka {KAFKA_VERSION} serving on {broker.bootstrap_servers} (data {broker.data_dir}); Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            broker.process.wait()  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    sys.exit(main())
