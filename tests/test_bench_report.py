"""The bench report's verdicts: the driver-memory target is set for 10M events."""

from __future__ import annotations

from bench.report import _verdict, headline_peak, markdown


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


def test_the_incremental_section_prices_the_spark_route_when_it_was_measured():
    """The 10M increment goes to Spark while the 1M one may not: the report says which is which."""
    head = report_head("incremental")

    def run(rows: int, seconds: float) -> dict:
        stages = {"bronze": 1.0, "silver": 2.0, "gold": seconds - 3.0}
        return {"rows": rows, "changes": 100, "load_s": 9.0, "increment_s": seconds, "increment_stages_s": stages}

    both = {"runs": {"1000": run(1000, 10.0), "10000": run(10000, 30.0)}}
    ratios = {"incremental_cost_ratio_10x_table": 3.0, "gold_cost_ratio_10x_table": 3.857}
    text = markdown(head | {"incremental": both | ratios}, None)
    assert "| 10,000 | 100 | 9.0 | 30.0 | 27.0 |" in text and "all in Spark" not in text
    spark_route = {
        "spark_route": run(1000, 20.0),
        "incremental_cost_ratio_10x_table_spark_route": 1.5,
        "gold_cost_ratio_10x_table_spark_route": 1.588,
    }
    text = markdown(head | {"incremental": both | ratios | spark_route}, None)
    assert "| 1,000, all in Spark | 100 | 9.0 | 20.0 | 17.0 |" in text
    assert "whole increment 1.5, gold stage 1.588." in text


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
