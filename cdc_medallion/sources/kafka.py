"""Bronze from Kafka (Databricks, or anywhere the Spark Kafka connector is on the classpath).

A source's `kafka:` block in conf (every key is checked when the conf is loaded, by
`kafka_settings.KafkaSettings`; a typo is an error):

```yaml
kafka:
  bootstrap_servers: "{{conf:cdc_medallion.kafka.bootstrap_servers}}"   # required
  subscribe: "shop.public.customers,shop.public.orders"  # or subscribe_pattern / assign
  starting_offsets: earliest              # default earliest
  max_offsets_per_trigger: 100000         # default 100000 (DEFAULT_MAX_OFFSETS_PER_TRIGGER); never unbounded
  fail_on_data_loss: true                 # optional
  security_protocol: SASL_SSL             # optional (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
  secret_scope: "{{conf:cdc_medallion.secret_scope}}"   # default scope of {secret: KEY}
  sasl:
    mechanism: SCRAM-SHA-512              # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or AWS_MSK_IAM
    username: {secret: kafka-username}    # a secret reference (or plain text: a user name is no secret)
    password: {secret: kafka-password}    # must be a secret reference
  service_credential: msk-reader          # instead of sasl: a Unity Catalog service credential
  options:                                # any other Spark Kafka option, by its Spark name
    kafka.ssl.truststore.location: /Volumes/main/kafka/certs/truststore.jks
    kafka.ssl.truststore.password: "{{secrets/kafka/truststore-password}}"
```

Without `subscribe` / `subscribe_pattern` / `assign`, the source's `topic` is subscribed.

`max_offsets_per_trigger` bounds the messages of one micro-batch (Spark's `maxOffsetsPerTrigger`,
shared out over the partitions by their backlog; a partition with a backlog reads at least one, so
a batch may exceed the bound by up to one message per partition). A source that sets none gets
`DEFAULT_MAX_OFFSETS_PER_TRIGGER`: a new stream starting at `earliest` would otherwise read its
topics' whole backlog in its first batch. A `{{conf:KEY}}` reference must resolve to a whole
number. `trigger(availableNow=True)` (a local update) honours the bound: it runs as many batches
as the backlog needs.

`service_credential` names a Unity Catalog service credential (Databricks Runtime 16.1+, and what
Databricks recommends for Amazon MSK with IAM on serverless and shared compute): it becomes the
Kafka source option `databricks.serviceCredential`, and Databricks sets up the IAM authentication,
so it excludes `sasl` and `security_protocol`. It is the name of a governed object, not a secret.
Where Databricks cannot infer the credential's scope (Azure Event Hubs), set
`options: {databricks.serviceCredential.scope: ...}`.

Values may be references, resolved when the stream is defined, so no secret is ever in YAML:
`{{conf:KEY}}` is a Spark conf / pipeline configuration value (the bundle fills those from its
variables), `{{secrets/SCOPE/KEY}}` and `{secret: KEY[, scope: SCOPE]}` are read with
`dbutils.secrets.get`. A password, token, secret or credential option given as plain text is a
configuration error.

The stream lands the Kafka columns (key, value, topic, partition, offset, timestamp, headers) as
they are, plus the lineage columns the file sources fill, in exactly `BRONZE_SCHEMA`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_medallion.config import SourceConf
from cdc_medallion.errors import ConfigError
from cdc_medallion.model import BRONZE_SCHEMA
from cdc_medallion.sources.kafka_settings import (
    CONF_REF,
    SASL_MECHANISMS,
    SECRET_REF,
    SERVICE_CREDENTIAL,
    KafkaSettings,
    SecretRef,
    Value,
    is_reference,
)

__all__ = ["KafkaSettings", "is_reference", "kafka_options", "kafka_stream", "parse_kafka", "to_bronze"]

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")


def parse_kafka(source: SourceConf) -> KafkaSettings:
    """A source's `kafka:` block (checked when the conf was loaded), with topics to read."""
    if source.kafka is None:
        raise ConfigError(
            f"source {source.name!r}: no 'kafka' settings; on Databricks bronze reads Kafka "
            "(kafka.bootstrap_servers and a topic are required)"
        )
    if source.kafka.subscription(source.topic) is None:
        raise ConfigError(
            f"source {source.name!r}: key 'kafka.subscribe': is required (or subscribe_pattern, assign, "
            "or the source's topic)"
        )
    return source.kafka


# --- resolving references ---------------------------------------------------------------------
ConfGet = Callable[[str], str | None]
SecretGet = Callable[[str, str], str]


def spark_conf_get(key: str) -> str | None:
    spark = SparkSession.getActiveSession()
    return None if spark is None else spark.conf.get(key, None)


def dbutils_secret_get(scope: str, key: str) -> str:
    """`dbutils.secrets.get` on Databricks; anywhere else there is no secret scope to read."""
    try:
        from databricks.sdk.runtime import dbutils  # type: ignore[import-not-found]
    except ImportError:
        try:
            from pyspark.dbutils import DBUtils  # type: ignore[import-not-found]
        except ImportError:
            raise ConfigError(
                f"secret {scope}/{key}: secret references are read with dbutils.secrets, which exists "
                "only on Databricks"
            ) from None
        dbutils = DBUtils(SparkSession.active())
    return dbutils.secrets.get(scope=scope, key=key)


