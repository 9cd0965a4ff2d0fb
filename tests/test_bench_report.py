"""The bench report's verdicts (the driver-memory target is set for 10M events), what it shows
per part, the old-against-new comparison (bench/compare.py), and which cached inputs it reuses."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report import _verdict, headline_peak, markdown
from bench.workloads import WORKLOAD_VERSIONS, _cached, _record
from cdc_medallion.generator.renderers import RenderedSource


def results(peak: float, parts: list[str], events: int) -> dict:
    return {
        "parts": parts,
        "peak_rss_gib": peak,
        "formats": {"debezium-json": {"events": events}},
        "growth": {str(events): {"events": events}},
    }


def report_head(part: str) -> dict:
    """What every report opens with, for a run of one part."""
    machine = {"cpus": 2, "cpu_model": "x", "memory_gib": 1, "python": "3", "spark": "4", "spark_master": "local"}
    return {"date": "d", "machine": machine, "n": 1, "parts": [part], "seconds": 60}


def test_memory_peak_of_a_small_run_is_not_judged():
    verdict = _verdict("peak_rss_gib", results(2.9, ["formats"], 20_020))
    assert verdict.startswith("not judged") and "20,020 events" in verdict


def test_memory_peak_at_ten_million_events_is_judged():
    assert _verdict("peak_rss_gib", results(5.8, ["growth"], 10_000_000)) == "MISSED (target <= 4.0)"
    assert _verdict("peak_rss_gib", results(3.5, ["growth"], 10_000_000)) == "met (target <= 4.0)"


def test_a_carried_part_brings_its_own_peak_and_size():
    """Rerunning the small parts must not replace the 10M increment's peak with their own: the
    carried part's recorded peak is the headline when higher, and is judged at its size."""
    small = results(1.4, ["growth"], 20_020)
    increment = {"runs": {"10000000": {"rows": 10_000_000, "memory": {"driver_gib": 3.9, "jvm_gib": 2.4}}}}
    carried = small | {"incremental": increment, "carried_from": {"incremental": {"date": "2026-11-22 22:50 UTC"}}}
    peak, origin = headline_peak(carried, 1.4)
    assert (peak, origin) == (3.9, "part incremental, carried from 2026-11-22 22:50 UTC")
    assert _verdict("peak_rss_gib", carried | {"peak_rss_gib": peak}) == "met (target <= 4.0)"
    assert headline_peak(carried, 4.2) == (4.2, "this run")
    assert headline_peak(small, 1.4) == (1.4, "this run")
    assert _verdict("peak_rss_gib", small).startswith("not judged")


def test_speed_ratios_are_judged_at_any_size():
    assert _verdict("silver_parse_vs_from_json", {"silver_parse_vs_from_json": 0.2}) == "MISSED (target >= 0.75)"


def test_the_many_tables_section_shows_the_small_update_when_it_was_measured():
    head = report_head("tables")

    def run(tables: int, seconds: float, **small: float) -> dict:
        return {"tables": tables, "seconds": seconds, "stages_s": {"gold": seconds / 2}, **small}

    measured = {
        "1": run(1, 1.5, small_update_s=0.4, nothing_new_s=0.2),
        "200": run(200, 40.0, small_update_s=12.0, nothing_new_s=6.0),
        "many_vs_one_cost_ratio": 26.7,
        "small_update_many_vs_one": 30.0,
        "small_update_messages": 10,
    }
    text = markdown(head | {"tables": measured}, None)
    assert "| 200 | 40.0 | 20.0 | 12.0 | 6.0 |" in text
    assert "all but the last 10 messages" in text and "(many / one): 30.0." in text
    older = {"1": run(1, 1.9), "200": run(200, 63.2), "many_vs_one_cost_ratio": 33.3}
    text = markdown(head | {"tables": older}, None)
    assert "| 200 | 63.2 | 31.6 | — | — |" in text and "last" not in text


def test_the_incremental_section_gives_both_runs_and_the_ratio():
    """One route now: the two runs, their ratio; results of the old harness (with the driver's
    route priced apart) still render, without that route."""
    head = report_head("incremental")

    def run(rows: int, seconds: float) -> dict:
        stages = {"bronze": 1.0, "silver": 2.0, "gold": seconds - 3.0}
        return {"rows": rows, "changes": 100, "load_s": 9.0, "increment_s": seconds, "increment_stages_s": stages}

    both = {"runs": {"1000": run(1000, 10.0), "10000": run(10000, 30.0)}}
    ratios = {"incremental_cost_ratio_10x_table": 3.0, "gold_cost_ratio_10x_table": 3.857}
    text = markdown(head | {"incremental": both | ratios}, None)
    assert "| 10,000 | 100 | 9.0 | 30.0 | 27.0 |" in text and "| 1,000 | 100 | 9.0 | 10.0 | 7.0 |" in text
    assert "whole increment 3.0, gold stage 3.857." in text
    old = {"spark_route": run(1000, 20.0), "incremental_cost_ratio_10x_table_spark_route": 1.5}
    text = markdown(head | {"incremental": both | ratios | old}, None)
    assert "all in Spark" not in text and "driver_apply_max_rows" not in text and "20.0" not in text


