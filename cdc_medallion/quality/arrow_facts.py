"""The report's facts about a local storage, from rows delta-rs reads (`storage/delta_rs.py`),
without a JVM: `cdc-medallion report` would otherwise start Spark to read a few small tables.

Each function here computes what its Spark twin computes, by the same rules (their docstrings
say them), and tests/test_quality_report.py requires equal results on the same storage:
`events.read_event_log`, `report.quarantine_reasons` (with `_raw_from_bronze`),
`report.heartbeat_lag` and `accounting.account_source` (with `redelivered`). The Spark twins
stay for a Databricks event log and for `run`'s checks, where tables may be large and Spark is
running anyway. Bronze is streamed batch by batch; the other tables are read whole.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cdc_medallion.arrow_rows import local_time, python_rows
from cdc_medallion.model import KIND_HELD
from cdc_medallion.names import FAILED
from cdc_medallion.quality.accounting import HELD_SAMPLES, OTHER, OUTCOMES, QUARANTINED, SourceAccounting
from cdc_medallion.quality.events import EVENT_TYPES, Update, fold_events
from cdc_medallion.quality.figures import (
    RAW_LIMIT,
    SAMPLES_PER_REASON,
    TOP_REASONS,
    HeartbeatLag,
    QuarantineReason,
    quarantine_sample,
)
from cdc_medallion.storage import delta_rs


def read_event_log(path: Path, max_updates: int = 50) -> list[Update]:
    """The last `max_updates` updates of the local event log, oldest first."""
    rows = []
    for row in python_rows(delta_rs.read_table(path)):
        origin = row.get("origin") or {}
        if row["event_type"] in EVENT_TYPES and origin.get("update_id") is not None:
            details = row.get("details")
            rows.append(
                {
                    "event_type": row["event_type"],
                    "timestamp": row["timestamp"],
                    "level": row.get("level"),
                    "message": row.get("message"),
                    "details": details if details is None or isinstance(details, str) else str(details),
                    **{name: origin.get(name) for name in ("update_id", "flow_name", "dataset_name")},
                }
            )
    started: dict[str, dt.datetime | None] = {}
    for row in rows:
        first, stamp = started.get(row["update_id"]), row["timestamp"]
        started[row["update_id"]] = stamp if first is None or (stamp is not None and stamp < first) else first
    latest = sorted(started, key=lambda u: (started[u] is not None, started[u] or dt.datetime.min), reverse=True)
    keep = set(latest[:max_updates])
    return fold_events([r for r in rows if r["update_id"] in keep])


def pipeline_name(path: Path) -> str | None:
    """The pipeline's name, as the event log's first event names it."""
    for row in python_rows(delta_rs.read_table(path, ["origin"])):
        return (row["origin"] or {}).get("pipeline_name")
    return None


def quarantine_reasons(
    tables: Mapping[str, Path], bronze: list[Path] | None = None
) -> tuple[list[QuarantineReason], dict[str, int]]:
    """Top (dataset, failed rule) pairs over quarantine tables (name -> path), with sample rows;
    a sample without its raw message shows the bronze message it points to."""
    reasons: list[QuarantineReason] = []
    totals: dict[str, int] = {}
    for dataset, path in tables.items():
        columns = delta_rs.column_names(path)
        if FAILED not in columns:
            continue
        ref = next((c for c in ("bronze_ref", "__bronze_ref") if c in columns), None)
        rows = python_rows(delta_rs.read_table(path))
        totals[dataset] = len(rows)
        exploded = [{**row, "__rule": rule} for row in rows for rule in (row[FAILED] or [None])]
        counts = Counter(row["__rule"] for row in exploded)
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0] is not None, item[0] or ""))
        for rule, count in ranked[:TOP_REASONS]:
            picked = [row for row in exploded if row["__rule"] == rule]
            if ref:
                picked.sort(key=lambda row: (row[ref] is not None, row[ref] or ""))
            samples = [quarantine_sample(row, ref) for row in picked[:SAMPLES_PER_REASON]]
            reasons.append(QuarantineReason(dataset, rule or "(no rule named)", count, samples))
    reasons.sort(key=lambda r: (-r.count, r.dataset, r.rule))
    if bronze:
        _raw_from_bronze(reasons, bronze)
    return reasons, totals


def _raw_from_bronze(reasons: list[QuarantineReason], bronze: list[Path]) -> None:
    wanted = {s["bronze_ref"] for r in reasons for s in r.samples if s["raw"] is None and s["bronze_ref"]}
    if not wanted:
        return
    found: dict[str, str] = {}
    for table in bronze:
        for row in _bronze_rows(table, ["value"]):
            if row["ref"] in wanted:
                value = row["value"]
                found[row["ref"]] = (
                    "(no value: tombstone)" if value is None else bytes(value[:RAW_LIMIT]).decode("utf-8", "replace")
                )
    for reason in reasons:
        for sample in reason.samples:
            if sample["raw"] is None and sample["bronze_ref"] in found:
                sample["raw"] = found[sample["bronze_ref"]]


def heartbeat_lag(path: Path) -> list[HeartbeatLag]:
    """Per source: heartbeats seen, the latest one's lag (ingest_ts - event_ts) and the largest."""
    timed: dict[str, list[tuple[dt.datetime, float | None]]] = {}
    without_time: Counter[str | None] = Counter()
    for row in delta_rs.read_table(path, ["source_name", "event_ts", "ingest_ts"]).to_pylist():
        event, ingest = row["event_ts"], row["ingest_ts"]
        if event is None:
            without_time[row["source_name"]] += 1
            continue
        lag = None if ingest is None else ingest.timestamp() - event.timestamp()  # Spark's cast to double
        timed.setdefault(row["source_name"] or "?", []).append((event, lag))
    found = []
    for source in sorted(timed):
        beats = timed[source]
        latest, latest_lag = max(beats, key=lambda beat: beat[0])
        lags = [lag for _, lag in beats if lag is not None]
        local = local_time(latest)  # as Spark gives a TIMESTAMP
        found.append(HeartbeatLag(source, len(beats), local, latest_lag, max(lags) if lags else None))
    for source, count in without_time.items():
        found.append(HeartbeatLag(source or "?", count, None, None, None))
    return found


