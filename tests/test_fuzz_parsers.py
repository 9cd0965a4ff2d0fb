"""Property-based tests for every registered parser: whatever the bytes, no exception escapes,
every event fits the silver schema, and every message is accounted for (an event names it)."""

from __future__ import annotations

import json
from functools import cache

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_medallion.config import load_conf
from cdc_medallion.formats import format_names, get_format
from cdc_medallion.formats.message import BronzeMessage
from cdc_medallion.model import KINDS
from cdc_medallion.sources.files import FileLanding
from tests.conftest import REPO
from tests.helpers import message

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def sample_sources() -> dict[str, tuple[dict, list[bytes]]]:
    """Per format: the options and the first messages of its embedded sample, as mutation seeds."""
    found: dict[str, tuple[dict, list[bytes]]] = {}
    for source in load_conf(REPO / "conf" / "local.yml").sources:
        if source.format in found or source.input is None:
            continue
        batch = FileLanding(source, max_messages=40).next_batch()
        found[source.format] = (dict(source.options), [v for v in batch.to_arrow().column("value").to_pylist() if v])
    return found


def parser_for(fmt: str):
    options = sample_sources().get(fmt, ({}, []))[0]
    return get_format(fmt)("fuzz", options)


def json_values() -> st.SearchStrategy:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
        max_leaves=20,
    )


def mutations(fmt: str) -> st.SearchStrategy[bytes]:
    seeds = sample_sources().get(fmt, ({}, []))[1] or [b'{"a": 1}']
    seed = st.sampled_from(seeds)
    truncated = st.tuples(seed, st.floats(0, 1)).map(lambda p: p[0][: int(len(p[0]) * p[1])])
    flipped = st.tuples(seed, st.integers(0, 10_000), st.integers(0, 255)).map(
        lambda p: p[0][: p[1] % max(len(p[0]), 1)] + bytes([p[2]]) + p[0][p[1] % max(len(p[0]), 1) + 1 :]
    )
    retyped = st.tuples(seed, json_values()).map(lambda p: _replace_a_value(p[0], p[1]))
    return st.one_of(
        st.binary(max_size=300),
        json_values().map(lambda v: json.dumps(v).encode()),
        truncated,
        flipped,
        retyped,
        st.just(b"[" * 5000 + b"]" * 5000),  # nested too deep
        st.just(b'{"n": ' + b"9" * 5000 + b"}"),  # a huge number
        st.just(b'{"s": "' + b"x" * 200_000 + b'"}'),  # a huge string
    )


def _replace_a_value(raw: bytes, value: object) -> bytes:
    """The sample with one top-level (or payload) value replaced: wrong types, NULLs, nesting."""
    try:
        document = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(document, dict) and document:
        target = document.get("payload") if isinstance(document.get("payload"), dict) else document
        key = sorted(target)[len(str(value)) % len(target)] if target else "x"
        target[key] = value
    return json.dumps(document).encode()


def check_accounted(fmt: str, messages: list[BronzeMessage]) -> None:
    parser = parser_for(fmt)
    if parser.stateful:
        batch = parser.parse_all(messages, [])
    else:
        batch = parser.to_arrow([parser.events_for(m) for m in messages], messages)
    assert isinstance(batch, pa.RecordBatch)
    events = batch.to_pylist()
    named = {e["bronze_ref"] for e in events} | {r for e in events for r in (e["related_refs"] or [])}
    for m in messages:
        assert m.ref in named, (fmt, m.value[:200] if m.value else m.value)
    for event in events:
        assert event["kind"] in KINDS, event
        if event["kind"] == "error":
            assert event["error"], event


@pytest.mark.parametrize("fmt", format_names())
def test_any_single_message_is_accounted_for(fmt):
    @FUZZ
    @given(mutations(fmt))
    def run(raw: bytes) -> None:
        check_accounted(fmt, [message(raw, line=0)])

    run()


@pytest.mark.parametrize("fmt", format_names())
def test_any_batch_is_accounted_for(fmt):
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(mutations(fmt), min_size=1, max_size=8))
    def run(raws: list[bytes]) -> None:
        check_accounted(fmt, [message(raw, line=i) for i, raw in enumerate(raws)])

    run()