class Resolver:
    def __init__(self, source: str, settings: KafkaSettings, conf_get: ConfGet, secret_get: SecretGet) -> None:
        self.source = source
        self.conf_get = conf_get
        self.secret_get = secret_get
        self.scope = None if settings.secret_scope is None else self(settings.secret_scope, "secret_scope")

    def __call__(self, value: Value, where: str) -> str:
        if isinstance(value, SecretRef):
            scope = value.scope or self.scope
            if not scope:
                raise ConfigError(f"source {self.source!r}: kafka.{where}: no scope for secret {value.secret!r}")
            return self.secret_get(self(scope, where), value.secret)
        if isinstance(value, bool):
            return "true" if value else "false"
        text = CONF_REF.sub(lambda m: self._conf(m.group(1), where), str(value))
        return SECRET_REF.sub(lambda m: self.secret_get(m.group(1), m.group(2)), text)

    def _conf(self, key: str, where: str) -> str:
        value = self.conf_get(key)
        if value is None or value == "":
            raise ConfigError(
                f"source {self.source!r}: kafka.{where} refers to {{{{conf:{key}}}}}, which is not set: "
                "set it in the pipeline configuration (databricks.yml variables)"
            )
        return value


def _login_module(mechanism: str, shaded: bool) -> dict[str, str]:
    if mechanism == "AWS_MSK_IAM":  # Databricks ships the MSK IAM classes shaded
        return {
            "kafka.sasl.jaas.config": "shadedmskiam.software.amazon.msk.auth.iam.IAMLoginModule required;",
            "kafka.sasl.client.callback.handler.class": (
                "shadedmskiam.software.amazon.msk.auth.iam.IAMClientCallbackHandler"
            ),
        }
    prefix = ("kafkashaded." if shaded else "") + "org.apache.kafka.common.security"
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    return {"kafka.sasl.jaas.config": f"{prefix}.{module} required username=%s password=%s;"}


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def on_databricks() -> bool:
    if "DATABRICKS_RUNTIME_VERSION" in os.environ:
        return True
    from cdc_medallion.declarative.databricks import find_pipelines_module

    return find_pipelines_module() is not None


def kafka_options(
    source: SourceConf,
    conf_get: ConfGet = spark_conf_get,
    secret_get: SecretGet = dbutils_secret_get,
    shaded: bool | None = None,
) -> dict[str, str]:
    """The Spark Kafka source options of a source, references resolved."""
    settings = parse_kafka(source)
    resolve = Resolver(source.name, settings, conf_get, secret_get)
    chosen = settings.subscription(source.topic)
    assert chosen is not None  # parse_kafka: a source always has topics to read
    subscription, topics = chosen
    options = {
        "kafka.bootstrap.servers": resolve(settings.bootstrap_servers, "bootstrap_servers"),
        subscription: resolve(topics, "subscribe"),
        "startingOffsets": resolve(settings.starting_offsets, "starting_offsets"),
        "includeHeaders": "true",
    }
    options["maxOffsetsPerTrigger"] = _resolved_bound(source.name, resolve, settings.max_offsets_per_trigger)
    if settings.fail_on_data_loss is not None:
        options["failOnDataLoss"] = resolve(settings.fail_on_data_loss, "fail_on_data_loss")
    if settings.security_protocol is not None:
        options["kafka.security.protocol"] = resolve(settings.security_protocol, "security_protocol")
    sasl = settings.sasl
    if sasl is not None:
        mechanism = resolve(sasl.mechanism, "sasl.mechanism")
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"source {source.name!r}: kafka.sasl.mechanism resolved to unknown {mechanism!r}")
        options["kafka.sasl.mechanism"] = mechanism
        login = _login_module(mechanism, on_databricks() if shaded is None else shaded)
        if mechanism != "AWS_MSK_IAM":
            assert sasl.username is not None and sasl.password is not None  # Sasl: required but for AWS_MSK_IAM
            username = resolve(sasl.username, "sasl.username")
            password = resolve(sasl.password, "sasl.password")
            login["kafka.sasl.jaas.config"] %= (_quote(username), _quote(password))
        options.update(login)
    if settings.service_credential is not None:
        options[SERVICE_CREDENTIAL] = resolve(settings.service_credential, "service_credential")
    for key, value in settings.options.items():
        options[key] = resolve(value, f"options.{key}")
    return options


def _resolved_bound(source: str, resolve: Resolver, bound: int | str) -> str:
    """`maxOffsetsPerTrigger`: the setting (its default when the conf sets none), a reference
    resolved and checked here, where its value is first known, so no source reads unbounded."""
    text = resolve(bound, "max_offsets_per_trigger")
    if not (text.isascii() and text.isdigit() and int(text) >= 1):
        raise ConfigError(
            f"source {source!r}: kafka.max_offsets_per_trigger {bound!r} resolved to {text!r}, "
            "not a whole number of messages, at least 1"
        )
    return str(int(text))


# --- the stream -------------------------------------------------------------------------------
def _nullable(column: Column, spark_type: str) -> Column:
    """The same value, typed nullable as in BRONZE_SCHEMA (literals are non-nullable otherwise)."""
    return F.nullif(column.cast(spark_type), F.lit(None).cast(spark_type))


def to_bronze(kafka: DataFrame, source: str) -> DataFrame:
    """Rows of the Spark Kafka source as bronze rows: the Kafka columns as they are, lineage added."""
    lineage = {
        "_source": F.lit(source),
        "_file": F.lit(None),
        "_line": F.lit(None),
        "_ingest_ts": F.current_timestamp(),
        "_landing_error": F.lit(None),
    }
    columns = []
    for spec in BRONZE_SCHEMA.fields:
        if spec.name in KAFKA_COLUMNS:
            value = F.col(spec.name).cast(spec.dataType)
        else:
            value = _nullable(lineage[spec.name], spec.dataType.simpleString())
        columns.append(value.alias(spec.name))
    return kafka.select(*columns)


def kafka_stream(source: SourceConf) -> DataFrame:
    """The source's Kafka topics as a stream of bronze rows."""
    options = kafka_options(source)
    return to_bronze(SparkSession.active().readStream.format("kafka").options(**options).load(), source.name)
