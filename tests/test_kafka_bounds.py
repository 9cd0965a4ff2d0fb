"""Every Kafka source reads bounded micro-batches: `max_offsets_per_trigger`, its default when the
conf sets none, reaches Spark's Kafka source as `maxOffsetsPerTrigger`.

Without a bound a stream that starts at `earliest` reads its topics' whole backlog in its first
micro-batch, which a stateful silver query holds in memory at once. That a real broker's backlog
then lands in several batches, every message once, is tests/test_kafka.py's (a small bound).
"""

from __future__ import annotations

from typing import Any

import pytest

from cdc_medallion.config import parse_source
from cdc_medallion.errors import ConfigError
from cdc_medallion.sources.kafka import kafka_options, kafka_stream
from cdc_medallion.sources.kafka_settings import DEFAULT_MAX_OFFSETS_PER_TRIGGER

CONF = {"bound": "2500", "words": "a lot", "zero": "0"}


def _source(kafka: dict[str, Any]):
    raw = {
        "name": "shop",
        "format": "debezium-json",
        "kafka": {"bootstrap_servers": "b:9092", "subscribe": "t", **kafka},
    }
    return parse_source("conf.yml", raw, "sources[0]")


def _options(kafka: dict[str, Any]) -> dict[str, str]:
    return kafka_options(_source(kafka), CONF.get, lambda scope, key: "secret", shaded=False)


def test_a_source_that_sets_no_bound_gets_the_default():
    assert _options({})["maxOffsetsPerTrigger"] == str(DEFAULT_MAX_OFFSETS_PER_TRIGGER)
    assert _options({"max_offsets_per_trigger": None})["maxOffsetsPerTrigger"] == str(DEFAULT_MAX_OFFSETS_PER_TRIGGER)


def test_a_bound_of_its_own_or_from_the_pipeline_configuration():
    assert _options({"max_offsets_per_trigger": 60})["maxOffsetsPerTrigger"] == "60"
    assert _options({"max_offsets_per_trigger": "{{conf:bound}}"})["maxOffsetsPerTrigger"] == "2500"


@pytest.mark.parametrize(
    ("bound", "message"),
    [
        (0, "must be a whole number of messages, at least 1"),
        (-5, "must be a whole number of messages, at least 1"),
        (True, "must be a whole number of messages, at least 1"),
        (1.5, "must be a whole number of messages, at least 1"),
        ("lots", "must be a whole number of messages, at least 1, or a {{conf:KEY}} reference, got 'lots'"),
        ({"secret": "bound"}, "must be a whole number of messages"),
    ],
)
def test_a_bound_that_is_no_count_fails_when_the_conf_loads(bound, message):
    with pytest.raises(ConfigError, match="max_offsets_per_trigger") as error:
        _source({"max_offsets_per_trigger": bound})
    assert message in str(error.value)


@pytest.mark.parametrize("key", ["words", "zero"])
def test_a_reference_that_resolves_to_no_count_fails_naming_source_key_and_value(key):
    with pytest.raises(ConfigError) as error:
        _options({"max_offsets_per_trigger": f"{{{{conf:{key}}}}}"})
    assert f"source 'shop': kafka.max_offsets_per_trigger '{{{{conf:{key}}}}}' resolved to '{CONF[key]}'" in str(
        error.value
    )


def test_spark_options_cannot_lift_the_bound():
    with pytest.raises(
        ConfigError, match=r"key 'sources\[0\].kafka.options.maxOffsetsPerTrigger': is set by cdc-medallion"
    ):
        _source({"options": {"maxOffsetsPerTrigger": "999999999"}})


def test_the_bound_reaches_sparks_kafka_source(spark):
    """The options Spark's Kafka source gets are those of the stream's relation in the plan."""
    for kafka, expected in (({}, str(DEFAULT_MAX_OFFSETS_PER_TRIGGER)), ({"max_offsets_per_trigger": 60}, "60")):
        stream = kafka_stream(_source(kafka))
        leaves = stream._jdf.queryExecution().logical().collectLeaves()
        relations = [leaves.apply(i) for i in range(leaves.size())]
        (relation,) = [r for r in relations if r.getClass().getSimpleName() == "StreamingRelationV2"]
        assert relation.sourceName() == "kafka"
        options = dict(relation.extraOptions().asCaseSensitiveMap())
        assert options["maxOffsetsPerTrigger"] == expected, options