def test_the_incremental_section_gives_the_other_deletion_vector_setting_beside_the_default():
    head = report_head("incremental")

    def run(rows: int, seconds: float) -> dict:
        stages = {"bronze": 1.0, "silver": 2.0, "gold": seconds - 3.0}
        return {"rows": rows, "changes": 100, "load_s": 9.0, "increment_s": seconds, "increment_stages_s": stages}

    def measured(small: float, large: float) -> dict:
        ratio = round(large / small, 3)
        runs = {"1000": run(1000, small), "10000": run(10000, large)}
        return {"runs": runs, "incremental_cost_ratio_10x_table": ratio, "gold_cost_ratio_10x_table": ratio}

    other = measured(10.0, 12.0) | {"deletion_vectors": True}
    text = markdown(
        head | {"incremental": measured(10.0, 30.0) | {"deletion_vectors": False, "other_deletion_vectors": other}},
        None,
    )
    default, _, with_vectors = text.partition("Deletion vectors on (above: the engine's default):")
    assert "| 10,000 | 100 | 9.0 | 30.0 | 27.0 |" in default and "whole increment 3.0," in default
    assert "| 10,000 | 100 | 9.0 | 12.0 | 9.0 |" in with_vectors and "whole increment 1.2," in with_vectors


def test_growth_shows_stages_and_cold_start_its_median():
    head = report_head("growth") | {"parts": ["cold", "growth"]}
    memory = {"driver_gib": 1.2}
    growth = {
        "1000": {"seconds": 6.0, "stages_s": {"bronze": 1.0, "silver": 2.0, "gold": 3.0}, "events_per_s": 166.7},
        "100": {"seconds": 2.0, "events_per_s": 50.0},  # the old harness kept the total only
    }
    growth = {size: r | {"memory": memory, "events": int(size)} for size, r in growth.items()}
    cold = {"messages": 10, "format": "debezium-json", "seconds": 11.2, "runs_s": [12.0, 11.2, 10.9]}
    cold |= {"spark_start_s": 6.1, "spark_start_runs_s": [6.1, 6.0, 6.3]}
    engine = {"root": "/work/main", "commit": "abc1234", "max_concurrent_flows": 1}
    text = markdown(head | {"growth": growth, "cold": cold, "engine": engine}, None)
    assert "| 1,000 | 6.0 | 1.0 | 2.0 | 3.0 | 167 | 1.2 |" in text
    assert "| 100 | 2.0 | — | — | — | 50 | 1.2 |" in text
    assert "| `cold_ingest_s` | 11.2 |" in text and "11.2 s, the median of 12.0 s, 11.2 s, 10.9 s" in text
    assert "only starts Spark and counts one row: 6.1 s (6.1 s, 6.0 s, 6.3 s)" in text
    assert "Engine: `abc1234` at /work/main; streaming queries 1 at a time" in text


def test_the_formats_section_shows_the_python_hand_off_floor_when_it_was_measured():
    """The hand-off floor bounds what a parser in Python can reach: shown beside from_json, and
    the headline names the worst format's bound; results from before it still render."""
    from bench.run import summary

    def measured(handoff: float | None, parse: float) -> dict:
        floors = {"text_count": 0.1, "from_json_noop": 0.6, "from_json_parquet": 0.9}
        ratios = {"silver_parse_vs_from_json": round(0.6 / parse, 3), "end_to_end_vs_parquet_floor": 0.2}
        if handoff is not None:
            floors["python_handoff_noop"] = handoff
            ratios |= {"silver_parse_vs_python_handoff": round(handoff / parse, 3)}
            ratios |= {"python_handoff_vs_from_json": round(0.6 / handoff, 3)}
        stages = {"bronze": 0.2, "silver": 2.0, "gold": 2.3}
        return {
            "messages": 100,
            "events": 100,
            "mb": 1.0,
            "end_to_end_s": 4.5,
            "messages_per_s_end_to_end": 22.2,
            "mb_per_s_end_to_end": 0.2,
            "stages_s": stages,
            "silver_parse_s": parse,
            "floors_s": floors,
            "floor_parses_message": True,
            "memory": {"driver_gib": 1.0, "python_workers_gib": 0.4},
            **ratios,
        }

    formats = {"canal-json": measured(0.5, 1.0), "qlik-json": measured(0.4, 2.0)}
    results = report_head("formats") | {"formats": formats}
    results |= summary(results)
    assert (results["python_handoff_vs_from_json"], results["silver_parse_vs_python_handoff"]) == (1.2, 0.2)
    text = markdown(results, None)
    assert "| 0.1 | 0.6 | 0.9 | 0.4 | 0.3 | 0.2 | 0.2 |" in text  # qlik: floors, hand-off, both parse ratios
    assert "| `python_handoff_vs_from_json` | 1.2 | not a target" in text and "Python hand-off is bronze" in text
    older = report_head("formats") | {"formats": {"canal-json": measured(None, 1.0)}}
    older |= summary(older)
    text = markdown(older, None)
    assert "| 0.1 | 0.6 | 0.9 | — | 0.6 | — | 0.2 |" in text
    assert "python_handoff" not in text and "Python hand-off is bronze" not in text


