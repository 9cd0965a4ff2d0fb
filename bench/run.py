"""`make bench`: every measurement of one run, written to bench/results/.

Sizes: BENCH_N (default 1,000,000) row changes per format. Every ratio compares two things
measured in this run on this machine, so a loaded machine slows both sides alike. Every pipeline
run takes its streaming queries one at a time (bench/ours.py), so stage seconds add up.

BENCH_ENGINE_ROOT (or --engine-root) measures the engine and harness of another checkout, the old
engine's worktree for one (bench/engine.py); bench/compare.py sets two results side by side.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
JSON_PEERS = ("debezium-json", "canal-json")  # the formats Flink reads too


def _args(argv: list[str] | None) -> argparse.Namespace:
    from cdc_medallion.formats import format_names

    parser = argparse.ArgumentParser(prog="bench", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=int(os.environ.get("BENCH_N", "1000000")), help="changes per format")
    parser.add_argument(
        "--formats",
        default=os.environ.get("BENCH_FORMATS", "all"),
        help=f"comma-separated, or 'all' ({', '.join(format_names())})",
    )
    parser.add_argument(
        "--parts", default=os.environ.get("BENCH_PARTS", ",".join(PARTS)), help=f"comma-separated of {', '.join(PARTS)}"
    )
    parser.add_argument("--ten-million", action="store_true", default=os.environ.get("BENCH_10M") == "1")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("BENCH_WORK", HERE / ".work")))
    parser.add_argument("--results", type=Path, default=None, help="default bench/results of the engine's root")
    parser.add_argument(
        "--engine-root",
        type=Path,
        default=Path(os.environ["BENCH_ENGINE_ROOT"]) if os.environ.get("BENCH_ENGINE_ROOT") else None,
        help="measure the checkout there with its own harness, e.g. /work/old-engine ($BENCH_ENGINE_ROOT)",
    )
    parser.add_argument("--tables", type=int, default=200, help="the many-tables case")
    parser.add_argument(
        "--deletion-vectors-too",
        action="store_true",
        default=os.environ.get("BENCH_DELETION_VECTORS_TOO") == "1",
        help="the incremental part also with deletion vectors set the other way ($BENCH_DELETION_VECTORS_TOO=1)",
    )

    def optional(name: str, env: str, help_text: str) -> None:
        value = os.environ.get(env)
        parser.add_argument(name, type=int, default=int(value) if value else None, help=f"{help_text} (${env})")

    optional("--peer-n", "BENCH_PEER_N", "changes in the Flink comparison (default N)")
    optional(
        "--incremental-rows", "BENCH_INCREMENTAL_ROWS", "the bigger gold table (default N; 10N with --ten-million)"
    )
    optional("--incremental-changes", "BENCH_INCREMENTAL_CHANGES", "changes applied (default min(100k, rows/10))")
    optional("--tables-changes", "BENCH_TABLES_CHANGES", "changes in the many-tables case (default N/10)")
    args = parser.parse_args(argv)
    args.formats = format_names() if args.formats == "all" else [f.strip() for f in args.formats.split(",")]
    args.parts = {p.strip() for p in args.parts.split(",")}
    return args


def say(line: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    import pyspark

    model = ""
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
        model = names[0] if names else ""
    with open("/proc/meminfo") as meminfo:
        total = int(meminfo.readline().split()[1]) * 1024
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(total / (1 << 30), 1),
        "python": platform.python_version(),
        "spark": pyspark.__version__,
        "spark_master": os.environ.get("CDC_MEDALLION_SPARK_MASTER", "local[2]"),
        "platform": platform.platform(),
    }


def rate(count: float, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def ratio(floor_seconds: float, our_seconds: float) -> float:
    """Our speed as a fraction of the floor's (1.0 = as fast as the floor)."""
    return round(floor_seconds / our_seconds, 3) if our_seconds > 0 else 0.0