def account_source(source: str, bronze: Path, silver: Path | None, quarantine: Path | None) -> SourceAccounting:
    """The accounting of one source from its bronze, silver and silver quarantine tables."""
    rank_of = {outcome: index for index, outcome in enumerate(OUTCOMES)}
    ranks: dict[str, int] = {}
    quarantined: set[str] = set()

    def outcome(ref: str | None, kind: str | None) -> None:
        if ref is None:
            return
        rank = rank_of.get(kind, rank_of[OTHER]) if kind is not None else rank_of[OTHER]
        ranks[ref] = min(rank, ranks.get(ref, rank))
        if kind == QUARANTINED:
            quarantined.add(ref)

    if silver is not None:
        for batch in delta_rs.read_batches(silver, [*_refs(silver), "kind"]):
            for row in batch.to_pylist():
                for ref in [row["bronze_ref"], *(row.get("related_refs") or [])]:
                    outcome(ref, row["kind"])
    if quarantine is not None:
        for batch in delta_rs.read_batches(quarantine, _refs(quarantine)):
            for row in batch.to_pylist():
                for ref in [row["bronze_ref"], *(row.get("related_refs") or [])]:
                    outcome(ref, QUARANTINED)

    result = SourceAccounting(source=source, bronze=0)
    seen, unaccounted, identities, present = set(), [], set(), 0
    for row in _bronze_rows(bronze, ["key", "value"]):
        ref = row["ref"]
        seen.add(ref)
        result.bronze += 1
        if ref not in ranks:
            unaccounted.append(ref)
        else:
            name = OUTCOMES[ranks[ref]]
            result.outcomes[name] = result.outcomes.get(name, 0) + 1
            result.partly_quarantined += int(ref in quarantined and ranks[ref] < rank_of[QUARANTINED])
        if row["value"] is not None:  # redelivered: the same topic, key and bytes landed again
            present += 1
            key = None if row["key"] is None else hashlib.sha256(row["key"]).digest()
            identities.add((row["topic"] or "", key, hashlib.sha256(row["value"]).digest()))
    result.unaccounted = len(unaccounted)
    result.unaccounted_samples = sorted(unaccounted)[:5]
    result.unknown_refs = sum(1 for ref in ranks if ref not in seen)
    held = {ref for ref, rank in ranks.items() if rank == rank_of[KIND_HELD]}
    if result.outcomes.get(KIND_HELD) and silver is not None:  # samples of the held messages
        first: dict[str, dict[str, Any]] = {}
        columns = ["kind", "bronze_ref", "detail", "tx_id", "source_table", "ingest_ts"]
        for batch in delta_rs.read_batches(silver, columns):
            for row in python_rows(batch):
                if row["kind"] == KIND_HELD and row["bronze_ref"] in held:
                    first.setdefault(row["bronze_ref"], row)
        result.held = [
            {
                "bronze_ref": ref,
                "detail": first[ref]["detail"],
                "tx_id": first[ref]["tx_id"],
                "source_table": first[ref]["source_table"],
                "ingest_ts": first[ref]["ingest_ts"].isoformat() if first[ref]["ingest_ts"] else None,
            }
            for ref in sorted(first)[:HELD_SAMPLES]
        ]
    result.redelivered = present - len(identities)
    return result


def bronze_ref(row: Mapping[str, Any]) -> str:
    """`model.bronze_ref_column` of one bronze row: topic/partition/offset, or file:line."""
    if row["offset"] is not None:
        partition = row["partition"] if row["partition"] is not None else 0
        return f"{row['topic'] or ''}/{partition}/{row['offset']}"
    return ":".join(str(part) for part in (row["_file"], row["_line"]) if part is not None)


def _bronze_rows(path: Path, columns: list[str]) -> Iterator[dict[str, Any]]:
    """Bronze rows with their `ref`, batch by batch (bronze is the largest table)."""
    position = ["topic", "partition", "offset", "_file", "_line"]
    for batch in delta_rs.read_batches(path, [*position, *[c for c in columns if c not in position]]):
        for row in batch.to_pylist():
            row["ref"] = bronze_ref(row)
            yield row


def _refs(path: Path) -> list[str]:
    """The columns naming the bronze messages an event consumed."""
    return ["bronze_ref", *[c for c in ("related_refs",) if c in delta_rs.column_names(path)]]
