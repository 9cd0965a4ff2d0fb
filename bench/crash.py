"""The kill drill at scale: `cdc-medallion ingest` on a Debezium stream of a few
hundred thousand messages with malformed lines, SIGKILLed at random commit points in every run
while the stream grows, then completed. Writes bench/results/crash.json.

    python -m bench.crash            # BENCH_CRASH_CHANGES (default 300,000) row changes

Not a test (it takes a while); tests/test_crash_safety.py runs the same drill small in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from bench.workloads import history_for
    from cdc_medallion.generator.drill import check, kill_drill
    from cdc_medallion.spark import get_spark

    changes = int(os.environ.get("BENCH_CRASH_CHANGES", "300000"))
    pieces = int(os.environ.get("BENCH_CRASH_PIECES", "24"))
    work = Path(os.environ.get("BENCH_WORK", HERE / ".work")) / "crash"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    def say(line: str) -> None:
        print(f"[crash {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    history = history_for(changes, tables=3, seed=5)
    # Micro-batches of 5k messages and kill points up to 40: a piece is several batches, so kills
    # land in every layer and in later batches of a run, not only in its first.
    result = kill_drill(history, work, pieces=pieces, seed=9, batch_size=5_000, max_point=40, timeout=3600, say=say)
    problems = check(get_spark(), history, result)
    report = {
        "changes": sum(len(t.changes) for t in history.transactions),
        "lines": result.lines,
        "garbage_lines": result.garbage,
        "runs": pieces + 1,
        "kills": len(result.kills),
        "kills_by_layer": dict(result.stages()),
        "kill_points": result.kills,
        "seconds": round(result.seconds, 1),
        "problems": problems[:50],
        "ok": not problems,
    }
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "crash.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    say(
        f"{report['kills']} kills {report['kills_by_layer']} over {result.lines:,} lines; "
        f"{'gold equals the truth, bronze exactly once, quarantine exactly once' if not problems else problems[:5]}"
    )
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