# --- parts ------------------------------------------------------------------------------------
def warm_up(spark, sampler, args) -> None:
    """One untimed small run before anything is timed. The JVM compiles Spark's code paths on
    first use, and without this the first format measured would pay for it (bench/HISTORY.md)."""
    from bench import ours
    from bench.workloads import workload

    say("warm-up: debezium-json, 2,000 changes, not timed")
    work = workload(args.work / "inputs", "debezium-json", 2_000, say=say)
    with work.fresh_storage() as conf:
        ours.run(spark, conf, sampler)


def per_format(spark, sampler, args) -> dict[str, Any]:
    from bench import floors, ours
    from bench.workloads import workload

    results: dict[str, Any] = {}
    for fmt in args.formats:
        say(f"{fmt}: {args.n:,} changes")
        work = workload(args.work / "inputs", fmt, args.n, say=say)
        floor = floors.measure(spark, work, args.work)
        say(
            f"  floors: text {floor.text_count:.1f}s, from_json→noop {floor.from_json_noop:.1f}s, "
            f"→parquet {floor.from_json_parquet:.1f}s"
        )
        with work.fresh_storage() as conf:
            run = ours.run(spark, conf, sampler)
            parse = ours.silver_parse(spark, conf)
            handoff = ours.python_handoff(spark, conf)
        mb = work.bytes / 1e6
        entry = {
            "messages": work.messages,
            "events": work.events,
            "mb": round(mb, 1),
            "floors_s": {k: round(v, 2) for k, v in asdict(floor).items() if k != "message_parsed"}
            | {"python_handoff_noop": round(handoff, 2)},
            "floor_parses_message": floor.message_parsed,
            "end_to_end_s": round(run.seconds, 2),
            "stages_s": {k: round(v, 2) for k, v in run.stages.items()},
            "silver_parse_s": round(parse, 2),
            "events_per_s_end_to_end": rate(work.events, run.seconds),
            "messages_per_s_end_to_end": rate(work.messages, run.seconds),
            "mb_per_s_end_to_end": rate(mb, run.seconds),
            "stage_messages_per_s": {k: rate(work.messages, v) for k, v in run.stages.items()},
            "silver_parse_vs_from_json": ratio(floor.from_json_noop, parse),
            "silver_parse_vs_python_handoff": ratio(handoff, parse),
            "python_handoff_vs_from_json": ratio(floor.from_json_noop, handoff),
            "end_to_end_vs_parquet_floor": ratio(floor.from_json_parquet, run.seconds),
            "memory": run.memory,
        }
        say(
            f"  ours: {run.seconds:.1f}s end to end ({entry['events_per_s_end_to_end']:,.0f} events/s; "
            f"bronze {run.stages['bronze']:.1f}s, silver {run.stages['silver']:.1f}s, gold {run.stages['gold']:.1f}s), "
            f"silver parse {parse:.1f}s (Python hand-off alone {handoff:.1f}s); "
            f"vs from_json {entry['silver_parse_vs_from_json']}, "
            f"vs parquet floor {entry['end_to_end_vs_parquet_floor']}; driver {run.memory['driver_gib']} GiB"
        )
        results[fmt] = entry
    return results


def peer(spark, sampler, args) -> dict[str, Any]:
    from bench import ours
    from bench.peer import ensure_flink, run_flink
    from bench.workloads import values_file, workload
    from cdc_medallion.config import InputConf

    why_not = ensure_flink(say)
    results: dict[str, Any] = {}
    for fmt in JSON_PEERS:
        size = args.peer_n or args.n
        say(f"peer: {fmt}, one table, {size:,} changes, the same values file for both")
        work = workload(args.work / "inputs", fmt, size, tables=1, say=say)
        values, lines = values_file(work, work.conf_path.parent / "values.json")
        with work.fresh_storage() as conf:
            source = conf.sources[0].model_copy(update={"input": InputConf(path=values, layout="json-lines")})
            run = ours.run(spark, replace(conf, sources=(source,)), sampler)
        entry: dict[str, Any] = {"messages": lines, "ours_s": round(run.seconds, 2)}
        if why_not is None:
            flink = run_flink(fmt, values)
            entry["flink_s"] = round(flink.seconds, 2) if flink.seconds is not None else None
            entry["flink_error"] = flink.error
        else:
            entry["flink_s"], entry["flink_error"] = None, why_not
        if entry["flink_s"]:
            entry["ours_vs_flink"] = ratio(entry["flink_s"], run.seconds)
            say(
                f"  ours {run.seconds:.1f}s, Flink {entry['flink_s']:.1f}s: "
                f"ours at {entry['ours_vs_flink']}× Flink's speed"
            )
        else:
            say(f"  ours {run.seconds:.1f}s; Flink not measured: {entry['flink_error']}")
        results[fmt] = entry
    return results


