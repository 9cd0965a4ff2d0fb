"""Delivery chaos for line-based inputs: what Kafka and real operations do to a clean stream.

- `redeliver`: every message delivered twice (at-least-once delivery);
- `interleave`: topics' partitions interleaved at random, order kept within each partition;
- `malform`: garbage messages added among them (about `rate` of the count, at least one);
- `cuts`: the stream split into pieces at random message boundaries, one pipeline run each.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict


def _partition(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    if isinstance(record, dict) and "topic" in record:
        return f"{record.get('topic')}/{record.get('partition')}"
    return ""


def interleave(lines: list[str], rnd: random.Random) -> list[str]:
    """Random merge of the partitions' streams; each partition keeps its own order."""
    queues: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        queues[_partition(line)].append(line)
    if len(queues) < 2:
        return list(lines)
    positions = {name: 0 for name in queues}
    merged = []
    while positions:
        name = rnd.choice(sorted(positions))
        merged.append(queues[name][positions[name]])
        positions[name] += 1
        if positions[name] == len(queues[name]):
            del positions[name]
    return merged


def redeliver(lines: list[str], rnd: random.Random) -> list[str]:
    """Each message twice: the copy follows later in the same partition (a consumer re-reading)."""
    delivered = []
    pending: list[str] = []
    for line in lines:
        delivered.append(line)
        pending.append(line)
        if rnd.random() < 0.2:
            delivered.extend(pending)
            pending = []
    return delivered + pending


def malform(lines: list[str], rnd: random.Random, rate: float = 0.01) -> tuple[list[str], int]:
    """Garbage messages inserted among the real ones (at least one); returns them and their count."""
    garbage = ['{"truncated": ', "not json at all", "[1, 2", '{"op": 42, "payload": "\\u0000"}']
    result, count = [], 0
    for line in lines:
        if rnd.random() < rate or (count == 0 and len(result) == len(lines) // 2):
            result.append(rnd.choice(garbage))
            count += 1
        result.append(line)
    return result, count


def cuts(lines: list[str], rnd: random.Random, pieces: int) -> list[list[str]]:
    """The stream cut at random message boundaries into `pieces` consecutive runs."""
    if pieces <= 1 or len(lines) < pieces:
        return [lines]
    bounds = sorted(rnd.sample(range(1, len(lines)), pieces - 1))
    return [lines[a:b] for a, b in zip([0, *bounds], [*bounds, len(lines)], strict=True)]
