"""A standalone Kafka Connect worker with a Debezium connector (PostgreSQL or MariaDB), from
Maven Central jars.

Users' Debezium messages are written by Kafka Connect's JSON converter, so the capture path is
tested against the real thing: Connect's runtime (`org.apache.kafka:connect-runtime`) and
`io.debezium:debezium-connector-postgres` or `-mariadb`, fetched once with Maven
(`jars.copy_packages`) into the user cache and run as `ConnectStandalone` in a JVM of its own
(its classpath never meets Spark's). Standalone mode keeps the source offsets in a local file,
so no internal topics are needed; the REST API listens on a free loopback port and tells when
the connectors run and which source offsets they committed.

Connect's version is not the broker's (`KAFKA_VERSION`, 4.4.0): Debezium 3.6 is built against
Kafka 4.3 (`version.kafka` in its build parent pom), and on Connect 4.4 its task fails at start
(`NoClassDefFoundError: org/apache/kafka/common/utils/Sanitizer`, a class Kafka 4.4 removed from
kafka-clients). So the worker runs Connect 4.3.1, the newest 4.3 release; its clients talk to the
4.4 broker as any older client does.

Debezium's connectors for MariaDB and PostgreSQL are not at one version: Maven Central's newest
`debezium-connector-mariadb` is 3.5.0.Final, and the 3.6.1 MySQL connector does not serve
instead (it fails at start on MariaDB 10.11, which has no `SHOW BINARY LOG STATUS`). One worker's
classpath holds one Debezium version, so a worker runs the connectors of one plugin
(`PLUGINS`, by `connector.class`); each plugin's jars have a cache folder of their own.

The worker finds the connector on its classpath through Debezium's service manifests
(`plugin.discovery=service_load`): no `plugin.path`, no classpath scan at start.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cdc_medallion import jars
from cdc_medallion.services import mariadb
from cdc_medallion.services.mariadb import MariaDBServer
from cdc_medallion.services.postgres import DATABASE, SUPERUSER, PostgresCluster
from cdc_medallion.services.process import JavaService, free_port

CONNECT_VERSION = "4.3.1"
DEBEZIUM_VERSION = "3.6.1.Final"
DEBEZIUM_MARIADB_VERSION = "3.5.0.Final"  # Maven Central's newest MariaDB connector
RUNTIME = (
    f"org.apache.kafka:connect-runtime:{CONNECT_VERSION}",
    f"org.apache.kafka:connect-json:{CONNECT_VERSION}",
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",  # Connect logs through SLF4J 1.x, as the broker
)
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
MARIADB_CONNECTOR = "io.debezium.connector.mariadb.MariaDbConnector"
# connector.class -> the Maven package that brings it (and its Debezium version).
PLUGINS = {
    POSTGRES_CONNECTOR: f"io.debezium:debezium-connector-postgres:{DEBEZIUM_VERSION}",
    MARIADB_CONNECTOR: f"io.debezium:debezium-connector-mariadb:{DEBEZIUM_MARIADB_VERSION}",
}
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
# A test worker moves a few hundred records: a small heap, the quick JIT, the serial collector.
JAVA_OPTIONS = ("-Xms64m", "-Xmx320m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
_LOG4J = """rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.debezium.name = io.debezium
logger.debezium.level = INFO
"""


def connect_jars(connector_class: str = POSTGRES_CONNECTOR, say=print) -> list[str]:
    """The classpath of a worker running `connector_class`, fetched from Maven Central the first time."""
    plugin = PLUGINS[connector_class]
    _, artifact, version = plugin.split(":")
    folder = jars.cache_root() / f"connect-{CONNECT_VERSION}-{artifact}-{version}"
    return jars.copy_packages([*RUNTIME, plugin], folder, say=say)


def plugin_of(connectors: Mapping[str, Mapping[str, str]]) -> str:
    """The one `connector.class` the connectors share (one Debezium version per classpath)."""
    classes = {props["connector.class"] for props in connectors.values()}
    unknown = classes - PLUGINS.keys()
    if unknown or len(classes) != 1:
        raise ValueError(
            f"a worker runs connectors of one known plugin ({', '.join(PLUGINS)}), not {', '.join(sorted(classes))}"
        )
    return classes.pop()


def postgres_connector(pg: PostgresCluster, tables: Iterable[str], topic_prefix: str, schemas: bool) -> dict[str, str]:
    """Debezium's PostgreSQL connector as a user would set it up for `tables` ("schema.table") of
    `pg`: pgoutput, a slot and publication named after the topic prefix, the initial snapshot,
    truncates captured (Debezium skips them by default), Kafka Connect's JSON with or without
    the schema envelope (without it, decimals as strings: nothing else keeps their scale), and
    intervals as ISO 8601 text (`interval.handling.mode=string`: the default, a number of
    microseconds, counts a month as 30.4375 days and overflows past 292,000 years)."""
    settings = {
        "connector.class": POSTGRES_CONNECTOR,
        "database.hostname": pg.host,
        "database.port": str(pg.port),
        "database.user": SUPERUSER,
        "database.password": "unused",  # trust authentication on loopback
        "database.dbname": DATABASE,
        "plugin.name": "pgoutput",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "skipped.operations": "none",
        "snapshot.mode": "initial",
        "topic.prefix": topic_prefix,
        "slot.name": f"{topic_prefix}_slot",
        "publication.name": f"{topic_prefix}_publication",
        "interval.handling.mode": "string",
        **json_converters(schemas),
    }
    if not schemas:
        settings["decimal.handling.mode"] = "string"
    return settings


def json_converters(schemas: bool) -> dict[str, str]:
    """A connector's converter settings: Kafka Connect's JSON, with or without the schema envelope."""
    enabled = "true" if schemas else "false"
    return {
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": enabled,
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": enabled,
    }


def mariadb_connector(
    server: MariaDBServer,
    tables: Iterable[str],
    topic_prefix: str,
    schemas: bool,
    server_id: int,
    bootstrap_servers: str,
) -> dict[str, str]:
    """Debezium's MariaDB connector as a user would set it up for `tables` ("database.table") of
    `server`: the capture account, a replica server id of its own (`server_id`, unlike the
    server's and every other reader's), the initial snapshot, truncates captured (skipped by
    default), the schema history in a Kafka topic of its own, and Kafka Connect's JSON with or
    without the schema envelope (without it, decimals as strings, as for PostgreSQL).

    `BIGINT UNSIGNED` is read as a decimal (`bigint.unsigned.handling.mode=precise`): the
    default, `long`, writes values above 2^63 - 1 as negative numbers."""
    settings = {
        "connector.class": MARIADB_CONNECTOR,
        "database.hostname": server.host,
        "database.port": str(server.port),
        "database.user": mariadb.CAPTURE_USER,
        "database.password": mariadb.CAPTURE_PASSWORD,
        "database.server.id": str(server_id),
        "database.include.list": mariadb.DATABASE,
        "table.include.list": ",".join(tables),
        "skipped.operations": "none",
        "snapshot.mode": "initial",
        "topic.prefix": topic_prefix,
        "schema.history.internal.kafka.bootstrap.servers": bootstrap_servers,
        "schema.history.internal.kafka.topic": f"{topic_prefix}.schema-history",
        "bigint.unsigned.handling.mode": "precise",
        **json_converters(schemas),
    }
    if not schemas:
        settings["decimal.handling.mode"] = "string"
    return settings


class KafkaConnect(JavaService):
    """One standalone worker running the connectors given as name -> properties."""

    LOG_NAME = "connect.log"

    def __init__(self, bootstrap_servers: str, connectors: Mapping[str, Mapping[str, str]], say=print) -> None:
        super().__init__(Path(tempfile.mkdtemp(prefix="cdc-medallion-connect-")), owns_folder=True)
        self.bootstrap_servers = bootstrap_servers
        self.connectors = {name: dict(props) for name, props in connectors.items()}
        self.port = free_port()
        self.say = say

    def start(self, timeout: float = 120.0) -> KafkaConnect:
        """Start the worker and wait until every connector and its task is RUNNING."""
        classpath = connect_jars(plugin_of(self.connectors), self.say)
        files = [self._write(f"{name}.properties", {"name": name, **props}) for name, props in self.connectors.items()]
        worker = self._write("worker.properties", self._worker_settings())
        self.launch(JAVA_OPTIONS, _LOG4J, classpath, ["org.apache.kafka.connect.cli.ConnectStandalone", worker, *files])
        deadline = time.monotonic() + timeout
        for name in self.connectors:
            self._wait_running(name, deadline)
        return self

    def _worker_settings(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **json_converters(schemas=True),
            "offset.storage.file.filename": str(self.folder / "offsets"),
            # Offsets (and so what `offsets()` reports) are committed often: tests wait on them.
            "offset.flush.interval.ms": "200",
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
            "plugin.discovery": "service_load",
            "task.shutdown.graceful.timeout.ms": "2000",
        }

    def _write(self, name: str, settings: Mapping[str, str]) -> str:
        path = self.folder / name
        path.write_text("".join(f"{k}={_escaped(v)}\n" for k, v in settings.items()), encoding="utf-8")
        return str(path)

    def rest(self, path: str) -> Any:
        """GET a REST resource of the worker, as JSON."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as answer:
            return json.load(answer)

    def status(self, name: str) -> dict[str, Any] | None:
        try:
            return self.rest(f"/connectors/{name}/status")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None  # not listening yet, or the connector is not created yet

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The connector's committed source offsets: each a `partition` and an `offset` mapping.

        Connect commits an offset only once every record before it is acknowledged by the
        broker, so an offset past a transaction means its records are all in Kafka."""
        return self.rest(f"/connectors/{name}/offsets").get("offsets", [])

    def wait_for_offsets(
        self, names: Iterable[str], reached: Callable[[dict[str, Any]], bool], what: str, timeout: float = 90.0
    ) -> None:
        """Until each connector of `names` has committed an offset for which `reached` holds: its
        records up to there are all in Kafka (see `offsets`)."""
        deadline = time.monotonic() + timeout
        while True:
            offsets = {name: [o["offset"] for o in self.offsets(name)] for name in names}
            if all(any(reached(o) for o in found) for found in offsets.values()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"connectors did not reach {what}: {offsets}\n{self.log_tail()}")
            time.sleep(0.2)

    def _wait_running(self, name: str, deadline: float) -> None:
        assert self.process is not None
        while True:
            status = self.status(name)
            if status is not None:
                states = [status["connector"]["state"], *(t["state"] for t in status.get("tasks", []))]
                if "FAILED" in states:
                    traces = "".join(p.get("trace", "") for p in [status["connector"], *status.get("tasks", [])])
                    raise RuntimeError(f"connector {name} failed: {traces[:4000]}\n{self.log_tail()}")
                if len(states) > 1 and all(s == "RUNNING" for s in states):
                    return
            if self.process.poll() is not None:
                raise RuntimeError(f"Kafka Connect exited ({self.process.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"connector {name} is not running ({status}):\n{self.log_tail()}")
            time.sleep(0.2)


def _escaped(value: str) -> str:
    """A value as a Java properties file reads it back (backslashes are escapes there)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")
