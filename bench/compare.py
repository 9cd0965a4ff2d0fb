"""Two bench results side by side: the old engine's and the new one's, per part and stage.

    python -m bench.compare OLD.json NEW.json [--out FILE.md] [--old-cold S] [--new-cold S] [--include-carried]

Both files are what `python -m bench` writes (bench/results/latest.json); the old one is written
by the old harness (`BENCH_ENGINE_ROOT=/work/old-engine python -m bench`, bench/engine.py), so
only the fields both harnesses write are read: seconds, per-stage seconds, and the incremental
part's cost ratio. Parts: cold (ingest of ten messages in a fresh process), growth (Debezium end
to end and per stage at each size), incremental (the same changes into a table and into one ten
times bigger), tables (1 against 200), and formats when both ran it. A size measured in one file
only is left out, and so is a part a file carries from an earlier run (`carried_from`) unless
--include-carried is given. The old harness has no cold part: bench/engine.py measures it with
the old engine's CLI right after the old harness and adds it to the old file; --old-cold and
--new-cold give it as a number instead (seconds, e.g. measured by hand).

A time more than 25 % above the old one is flagged. Times from a 2-core machine drift by up to 2×
within an hour; run the two engines back to back and read a single ratio as ±20 %.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REGRESSION = 1.25  # new / old above this is flagged
INCREMENTAL_TARGET = 1.5  # the 10× table's increment at most this many times the 1× table's
STAGES = ("bronze", "silver", "gold")


@dataclass(frozen=True)
class Row:
    part: str
    case: str
    stage: str
    old: float | None
    new: float | None

    @property
    def ratio(self) -> float | None:
        if self.old is None or self.new is None or self.old <= 0:
            return None
        return round(self.new / self.old, 2)

    @property
    def regression(self) -> bool:
        return self.ratio is not None and self.ratio > REGRESSION


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _common(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Keys of measured cases (dicts) in both, in numeric order where they are sizes."""
    keys = [k for k in new if isinstance(new[k], dict) and isinstance(old.get(k), dict)]
    return sorted(keys, key=lambda k: (0, int(k), "") if k.isdigit() else (1, 0, k))


def _stages(part: str, case: str, old: dict[str, Any], new: dict[str, Any], key: str, total: str) -> list[Row]:
    """One row per stage both record, then the whole."""
    rows = []
    old_stages, new_stages = old.get(key) or {}, new.get(key) or {}
    for stage in STAGES:
        if stage in old_stages or stage in new_stages:
            rows.append(Row(part, case, stage, _number(old_stages.get(stage)), _number(new_stages.get(stage))))
    return [*rows, Row(part, case, "end to end", _number(old.get(total)), _number(new.get(total)))]


def carried(results: dict[str, Any]) -> set[str]:
    """Parts a results file carries from an earlier run (perhaps of another engine)."""
    return set(results.get("carried_from") or {})


def own(results: dict[str, Any], skip: set[str]) -> dict[str, Any]:
    return {key: value for key, value in results.items() if key not in skip}


def rows(
    old: dict[str, Any],
    new: dict[str, Any],
    old_cold: float | None = None,
    new_cold: float | None = None,
    include_carried: bool = False,
) -> list[Row]:
    """Every row both results can fill (a side missing a figure shows as —). A part either file
    carries from an earlier run is left out unless `include_carried`: the new harness's first
    results carry the parts the old engine ran."""
    skip = set() if include_carried else carried(old) | carried(new)
    old, new = own(old, skip), own(new, skip)
    out: list[Row] = []
    cold_old = old_cold if old_cold is not None else _number((old.get("cold") or {}).get("seconds"))
    cold_new = new_cold if new_cold is not None else _number((new.get("cold") or {}).get("seconds"))
    if cold_old is not None or cold_new is not None:
        messages = (new.get("cold") or old.get("cold") or {}).get("messages", 10)
        out.append(Row("cold", f"ingest of {messages} messages, fresh process", "process", cold_old, cold_new))
        spark_old, spark_new = (_number((r.get("cold") or {}).get("spark_start_s")) for r in (old, new))
        if spark_old is not None or spark_new is not None:
            out.append(Row("cold", "a process that only starts Spark", "process", spark_old, spark_new))
    growth_old, growth_new = old.get("growth") or {}, new.get("growth") or {}
    for size in _common(growth_old, growth_new):
        out += _stages("growth", f"{int(size):,} changes", growth_old[size], growth_new[size], "stages_s", "seconds")
    runs_old = (old.get("incremental") or {}).get("runs") or {}
    runs_new = (new.get("incremental") or {}).get("runs") or {}
    for size in _common(runs_old, runs_new):
        a, b = runs_old[size], runs_new[size]
        case = f"{b.get('changes', 0):,} changes into {int(size):,} rows"
        if a.get("changes") != b.get("changes"):
            case += f" (old: {a.get('changes', 0):,} changes)"
        out.append(Row("incremental", case, "load", _number(a.get("load_s")), _number(b.get("load_s"))))
        out += _stages("incremental", case, a, b, "increment_stages_s", "increment_s")
    tables_old, tables_new = old.get("tables") or {}, new.get("tables") or {}
    for count in _common(tables_old, tables_new):
        a, b = tables_old[count], tables_new[count]
        case = f"{int(count)} table{'s' if count != '1' else ''}"
        out += _stages("tables", case, a, b, "stages_s", "seconds")
        for key, stage in (("small_update_s", "update of a few messages"), ("nothing_new_s", "nothing new")):
            if key in a or key in b:
                out.append(Row("tables", case, stage, _number(a.get(key)), _number(b.get(key))))
    formats_old, formats_new = old.get("formats") or {}, new.get("formats") or {}
    for fmt in _common(formats_old, formats_new):
        a, b = formats_old[fmt], formats_new[fmt]
        out += _stages("formats", fmt, a, b, "stages_s", "end_to_end_s")
        out.append(
            Row(
                "formats", fmt, "silver parse alone", _number(a.get("silver_parse_s")), _number(b.get("silver_parse_s"))
            )
        )
    return out


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _engine(results: dict[str, Any]) -> str:
    engine = results.get("engine") or {}
    return f"`{engine['commit']}`" if engine.get("commit") else "commit not recorded"


