"""bench/results/: latest.json, and a dated Markdown report with its chart."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TARGETS = {
    "silver_parse_vs_from_json": (">=", 0.75),
    "end_to_end_vs_parquet_floor": (">=", 0.5),
    "incremental_cost_ratio_10x_table": ("<=", 1.5),
    "vs_flink_debezium": (">=", 1.0),
    "peak_rss_gib": ("<=", 4.0),
}


MEMORY_TARGET_EVENTS = 10_000_000  # the driver target is set for this size: smaller runs are not judged


def _met(key: str, value: float) -> str:
    op, target = TARGETS[key]
    ok = value >= target if op == ">=" else value <= target
    return f"{'met' if ok else 'MISSED'} (target {op} {target})"


def recorded_peak(part: Any) -> float:
    """The highest driver peak a part's results record: each of its workloads keeps its own."""
    if not isinstance(part, dict):
        return 0.0
    own = part.get("driver_gib")
    peaks = [own if isinstance(own, int | float) else 0.0]
    return max(peaks + [recorded_peak(value) for value in part.values()])


def headline_peak(results: dict[str, Any], this_run: float) -> tuple[float, str]:
    """The driver peak to judge: this run's, or a carried part's when that part peaked higher.

    A part carried from an earlier run keeps its workloads' peaks, so a rerun of the small parts
    does not replace the 10M increment's peak with its own, lower one.
    """
    peak, origin = this_run, "this run"
    for name, source in results.get("carried_from", {}).items():
        carried = recorded_peak(results.get(name))
        if carried > peak:
            peak, origin = carried, f"part {name}, carried from {source['date']}"
    return peak, origin


def _largest_run(results: dict[str, Any]) -> int:
    """Events in the biggest workload behind the peak: run now, or carried with its own peak."""
    ran = set(results.get("parts", ())) | set(results.get("carried_from", {}))
    sizes = [r["events"] for r in results.get("formats", {}).values()] if "formats" in ran else []
    if "growth" in ran:
        sizes += [r["events"] for r in results.get("growth", {}).values() if isinstance(r, dict)]
    if "incremental" in ran:
        sizes += [r["rows"] for r in results.get("incremental", {}).get("runs", {}).values()]
    return max(sizes, default=0)


def _verdict(key: str, results: dict[str, Any]) -> str:
    """A memory peak below the target on a small run says nothing about 10M events: not judged."""
    verdict = _met(key, results[key])
    largest = _largest_run(results)
    if key == "peak_rss_gib" and largest < MEMORY_TARGET_EVENTS:
        return f"not judged: the target is for 10M events; at this run's largest, {largest:,} events: {verdict}"
    return verdict


FORMAT_COLUMNS = [
    "format",
    "messages",
    "MB",
    "end to end s",
    "msg/s",
    "MB/s",
    "bronze s",
    "silver s",
    "gold s",
    "silver parse s",
    "text count s",
    "from_json→noop s",
    "→parquet s",
    "Python hand-off s",
    "parse vs from_json",
    "parse vs hand-off",
    "e2e vs parquet",
    "driver GiB",
    "workers GiB",
]


HANDOFF_NOTE = (
    "The Python hand-off is bronze spread over the cores and handed to Python workers and back with "
    "nothing parsed (`mapInArrow` into `noop`): the floor of any parser written in Python and run as "
    "ours is. The silver parse minus the hand-off is the parsers' own work; from_json→noop over the "
    "hand-off is the best `parse vs from_json` such a parser could reach."
)
# Not targets: what bounds `silver_parse_vs_from_json` for a parser written in Python.
HANDOFF_HEADLINE = {
    "python_handoff_vs_from_json": "not a target: the best parse vs from_json a Python parser can reach (worst format)",
    "silver_parse_vs_python_handoff": "not a target: our parse as a fraction of that Python floor (worst format)",
}


