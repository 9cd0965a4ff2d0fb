"""The bench report's verdicts: the driver-memory target is set for 10M events."""

from __future__ import annotations

from bench.report import _verdict


def results(peak: float, parts: list[str], events: int) -> dict:
    return {
        "parts": parts,
        "peak_rss_gib": peak,
        "formats": {"debezium-json": {"events": events}},
        "growth": {str(events): {"events": events}},
    }


def test_memory_peak_of_a_small_run_is_not_judged():
    verdict = _verdict("peak_rss_gib", results(2.9, ["formats"], 20_020))
    assert verdict.startswith("not judged") and "20,020 events" in verdict


def test_memory_peak_at_ten_million_events_is_judged():
    assert _verdict("peak_rss_gib", results(5.8, ["growth"], 10_000_000)) == "MISSED (target <= 4.0)"
    assert _verdict("peak_rss_gib", results(3.5, ["growth"], 10_000_000)) == "met (target <= 4.0)"


def test_carried_parts_do_not_count_towards_the_run_size():
    """A carried 10M growth part did not add to this run's peak: the verdict stays open."""
    verdict = _verdict("peak_rss_gib", results(2.9, ["formats"], 10_000_000) | {"formats": {}})
    assert verdict.startswith("not judged")


def test_speed_ratios_are_judged_at_any_size():
    assert _verdict("silver_parse_vs_from_json", {"silver_parse_vs_from_json": 0.2}) == "MISSED (target >= 0.75)"
