"""Every bronze message accounted for, per source: the counts must add up.

Each bronze message (its `bronze_ref`) gets exactly one outcome: the kind of the silver event
that consumed it (through `bronze_ref` or `related_refs`), `quarantined`, or `held` while its
only outcome is a held event. A message that yields several events (a multi-row message, a
record quarantined inside an applied transaction) counts once, under the first outcome in
`OUTCOMES` order. Then

    bronze = changes + schema changes + heartbeats + transaction markers + tombstones
             + messages + keys + quarantined + held

holds exactly when no bronze message lacks an outcome (`unaccounted`) and no event names a
message that is not in bronze (`unknown_refs`); either one is a failed check.

Redelivered duplicates (a message whose non-null bytes repeat an earlier message of the same
source, topic and key) are counted too: a warning, since gold applies each change once anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdc_medallion.model import (
    KIND_CHANGE,
    KIND_HEARTBEAT,
    KIND_HELD,
    KIND_KEY,
    KIND_MESSAGE,
    KIND_SCHEMA_CHANGE,
    KIND_TOMBSTONE,
    KIND_TRANSACTION,
    bronze_ref_column,
)

QUARANTINED = "quarantined"
OTHER = "other"
#: Outcome precedence: a message with several outcomes counts under the first.
OUTCOMES = (
    KIND_CHANGE,
    KIND_SCHEMA_CHANGE,
    KIND_HEARTBEAT,
    KIND_TRANSACTION,
    KIND_TOMBSTONE,
    KIND_MESSAGE,
    KIND_KEY,
    OTHER,
    QUARANTINED,
    KIND_HELD,
)
LABELS = {
    KIND_CHANGE: "changes",
    KIND_SCHEMA_CHANGE: "schema changes",
    KIND_HEARTBEAT: "heartbeats",
    KIND_TRANSACTION: "transaction markers",
    KIND_TOMBSTONE: "tombstones",
    KIND_MESSAGE: "messages",
    KIND_KEY: "keys",
    OTHER: "other kinds",
    QUARANTINED: "quarantined",
    KIND_HELD: "held",
}
HELD_SAMPLES = 20


@dataclass
class SourceAccounting:
    source: str
    bronze: int
    outcomes: dict[str, int] = field(default_factory=dict)  # outcome -> distinct bronze messages
    unaccounted: int = 0  # bronze messages with no outcome at all
    unknown_refs: int = 0  # refs named by silver/quarantine that are not in bronze
    redelivered: int = 0
    partly_quarantined: int = 0  # messages applied, one of whose records was quarantined
    held: list[dict[str, str | None]] = field(default_factory=list)  # samples: ref, detail, tx_id
    unaccounted_samples: list[str] = field(default_factory=list)

    @property
    def accounted(self) -> int:
        return sum(self.outcomes.values())

    @property
    def balanced(self) -> bool:
        return self.unaccounted == 0 and self.unknown_refs == 0 and self.accounted == self.bronze

    def equation(self) -> str:
        parts = " + ".join(
            f"{self.outcomes.get(o, 0)} {LABELS[o]}" for o in OUTCOMES if o != OTHER or self.outcomes.get(o)
        )
        sign = "=" if self.balanced else "≠"
        return f"{self.bronze} bronze {sign} {parts}"

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "bronze": self.bronze,
            "outcomes": dict(self.outcomes),
            "unaccounted": self.unaccounted,
            "unknown_refs": self.unknown_refs,
            "redelivered": self.redelivered,
            "partly_quarantined": self.partly_quarantined,
            "balanced": self.balanced,
            "held": self.held,
            "unaccounted_samples": self.unaccounted_samples,
        }

    @classmethod
    def from_dict(cls, raw: dict) -> SourceAccounting:
        return cls(
            source=raw["source"],
            bronze=int(raw["bronze"]),
            outcomes={k: int(v) for k, v in (raw.get("outcomes") or {}).items()},
            unaccounted=int(raw.get("unaccounted", 0)),
            unknown_refs=int(raw.get("unknown_refs", 0)),
            redelivered=int(raw.get("redelivered", 0)),
            partly_quarantined=int(raw.get("partly_quarantined", 0)),
            held=list(raw.get("held") or []),
            unaccounted_samples=list(raw.get("unaccounted_samples") or []),
        )


def _refs(events: DataFrame, ref: str = "bronze_ref") -> Column:
    related = (
        F.coalesce(F.col("related_refs"), F.array().cast("array<string>"))
        if "related_refs" in events.columns
        else F.array().cast("array<string>")
    )
    return F.explode(F.concat(F.array(F.col(ref)), related))


def _rank(kind: Column) -> Column:
    ranked = F.lit(OUTCOMES.index(OTHER))
    for index, outcome in enumerate(OUTCOMES):
        if outcome != OTHER:
            ranked = F.when(kind == outcome, F.lit(index)).otherwise(ranked)
    return ranked


def account_source(
    source: str, bronze: DataFrame, silver: DataFrame | None, quarantine: DataFrame | None
) -> SourceAccounting:
    """The accounting of one source from its bronze, silver and silver quarantine tables."""
    spark = bronze.sparkSession
    outcomes = spark.createDataFrame([], "ref string, rank int, kind string")
    if silver is not None:
        outcomes = outcomes.unionByName(
            silver.select(_refs(silver).alias("ref"), F.col("kind")).select(
                "ref", _rank(F.col("kind")).alias("rank"), "kind"
            )
        )
    if quarantine is not None:
        outcomes = outcomes.unionByName(
            quarantine.select(_refs(quarantine).alias("ref")).select(
                "ref", F.lit(OUTCOMES.index(QUARANTINED)).alias("rank"), F.lit(QUARANTINED).alias("kind")
            )
        )
    per_ref = (
        outcomes.filter(F.col("ref").isNotNull())
        .groupBy("ref")
        .agg(
            F.min("rank").alias("rank"),
            F.max((F.col("kind") == QUARANTINED).cast("int")).alias("any_quarantined"),
        )
    )
    refs = bronze.select(bronze_ref_column().alias("ref"), F.lit(True).alias("in_bronze"))
    joined = refs.join(per_ref, "ref", "full_outer").cache()
    try:
        rows = (
            joined.groupBy(F.coalesce("in_bronze", F.lit(False)).alias("in_bronze"), "rank")
            .agg(
                F.count(F.lit(1)).alias("n"),
                F.sum(
                    F.when(
                        (F.col("any_quarantined") == 1) & (F.col("rank") < OUTCOMES.index(QUARANTINED)), 1
                    ).otherwise(0)
                ).alias("partly"),
            )
            .collect()
        )
        result = SourceAccounting(source=source, bronze=0)
        for row in rows:
            if row["in_bronze"]:
                result.bronze += row["n"]
                if row["rank"] is None:
                    result.unaccounted += row["n"]
                else:
                    outcome = OUTCOMES[row["rank"]]
                    result.outcomes[outcome] = result.outcomes.get(outcome, 0) + row["n"]
                    result.partly_quarantined += row["partly"] or 0
            else:
                result.unknown_refs += row["n"]
        if result.unaccounted:
            missing = (
                joined.filter(F.col("in_bronze") & F.col("rank").isNull())
                .select("ref")
                .orderBy("ref")
                .limit(5)
                .collect()
            )
            result.unaccounted_samples = [r["ref"] for r in missing]
        if result.outcomes.get(KIND_HELD) and silver is not None:
            held = joined.filter(F.col("rank") == OUTCOMES.index(KIND_HELD)).select("ref")
            samples = (
                silver.filter(F.col("kind") == KIND_HELD)
                .join(held, silver["bronze_ref"] == held["ref"], "left_semi")
                .select("bronze_ref", "detail", "tx_id", "source_table", "ingest_ts")
                .dropDuplicates(["bronze_ref"])
                .orderBy("bronze_ref")
                .limit(HELD_SAMPLES)
                .collect()
            )
            result.held = [
                {
                    "bronze_ref": r["bronze_ref"],
                    "detail": r["detail"],
                    "tx_id": r["tx_id"],
                    "source_table": r["source_table"],
                    "ingest_ts": r["ingest_ts"].isoformat() if r["ingest_ts"] else None,
                }
                for r in samples
            ]
    finally:
        joined.unpersist()
    result.redelivered = redelivered(bronze)
    return result


def redelivered(bronze: DataFrame) -> int:
    """Bronze messages whose bytes (topic, key, value) repeat an earlier message's."""
    present = bronze.filter(F.col("value").isNotNull())
    identity = [
        F.coalesce(F.col("topic"), F.lit("")),
        F.coalesce(F.sha2(F.col("key"), 256), F.lit("")),
        F.sha2(F.col("value"), 256),
    ]
    row = present.agg(F.count(F.lit(1)).alias("n"), F.count_distinct(F.concat_ws("|", *identity)).alias("d")).collect()[
        0
    ]
    return int(row["n"] or 0) - int(row["d"] or 0)
