"""A source's `kafka:` block as a typed model, checked when the conf is loaded.

The keys and what references may stand for a value are documented in `kafka.py`, which turns
these settings into Spark Kafka options once the references can be resolved. Everything that can
be known from the file alone is checked here, so a typo or a plain-text password fails at
startup, not when the stream is defined on a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, field_validator, model_validator

from cdc_medallion.strict import KeyProblem, NullMeansAbsent, nested_problem

#: The three ways to choose topics, by their conf key, with their Spark option names.
SUBSCRIPTIONS = {"subscribe": "subscribe", "subscribe_pattern": "subscribePattern", "assign": "assign"}
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "AWS_MSK_IAM")
SERVICE_CREDENTIAL = "databricks.serviceCredential"
#: Spark options this project sets itself, from the settings of the same meaning.
RESERVED_OPTIONS = (
    "includeHeaders",
    "kafka.bootstrap.servers",
    *SUBSCRIPTIONS.values(),
    "startingOffsets",
    "maxOffsetsPerTrigger",
)
#: Messages a micro-batch of a Kafka source reads at most when its conf sets no bound (Spark's
#: `maxOffsetsPerTrigger`, shared out over the partitions by their backlog). With no bound, a
#: stream's first batch is its topics' whole backlog (`starting_offsets: earliest`), and a stateful
#: silver query (Qlik, DataWorks, IBM) holds a batch's groups in memory at once. Kafka's source has
#: no byte bound: at about 1 KB a message this is about 100 MB a batch, near the file sources'
#: 128 MiB (`max_bytes_per_batch`). Raise it for small messages, lower it for large ones.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 100_000
_SENSITIVE = re.compile(r"password|passwd|secret|token|credential|private[._-]?key", re.IGNORECASE)
CONF_REF = re.compile(r"\{\{conf:([^{}]+)\}\}")
SECRET_REF = re.compile(r"\{\{secrets/([^/{}]+)/([^/{}]+)\}\}")
_JAAS_LITERAL_PASSWORD = re.compile(r"password\s*=\s*\"(?!\{\{)", re.IGNORECASE)


class SecretRef(NullMeansAbsent):
    """`{secret: KEY[, scope: SCOPE]}`: read with dbutils.secrets (scope default: `secret_scope`)."""

    secret: str
    scope: str | None = None


def is_reference(value: Any) -> bool:
    """A value that names where a secret lives instead of holding it."""
    if isinstance(value, SecretRef):
        return True
    if isinstance(value, Mapping):
        return "secret" in value
    return isinstance(value, str) and bool(SECRET_REF.search(value) or CONF_REF.search(value))


def _value(value: Any) -> Any:
    """One clean error for anything else, instead of one per kind of value a setting may be."""
    if isinstance(value, str | int | SecretRef):  # int: true and false too
        return value
    if isinstance(value, Mapping):
        try:
            return SecretRef.model_validate(value)
        except ValidationError as error:
            raise nested_problem(error, SecretRef) from None
    raise ValueError(f"must be text, a number or a secret reference ({{secret: KEY}}), got {type(value).__name__}")


#: A setting's value: text (may hold `{{conf:KEY}}` / `{{secrets/SCOPE/KEY}}`), a number, true or
#: false, or `{secret: KEY}`.
Value = Annotated[str | int | bool | SecretRef, BeforeValidator(_value)]


def _batch_bound(value: Any) -> Any:
    """A whole number of messages, at least 1, or one `{{conf:KEY}}` (checked once resolved)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and CONF_REF.fullmatch(value.strip()):
        return value.strip()
    raise ValueError(f"must be a whole number of messages, at least 1, or a {{{{conf:KEY}}}} reference, got {value!r}")


#: `max_offsets_per_trigger`: never absent (its default bounds a source that sets none), never 0.
BatchBound = Annotated[int | str, BeforeValidator(_batch_bound)]