def _incremental_lines(inc: dict[str, Any]) -> list[str]:
    lines = ["| gold rows | changes | load s | increment s | increment gold s |", "|---:|---:|---:|---:|---:|"]
    for r in inc["runs"].values():
        gold = r["increment_stages_s"]["gold"]
        lines.append(_row([f"{r['rows']:,}", f"{r['changes']:,}", r["load_s"], r["increment_s"], gold]))
    return [
        *lines,
        "",
        f"Cost ratio (10× table / 1× table): whole increment {inc['incremental_cost_ratio_10x_table']}, "
        f"gold stage {inc['gold_cost_ratio_10x_table']}.",
        "",
    ]


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def chart(results: dict[str, Any], path: Path) -> bool:
    """One panel per part that has something to draw; False, and no file, when none has."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [draw for part, draw in _PANELS.items() if results.get(part)]
    if not panels:
        return False
    figure, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.8), squeeze=False)
    for ax, draw in zip(axes[0], panels, strict=True):
        draw(ax, results)
    figure.suptitle(f"cdc-medallion bench, {results['date']}, {results['machine']['cpus']} cores")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def _formats_panel(ax, results: dict[str, Any]) -> None:
    formats = results["formats"]
    names = list(formats)
    series = {
        "ours, end to end": [r["messages_per_s_end_to_end"] for r in formats.values()],
        "ours, silver parse": [r["messages"] / max(r["silver_parse_s"], 1e-9) for r in formats.values()],
        "Spark from_json → parquet": [
            r["messages"] / max(r["floors_s"]["from_json_parquet"], 1e-9) for r in formats.values()
        ],
        "Spark from_json → noop": [
            r["messages"] / max(r["floors_s"]["from_json_noop"], 1e-9) for r in formats.values()
        ],
    }
    if all("python_handoff_noop" in r["floors_s"] for r in formats.values()):
        series["Python hand-off → noop"] = [
            r["messages"] / max(r["floors_s"]["python_handoff_noop"], 1e-9) for r in formats.values()
        ]
    width = 0.8 / len(series)
    middle = (len(series) - 1) / 2
    for index, (label, values) in enumerate(series.items()):
        ax.bar([i + (index - middle) * width for i in range(len(names))], values, width, label=label)
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("messages / s")
    ax.set_yscale("log")
    n = results.get("carried_from", {}).get("formats", {}).get("n", results["n"])
    ax.set_title(f"Per format, {n:,} changes")
    ax.legend(fontsize=7)


def _growth_panel(ax, results: dict[str, Any]) -> None:
    sizes = sorted(results["growth"], key=int)
    ax.plot([int(s) for s in sizes], [results["growth"][s]["events_per_s"] for s in sizes], "o-", label="end to end")
    ax.set_xscale("log")
    ax.set_xlabel("changes in the run (Debezium JSON)")
    ax.set_ylabel("events / s")
    ax.set_title("Growth")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)


def _incremental_panel(ax, results: dict[str, Any]) -> None:
    """The increment's seconds by stage, per target size: cost should follow the changes."""
    inc = results["incremental"]
    runs = {f"{int(rows):,} rows": r for rows, r in inc["runs"].items()}
    bottom = [0.0] * len(runs)
    for stage in ("bronze", "silver", "gold"):
        values = [r["increment_stages_s"].get(stage, 0.0) for r in runs.values()]
        ax.bar(list(runs), values, 0.6, bottom=bottom, label=stage)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    changes = next(iter(inc["runs"].values()))["changes"]
    ax.set_ylabel("seconds")
    ax.set_title(f"{changes:,} changes into gold")
    ax.legend(fontsize=7)