def markdown(
    old: dict[str, Any],
    new: dict[str, Any],
    old_cold: float | None = None,
    new_cold: float | None = None,
    include_carried: bool = False,
) -> str:
    table = rows(old, new, old_cold, new_cold, include_carried)
    skip = set() if include_carried else carried(old) | carried(new)
    lines = [
        "# Old engine against new",
        "",
        f"Old: {old.get('date', '?')}, {_engine(old)}, N = {old.get('n', 0):,}. "
        f"New: {new.get('date', '?')}, {_engine(new)}, N = {new.get('n', 0):,}.",
        "",
        f"Seconds; new/old above {REGRESSION} (more than {round((REGRESSION - 1) * 100)} % slower) is flagged.",
        "",
        "| part | case | stage | old s | new s | new/old | |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in table:
        flag = "**regression**" if row.regression else ""
        cells = [row.part, row.case, row.stage, _cell(row.old), _cell(row.new), _cell(row.ratio), flag]
        lines.append("| " + " | ".join(cells) + " |")
    if not table:
        lines.append("| — | nothing measured in both files | | | | | |")
    regressions = [row for row in table if row.regression]
    verdict = f"{len(regressions)} regression(s) over 25 %" if regressions else "no regression over 25 %"
    lines += ["", f"{len(table)} rows compared; {verdict}.", ""]
    lines += [*_targets(own(old, skip), own(new, skip)), *_left_out(old, new, include_carried)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _targets(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    lines = []
    ratios = [(r.get("incremental") or {}).get("incremental_cost_ratio_10x_table") for r in (old, new)]
    golds = [(r.get("incremental") or {}).get("gold_cost_ratio_10x_table") for r in (old, new)]
    if any(v is not None for v in ratios):
        verdicts = ["—" if v is None else f"{v} ({'met' if v <= INCREMENTAL_TARGET else 'MISSED'})" for v in ratios]
        lines += [
            "| ratio | old | new | target |",
            "|---|---:|---:|---|",
            f"| incremental: the 10× table's increment / the 1× table's | {verdicts[0]} | {verdicts[1]} "
            f"| ≤ {INCREMENTAL_TARGET} |",
            f"| incremental, gold stage alone | {_cell(golds[0])} | {_cell(golds[1])} | |",
        ]
    many = [(r.get("tables") or {}).get("many_vs_one_cost_ratio") for r in (old, new)]
    if any(v is not None for v in many):
        if not lines:
            lines += ["| ratio | old | new | target |", "|---|---:|---:|---|"]
        lines.append(f"| tables: many / one, load | {_cell(many[0])} | {_cell(many[1])} | |")
    return [*lines, ""] if lines else []


def _left_out(old: dict[str, Any], new: dict[str, Any], included: bool = False) -> list[str]:
    """The parts a file carries from an earlier run than its own: left out, or `included`."""
    notes = [
        f"- {side}: `{part}`, carried from {origin.get('date', '?')}"
        for side, results in (("old", old), ("new", new))
        for part, origin in sorted((results.get("carried_from") or {}).items())
    ]
    title = "Included (--include-carried)" if included else "Left out"
    return [f"{title}, carried from an earlier run than the file's own:", "", *notes, ""] if notes else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the old engine's results JSON")
    parser.add_argument("new", type=Path, help="the new engine's results JSON")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    parser.add_argument("--old-cold", type=float, help="the old engine's cold ingest, seconds (instead of its file's)")
    parser.add_argument("--new-cold", type=float, help="the new engine's cold ingest, seconds (instead of its file's)")
    parser.add_argument(
        "--include-carried",
        action="store_true",
        help="compare parts a file carries from an earlier run too (when each engine's parts ran separately)",
    )
    args = parser.parse_args(argv)
    old, new = (json.loads(path.read_text(encoding="utf-8")) for path in (args.old, args.new))
    text = markdown(old, new, args.old_cold, args.new_cold, args.include_carried)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        print(f"written: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