def _one_of(choices: tuple[str, ...]) -> AfterValidator:
    def chosen(value: str) -> str:
        if not is_reference(value) and value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)} (or a {{{{conf:KEY}}}} reference), got {value!r}")
        return value

    return AfterValidator(chosen)


class Sasl(NullMeansAbsent):
    """`sasl:` of a `kafka:` block."""

    mechanism: Annotated[str, _one_of(SASL_MECHANISMS)]
    username: Value | None = None  # a user name is no secret: plain text is fine
    password: Value | None = None

    @field_validator("password")
    @classmethod
    def _password_is_a_reference(cls, password: Any) -> Any:
        if password is not None and not is_reference(password):
            raise ValueError("must be a secret reference ({secret: KEY} or {{secrets/SCOPE/KEY}}), never a value")
        return password

    @model_validator(mode="after")
    def _login_is_complete(self) -> Sasl:
        if self.mechanism != "AWS_MSK_IAM":
            for key in ("username", "password"):
                if getattr(self, key) is None:
                    reason = f"is required: mechanism {self.mechanism} logs in with a username and a password"
                    raise KeyProblem(key, reason)
        return self


def _credential_name(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be the name of a Unity Catalog service credential, got {value!r}")
    return value


class KafkaSettings(NullMeansAbsent):
    """A source's `kafka:` block (see `kafka.py` for each key)."""

    bootstrap_servers: Value
    subscribe: Value | None = None
    subscribe_pattern: Value | None = None
    assign: Value | None = None
    starting_offsets: Value = "earliest"
    max_offsets_per_trigger: BatchBound = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    fail_on_data_loss: Value | None = None
    security_protocol: Annotated[str, _one_of(SECURITY_PROTOCOLS)] | None = None
    secret_scope: Value | None = None
    sasl: Sasl | None = None
    service_credential: Annotated[str, BeforeValidator(_credential_name)] | None = None
    options: dict[str, Value] = Field(default_factory=dict)

    @field_validator("options")
    @classmethod
    def _options_hold_no_secret(cls, options: dict[str, Any]) -> dict[str, Any]:
        for key, value in options.items():
            if key in RESERVED_OPTIONS:
                raise KeyProblem(key, "is set by cdc-medallion (use the kafka settings of the same name)")
            if key == SERVICE_CREDENTIAL:
                raise KeyProblem(key, "is set by cdc-medallion (use kafka.service_credential)")
            if key.startswith(SERVICE_CREDENTIAL + "."):  # e.g. its scope: settings of a named credential
                continue
            if _SENSITIVE.search(key) and not is_reference(value):
                reason = "holds a secret: give a secret reference ({{secrets/SCOPE/KEY}}), never the value"
                raise KeyProblem(key, reason)
            if "jaas" in key.lower() and isinstance(value, str) and _JAAS_LITERAL_PASSWORD.search(value):
                raise KeyProblem(key, "contains a literal password: use {{secrets/SCOPE/KEY}} inside it")
        return options

    @model_validator(mode="after")
    def _one_subscription_one_login(self) -> KafkaSettings:
        chosen = [key for key in SUBSCRIPTIONS if getattr(self, key) is not None]
        if len(chosen) > 1:
            raise KeyProblem(chosen[1], f"give one of {', '.join(SUBSCRIPTIONS)}, not several")
        if self.service_credential is not None:
            for other in ("sasl", "security_protocol"):
                if getattr(self, other) is not None:
                    raise KeyProblem(
                        other, "give either service_credential or sasl/security_protocol: the credential authenticates"
                    )
        return self

    def subscription(self, topic: str | None) -> tuple[str, Value] | None:
        """(Spark option, value) of the topics to read: the block's own, else the source's topic."""
        for key, option in SUBSCRIPTIONS.items():
            value = getattr(self, key)
            if value is not None:
                return option, value
        return ("subscribe", topic) if topic else None