def _peer_panel(ax, results: dict[str, Any]) -> None:
    """Seconds for the same values file, ours (bronze to SCD1 and SCD2 gold) beside Flink's; no
    Flink bar where Flink could not run (the report's table says why)."""
    peer = results["peer"]
    names = list(peer)
    for offset, label, key in ((-0.2, "ours", "ours_s"), (0.2, "Apache Flink", "flink_s")):
        seconds = [r.get(key) or 0.0 for r in peer.values()]
        ax.bar([i + offset for i in range(len(names))], seconds, 0.4, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("seconds")
    messages = ", ".join(f"{r['messages']:,}" for r in peer.values())
    ax.set_title(f"Against Flink ({messages} messages)")
    ax.legend(fontsize=7)


_PANELS = {
    "formats": _formats_panel,
    "growth": _growth_panel,
    "incremental": _incremental_panel,
    "peer": _peer_panel,
}


def _engine_line(results: dict[str, Any]) -> list[str]:
    engine = results.get("engine")
    if not engine:
        return []
    at_once = engine.get("max_concurrent_flows")
    turns = f"; streaming queries {at_once} at a time (`max_concurrent_flows`)" if at_once else ""
    return [f"Engine: `{engine.get('commit', '?')}` at {engine.get('root', '?')}{turns}.", ""]


def markdown(results: dict[str, Any], chart_name: str | None) -> str:
    m = results["machine"]
    lines = [
        f"# Benchmark, {results['date']}",
        "",
        f"Machine: {m['cpus']} cores ({m['cpu_model']}), {m['memory_gib']} GiB, Python {m['python']}, "
        f"Spark {m['spark']} ({m['spark_master']}). N = {results['n']:,}; parts run: {', '.join(results['parts'])}. "
        f"Whole run: {results['seconds'] / 60:.1f} min.",
        "",
        "Ratios are our speed divided by the reference's, both measured in this run on the same bytes "
        "(1.0 = as fast as the reference). Absolute times on a shared 2-core machine are noise; ratios are not.",
        "",
        *_engine_line(results),
        *[
            f"Part `{name}` is carried from the run of {origin['date']} (N = {origin['n']:,}"
            + (f", engine `{origin['engine']}`" if origin.get("engine") else "")
            + "); this run did not repeat it."
            for name, origin in results.get("carried_from", {}).items()
        ],
        *([""] if results.get("carried_from") else []),
        "## Headline",
        "",
        "| measure | value | target |",
        "|---|---|---|",
    ]
    for key in TARGETS:
        if key in results:
            lines.append(f"| `{key}` | {results[key]} | {_verdict(key, results)} |")
    for key, meaning in HANDOFF_HEADLINE.items():
        if key in results:
            lines.append(f"| `{key}` | {results[key]} | {meaning} |")
    if "events_per_s_end_to_end" in results:
        lines.append(f"| `events_per_s_end_to_end` | {results['events_per_s_end_to_end']:,.0f} | |")
    if results.get("cold"):
        lines.append(
            f"| `cold_ingest_s` | {results['cold']['seconds']} | not a target: a fresh process, JVM start included |"
        )
    charted = any(results.get(part) for part in _PANELS)
    no_chart = "(no chart: matplotlib is not installed)" if charted else "(no chart: no part with one ran)"
    lines += ["", f"![chart]({chart_name})" if chart_name else no_chart, ""]
    formats = results.get("formats", {})
    if formats:
        lines += [
            "## Per format and stage",
            "",
            _row(FORMAT_COLUMNS),
            _row(["---"] + ["---:"] * (len(FORMAT_COLUMNS) - 1)),
        ]
        for fmt, r in formats.items():
            f, s = r["floors_s"], r["stages_s"]
            note = "" if r["floor_parses_message"] else " ¹"
            cells = [f"{fmt}{note}", f"{r['messages']:,}", f"{r['mb']:,}", r["end_to_end_s"]]
            cells += [f"{r['messages_per_s_end_to_end']:,.0f}", r["mb_per_s_end_to_end"]]
            cells += [s["bronze"], s["silver"], s["gold"], r["silver_parse_s"]]
            cells += [f["text_count"], f["from_json_noop"], f["from_json_parquet"], f.get("python_handoff_noop", "—")]
            cells += [r["silver_parse_vs_from_json"], r.get("silver_parse_vs_python_handoff", "—")]
            cells += [r["end_to_end_vs_parquet_floor"]]
            cells += [r["memory"]["driver_gib"], r["memory"]["python_workers_gib"]]
            lines.append(_row(cells))
        if any("python_handoff_noop" in r["floors_s"] for r in formats.values()):
            lines += ["", HANDOFF_NOTE]
        if any(not r["floor_parses_message"] for r in formats.values()):
            lines += ["", "¹ The message is not JSON: the floor parses only the Kafka-dump record around it."]
        lines.append("")
    if results.get("peer"):
        lines += [
            "## Against Apache Flink",
            "",
            "| format | messages | ours s | Flink s | ours vs Flink | note |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for fmt, r in results["peer"].items():
            lines.append(
                f"| {fmt} | {r['messages']:,} | {r['ours_s']} | {r['flink_s'] if r['flink_s'] is not None else '–'} "
                f"| {r.get('ours_vs_flink', '–')} | {r.get('flink_error') or ''} |"
            )
        lines += [
            "",
            "Same values file for both. Flink: filesystem source, its changelog format, latest row per key "
            "(GROUP BY key with LAST_VALUE) into a blackhole sink, parallelism 2. Ours: bronze, silver, SCD1 "
            "and SCD2 gold as Delta tables.",
            "",
        ]
    if results.get("growth"):
        lines += [
            "## Growth (Debezium JSON)",
            "",
            "| changes | seconds | bronze s | silver s | gold s | events/s | driver GiB |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for size, r in sorted(results["growth"].items(), key=lambda item: int(item[0])):
            run = f" ({r['date']})" if r.get("date") else ""  # a size measured in a later run than the rest
            stages = [r.get("stages_s", {}).get(stage, "—") for stage in ("bronze", "silver", "gold")]
            cells = [f"{int(size):,}{run}", r["seconds"], *stages, f"{r['events_per_s']:,.0f}"]
            lines.append(_row([*cells, r["memory"]["driver_gib"]]))
        lines.append("")
    if results.get("incremental"):
        inc = results["incremental"]
        lines += ["## Incremental: the same changes into a 10× bigger table", ""]
        lines += _incremental_lines(inc)
        if inc.get("other_deletion_vectors"):
            other = inc["other_deletion_vectors"]
            setting = "on" if other["deletion_vectors"] else "off"
            lines += [f"Deletion vectors {setting} (above: the engine's default):", ""]
            lines += _incremental_lines(other)
    if results.get("tables"):
        t = results["tables"]
        held = t.get("small_update_messages")
        lines += ["## Many tables (same total changes)", ""]
        if held:
            lines += [
                f"The load holds all but the last {held} messages; they follow as an update of their own,",
                "then comes an update with nothing new.",
                "",
            ]
        lines += [
            f"| tables | load s | gold s | update of {held or 'a few'} messages s | nothing new s "
            "| classes compiled (load) |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for r in t.values():
            if isinstance(r, dict):
                small, idle = r.get("small_update_s", "—"), r.get("nothing_new_s", "—")
                compiled = r.get("classes_compiled", {}).get("load", "—")
                lines.append(
                    f"| {r['tables']} | {r['seconds']} | {r['stages_s']['gold']} | {small} | {idle} | {compiled} |"
                )
        lines += ["", f"Cost ratio (many / one): {t['many_vs_one_cost_ratio']}."]
        if "small_update_many_vs_one" in t:
            lines += [f"The small update's cost ratio (many / one): {t['small_update_many_vs_one']}."]
        lines += [""]
    if results.get("cold"):
        c = results["cold"]
        runs = ", ".join(f"{s} s" for s in c["runs_s"])
        lines += [
            "## Cold start",
            "",
            f"`cdc-medallion ingest` of {c['messages']} {c['format']} messages in a fresh process, into an empty "
            f"storage: {c['seconds']} s, the median of {runs}.",
        ]
        if "spark_start_s" in c:
            spark_runs = ", ".join(f"{s} s" for s in c["spark_start_runs_s"])
            lines += [
                f"A process that only starts Spark and counts one row: {c['spark_start_s']} s ({spark_runs}); "
                "the rest is the pipeline's first run.",
            ]
        lines.append("")
    for part, error in results.get("errors", {}).items():
        lines += [f"**{part} failed:** `{error}`", ""]
    mem = results.get("peak_memory")
    if mem:
        lines += [
            "## Peak memory over the whole run",
            "",
            f"Driver (JVM + Python driver) {mem['driver_gib']} GiB; JVM {mem['jvm_gib']} GiB; Python workers "
            f"{mem['python_workers_gib']} GiB; all processes {mem['total_gib']} GiB.",
            "",
        ]
        if results.get("peak_rss_from", "this run") != "this run":
            lines += [
                f"The headline's driver peak, {results['peak_rss_gib']} GiB, is that of {results['peak_rss_from']}.",
                "",
            ]
    return "\n".join(lines)


def write_results(results: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    stamp = results["date"][:10]
    latest = folder / "latest.json"  # first: a chart that cannot be drawn must not lose the figures
    latest.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    chart_name: str | None = f"{stamp}.png"
    try:
        if not chart(results, folder / chart_name):
            chart_name = None
    except ImportError as error:  # `python -m bench` without `make bench`'s extras
        print(f"bench: no chart ({error}; `make bench` installs matplotlib)", file=sys.stderr)
        chart_name = None
    report = folder / f"{stamp}.md"
    report.write_text(markdown(results, chart_name) + "\n", encoding="utf-8")
    return latest, report