def growth(spark, sampler, args) -> dict[str, Any]:
    from bench import ours
    from bench.workloads import workload

    sizes = sorted({max(1000, args.n // 10), args.n} | ({10 * args.n} if args.ten_million else set()))
    if os.environ.get("BENCH_GROWTH"):  # e.g. 100000,1000000,10000000
        sizes = sorted(int(size) for size in os.environ["BENCH_GROWTH"].split(","))
    results: dict[str, Any] = {}
    for size in sizes:
        say(f"growth: debezium-json at {size:,} changes")
        work = workload(args.work / "inputs", "debezium-json", size, say=say)
        with work.fresh_storage() as conf:
            run = ours.run(spark, conf, sampler)
        results[str(size)] = {
            "events": work.events,
            "seconds": round(run.seconds, 2),
            "stages_s": {k: round(v, 2) for k, v in run.stages.items()},
            "events_per_s": rate(work.events, run.seconds),
            "memory": run.memory,
        }
        say(
            f"  {run.seconds:.1f}s (bronze {run.stages['bronze']:.1f}s, silver {run.stages['silver']:.1f}s, "
            f"gold {run.stages['gold']:.1f}s), {results[str(size)]['events_per_s']:,.0f} events/s, "
            f"driver {run.memory['driver_gib']} GiB"
        )
    return results


def incremental(spark, sampler, args) -> dict[str, Any]:
    """The same changes into a table and into one ten times bigger: the increment should cost
    what it touches, not what the table holds (target: at most 1.5× for the 10× table)."""
    from bench.workloads import incremental as make
    from cdc_medallion.storage.delta_store import DELETION_VECTORS_DEFAULT, gold_features

    big = args.incremental_rows or (10 * args.n if args.ten_million else args.n)
    rows_list = [big // 10, big]
    changes = args.incremental_changes or max(1000, min(100_000, big // 100))

    def both_sizes(deletion_vectors: bool | None) -> dict[str, Any]:
        """Each size in fresh tables; None leaves deletion vectors to the engine's default."""
        if deletion_vectors is not None:
            spark.conf.set(DELETION_VECTORS_DEFAULT, str(deletion_vectors).lower())
        setting = "as the engine sets them" if deletion_vectors is None else ("on" if deletion_vectors else "off")
        results: dict[str, Any] = {}
        for rows in rows_list:
            say(f"incremental: {changes:,} changes into {rows:,} rows, deletion vectors {setting}")
            work = make(args.work / "inputs", "debezium-json", rows, changes, say=say)
            results[str(rows)] = _increment(spark, sampler, work)
        small, large = (results[str(r)] for r in rows_list)
        return {
            "runs": results,
            "incremental_cost_ratio_10x_table": _ratio(large, small),
            "gold_cost_ratio_10x_table": _ratio(large, small, "gold"),
        }

    spark.conf.unset(DELETION_VECTORS_DEFAULT)
    in_gold = gold_features(spark)["delta.enableDeletionVectors"] == "true"
    try:
        measured = both_sizes(None) | {"deletion_vectors": in_gold}
        if args.deletion_vectors_too:  # every new table then takes the other setting
            measured["other_deletion_vectors"] = both_sizes(not in_gold) | {"deletion_vectors": not in_gold}
    finally:
        spark.conf.unset(DELETION_VECTORS_DEFAULT)
    return measured


def _increment(spark, sampler, work) -> dict[str, Any]:
    from bench import ours

    with work.base.fresh_storage() as conf:
        load = ours.run(spark, conf, sampler)
        work.append_increment()
        run = ours.run(spark, conf, sampler)
    say(f"  load {load.seconds:.1f}s; increment {run.seconds:.1f}s (gold {run.stages['gold']:.1f}s)")
    return {
        "rows": work.rows,
        "changes": work.changes,
        "load_s": round(load.seconds, 2),
        "increment_s": round(run.seconds, 2),
        "increment_stages_s": {k: round(v, 2) for k, v in run.stages.items()},
        "load_memory": load.memory,
        "memory": run.memory,
    }


def _ratio(large: dict[str, Any], small: dict[str, Any], stage: str | None = None) -> float:
    """The whole increment's cost ratio, or one stage's."""
    big, little = (r["increment_stages_s"][stage] if stage else r["increment_s"] for r in (large, small))
    return round(big / max(little, 1e-9), 3)


def many_tables(spark, sampler, args) -> dict[str, Any]:
    from bench import ours
    from bench.workloads import workload

    total = args.tables_changes or max(1000, args.n // 10)
    results: dict[str, Any] = {}
    for tables in (1, args.tables):
        say(f"tables: {total:,} changes over {tables} table(s), the last {SMALL_UPDATE} messages as an update")
        work = workload(args.work / "inputs", "debezium-json", total, tables=tables, say=say)
        with work.held_back(SMALL_UPDATE) as (conf, release):
            run = ours.run(spark, conf, sampler)
            release()
            small = ours.run(spark, conf, sampler)
            idle = ours.run(spark, conf, sampler)
        results[str(tables)] = {"tables": tables, "events": work.events, "seconds": round(run.seconds, 2)}
        results[str(tables)]["stages_s"] = {k: round(v, 2) for k, v in run.stages.items()}
        results[str(tables)]["small_update_s"] = round(small.seconds, 2)
        results[str(tables)]["nothing_new_s"] = round(idle.seconds, 2)
        results[str(tables)]["classes_compiled"] = {"load": run.compiled, "small_update": small.compiled}
        say(
            f"  {run.seconds:.1f}s (gold {run.stages['gold']:.1f}s, {run.compiled:,} classes compiled); update of "
            f"{SMALL_UPDATE} messages {small.seconds:.1f}s; nothing new {idle.seconds:.1f}s"
        )
    many, one = results[str(args.tables)], results["1"]
    results["many_vs_one_cost_ratio"] = round(many["seconds"] / one["seconds"], 3)
    results["small_update_many_vs_one"] = round(many["small_update_s"] / one["small_update_s"], 3)
    results["small_update_messages"] = SMALL_UPDATE
    return results


SMALL_UPDATE = 10  # messages in the many-tables part's small update: a trickle over a loaded pipeline


def cold_start(spark, sampler, args) -> dict[str, Any]:
    """`cdc-medallion ingest` of ten messages in a fresh process (bench/cold.py): the JVM's start and
    the pipeline's first run; a process that only starts Spark is timed beside it."""
    from bench import cold

    say(f"cold: `cdc-medallion ingest` of {cold.MESSAGES} {cold.FORMAT} messages in a fresh process, {cold.RUNS}×")
    return cold.measure(REPO, args.work / "cold", say=say)


PARTS = ("cold", "formats", "peer", "growth", "incremental", "tables")


# --- main -------------------------------------------------------------------------------------
def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The headline keys (the worst JSON format for each ratio: a target is met by every format)."""
    formats = results.get("formats", {})
    json_formats = {f: r for f, r in formats.items() if f.endswith("-json")}
    head: dict[str, Any] = {}
    if json_formats:
        head["silver_parse_vs_from_json"] = min(r["silver_parse_vs_from_json"] for r in json_formats.values())
        head["silver_parse_vs_from_json_median"] = statistics.median(
            r["silver_parse_vs_from_json"] for r in json_formats.values()
        )
        for key in ("silver_parse_vs_python_handoff", "python_handoff_vs_from_json"):
            measured = [r[key] for r in json_formats.values() if key in r]
            if measured:
                head[key] = min(measured)
        head["end_to_end_vs_parquet_floor"] = min(r["end_to_end_vs_parquet_floor"] for r in json_formats.values())
        head["end_to_end_vs_parquet_floor_median"] = statistics.median(
            r["end_to_end_vs_parquet_floor"] for r in json_formats.values()
        )
    if formats:
        events = sum(r["events"] for r in formats.values())
        seconds = sum(r["end_to_end_s"] for r in formats.values())
        head["events_per_s_end_to_end"] = rate(events, seconds)
    if "incremental" in results:
        head["incremental_cost_ratio_10x_table"] = results["incremental"]["incremental_cost_ratio_10x_table"]
    if results.get("cold"):
        head["cold_ingest_s"] = results["cold"]["seconds"]
    for fmt, key in (("debezium-json", "vs_flink_debezium"), ("canal-json", "vs_flink_canal")):
        measured = results.get("peer", {}).get(fmt, {}).get("ours_vs_flink")
        if measured is not None:
            head[key] = measured
    return head


def carried(latest: Path, parts: set[str]) -> dict[str, Any]:
    """Parts not run this time, kept from the previous results with the run they came from, so
    rerunning one part does not erase the others. Every ratio is within one part, so a carried
    part's figures are still measured in one run."""
    if not latest.is_file():
        return {}
    previous = json.loads(latest.read_text(encoding="utf-8"))
    kept: dict[str, Any] = {"carried_from": {}}
    for name in sorted(parts):
        if name in previous:
            kept[name] = previous[name]
            origin = previous.get("carried_from", {}).get(name, {"date": previous["date"], "n": previous["n"]})
            if "engine" in previous and name not in previous.get("carried_from", {}):
                origin = origin | {"engine": previous["engine"].get("commit")}  # which engine measured it
            kept["carried_from"][name] = origin
    return kept if kept["carried_from"] else {}


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from bench import engine

    if args.engine_root is not None and not engine.is_this_repo(args.engine_root):
        return engine.run_other(args.engine_root, sys.argv[1:] if argv is None else argv, args, say=say)
    from bench.memory import RssSampler
    from bench.ours import MAX_CONCURRENT_FLOWS
    from bench.report import headline_peak, write_results
    from cdc_medallion.spark import get_spark

    args.results = args.results or HERE / "results"
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "n": args.n,
        "parts": sorted(args.parts),
        "engine": {"root": str(REPO), "commit": engine.commit_of(REPO), "max_concurrent_flows": MAX_CONCURRENT_FLOWS},
    }
    parts = (
        ("cold", cold_start),  # first, before this process starts its own JVM
        ("formats", per_format),
        ("peer", peer),
        ("growth", growth),
        ("incremental", incremental),
        ("tables", many_tables),
    )
    results.update(carried(args.results / "latest.json", {name for name, _ in parts} - args.parts))
    failed: list[str] = []
    latest = report = args.results
    spark = None
    with RssSampler() as sampler:
        for name, part in parts:
            if name not in args.parts:
                continue
            if spark is None and name != "cold":  # the cold part starts its own processes
                spark = get_spark("cdc-medallion-bench")
                warm_up(spark, sampler, args)
            try:
                results[name] = part(spark, sampler, args)
            except Exception as error:  # a part that fails is reported; the others still count
                failed.append(name)
                results.setdefault("errors", {})[name] = f"{type(error).__name__}: {str(error).strip()[:500]}"
                say(f"{name} failed: {results['errors'][name]}")
            results["peak_memory"] = sampler.overall.as_gib()
            results["peak_rss_gib"], results["peak_rss_from"] = headline_peak(
                results, results["peak_memory"]["driver_gib"]
            )
            results["seconds"] = round(time.monotonic() - started, 1)
            results.update(summary(results))
            latest, report = write_results(results, args.results)  # after every part: nothing measured is lost
    say(f"results: {latest} and {report}")
    return 1 if failed else 0
