"""Crash safety on a live stream, as the user meets it: `cdc-medallion ingest` on a Debezium
stream with malformed lines, SIGKILLed at a random commit point (bronze, silver or gold) in
every run while new messages keep arriving. After a final clean run, gold equals the ground
truth, bronze holds every line exactly once and the malformed lines are quarantined once each.
The same drill on a few hundred thousand messages is `python -m bench.crash` (outside CI)."""

from __future__ import annotations

from cdc_medallion.generator.drill import check, kill_drill
from cdc_medallion.generator.history import generate_history

HISTORY = generate_history(tables=1, transactions=600, seed=23)  # one table: the drill is about commits, not keys


def test_ingest_killed_at_random_commit_points(spark, tmp_path):
    result = kill_drill(HISTORY, tmp_path, pieces=16, seed=42, batch_size=300, max_point=18)  # 18 per run here

    assert len(result.kills) >= 14, result.kills
    assert {"bronze", "silver", "gold"} <= set(result.stages()), result.stages()
    assert result.garbage >= 1
    problems = check(spark, HISTORY, result)
    assert not problems, "\n".join(problems[:20])