def test_compare_sets_old_and_new_side_by_side_and_flags_regressions():
    """Only what both harnesses write is read: the old growth part may lack stages, the new has a
    cold part the old does not (given as a number), and a carried part is left out."""
    from bench.compare import markdown as compare
    from bench.compare import rows

    def increment(rows_: int, gold: float) -> dict:
        stages = {"bronze": 1.0, "silver": 2.0, "gold": gold}
        return {"rows": rows_, "changes": 100, "load_s": 50.0, "increment_s": 3.0 + gold, "increment_stages_s": stages}

    old = {
        "date": "old",
        "n": 1000,
        "growth": {"1000": {"seconds": 10.0}},
        "incremental": {
            "runs": {"1000": increment(1000, 4.0), "10000": increment(10000, 12.0)},
            "incremental_cost_ratio_10x_table": 2.143,
            "gold_cost_ratio_10x_table": 3.0,
            "spark_route": increment(1000, 6.0),
        },
        "formats": {"debezium-json": {"end_to_end_s": 1.0}},
        "carried_from": {"formats": {"date": "earlier", "n": 20000}},
    }
    new = {
        "date": "new",
        "n": 1000,
        "engine": {"commit": "abc1234"},
        "cold": {"messages": 10, "seconds": 9.0, "runs_s": [9.0, 9.0, 9.1], "spark_start_s": 5.0},
        "growth": {"1000": {"seconds": 13.0, "stages_s": {"bronze": 1.0, "silver": 5.0, "gold": 7.0}}},
        "incremental": {
            "runs": {"1000": increment(1000, 3.0), "10000": increment(10000, 4.0)},
            "incremental_cost_ratio_10x_table": 1.167,
            "gold_cost_ratio_10x_table": 1.333,
        },
        "formats": {"debezium-json": {"end_to_end_s": 9.0}},
    }
    table = {(r.part, r.case, r.stage): r for r in rows(old, new, old_cold=12.0)}
    assert table["cold", "ingest of 10 messages, fresh process", "process"].ratio == 0.75
    assert table["cold", "a process that only starts Spark", "process"].new == 5.0
    growth = table["growth", "1,000 changes", "end to end"]
    assert (growth.old, growth.new, growth.ratio, growth.regression) == (10.0, 13.0, 1.3, True)
    assert (
        table["growth", "1,000 changes", "gold"].old is None and not table["growth", "1,000 changes", "gold"].regression
    )
    gold = table["incremental", "100 changes into 10,000 rows", "gold"]
    assert (gold.old, gold.new, gold.ratio, gold.regression) == (12.0, 4.0, 0.33, False)
    assert not any(part == "formats" for part, _, _ in table)  # the old file carries it
    text = compare(old, new, old_cold=12.0)
    assert "| growth | 1,000 changes | end to end | 10 | 13 | 1.3 | **regression** |" in text
    assert "| growth | 1,000 changes | gold | — | 7 | — |  |" in text
    assert "| 2.143 (MISSED) | 1.167 (met) | ≤ 1.5 |" in text
    assert "- old: `formats`, carried from earlier" in text and "1 regression(s) over 25 %" in text
    included = {(r.part, r.stage): r for r in rows(old, new, include_carried=True)}
    assert included["formats", "end to end"].ratio == 9.0


def test_a_cached_input_is_reused_only_at_its_formats_current_version(tmp_path: Path):
    """A renderer whose output changed (IBM's options) makes its inputs again; the others keep
    theirs, recorded before versions existed, as version 1."""
    for fmt in ("ibm-qrep-delimited", "debezium-json"):
        folder = tmp_path / fmt
        folder.mkdir()
        _record(folder, RenderedSource(fmt, folder / "in.jsonl", "kafka-dump", messages=3), 5)
        assert _cached(folder)["messages"] == 3
        info = json.loads((folder / "workload.json").read_text())
        del info["version"]  # as written before this field existed
        (folder / "workload.json").write_text(json.dumps(info))
    assert WORKLOAD_VERSIONS["ibm-qrep-delimited"] > 1
    assert _cached(tmp_path / "ibm-qrep-delimited") is None
    assert _cached(tmp_path / "debezium-json")["messages"] == 3
