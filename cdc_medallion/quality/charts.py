"""The quality report's charts, laid out: where each bar, tick and label goes.

The drawing is `templates/charts.svg.j2` (one macro per chart kind): inline SVG with explicit width
and height, a `<title>` tooltip on each mark and text labels, so a chart renders (and can be read)
in any browser or in a mail, with no script. Here only the geometry and the label texts are
computed, as plain values, so the template escapes every label like any other text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PASSED, FAILED, DROPPED, QUARANTINED, ROWS = "#2e7d32", "#c62828", "#ef6c00", "#6a1b9a", "#1565c0"


@dataclass(frozen=True)
class Label:
    """A text at a point (its anchor is the template's choice per kind of label)."""

    x: float
    y: float
    text: str


@dataclass(frozen=True)
class Box:
    """A rectangle; a mark (a bar or a bar segment) also has a tooltip."""

    x: float
    y: float
    width: float
    height: float
    color: str = ""
    tooltip: str = ""


@dataclass(frozen=True)
class Tick:
    """A horizontal grid line and the value it marks."""

    y: float
    value: Label


@dataclass
class Bar:
    """One label's slot: its background when highlighted, its stacked segments, its axis label."""

    highlight: Box | None = None
    segments: list[Box] = field(default_factory=list)
    label: Label | None = None  # None: skipped, so that many bars' labels do not overlap


@dataclass(frozen=True)
class LegendEntry:
    swatch: Box
    name: Label


@dataclass
class StackedBars:
    width: int
    height: int
    title: str
    left: int
    right: float
    ticks: list[Tick] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)


@dataclass(frozen=True)
class HorizontalBar:
    name: Label
    mark: Box
    value: Label


@dataclass
class HorizontalBars:
    width: int
    height: int
    title: str
    bars: list[HorizontalBar] = field(default_factory=list)
    empty: Label | None = None  # where "none" goes when there is no item


@dataclass
class Sparkline:
    width: int
    height: int
    title: str
    color: str
    points: list[tuple[float, float]]
    last: tuple[float, float]


def _fmt(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1_000:.0f}k"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _at(value: float) -> float:
    """A coordinate to a tenth of a pixel: shorter markup, no visible difference."""
    return round(value, 1)


def _legend(series: list[tuple[str, str]], x: int, y: int) -> list[LegendEntry]:
    entries = []
    for name, color in series:
        entries.append(LegendEntry(Box(x, y - 9, 10, 10, color), Label(x + 14, y, name)))
        x += 22 + 7 * len(name)
    return entries


def stacked_bars(
    labels: list[str],
    series: list[tuple[str, str, list[float]]],
    title: str,
    width: int = 560,
    height: int = 180,
    highlight: int | None = None,
) -> StackedBars:
    """One bar per label (e.g. per update), its segments stacked in `series` order."""
    left, right, top, bottom = 48, 12, 26, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(values[i] for _, _, values in series) for i in range(len(labels))]
    peak = max(totals, default=0) or 1
    chart = StackedBars(width, height, title, left, left + plot_w)
    for fraction in (0, 0.5, 1):
        y = top + plot_h * (1 - fraction)
        chart.ticks.append(Tick(_at(y), Label(left - 4, _at(y + 4), _fmt(peak * fraction))))
    slot = plot_w / max(len(labels), 1)
    bar = max(min(slot * 0.7, 48), 2)
    for i, label in enumerate(labels):
        x = left + slot * i + (slot - bar) / 2
        y = top + plot_h
        drawn = Bar()
        if highlight == i:
            drawn.highlight = Box(_at(left + slot * i), top, _at(slot), plot_h)
        for name, color, values in series:
            value = values[i]
            if value <= 0:
                continue
            h = max(plot_h * value / peak, 1)
            y -= h
            drawn.segments.append(Box(_at(x), _at(y), _at(bar), _at(h), color, f"{label}: {name} {value:,.0f}"))
        if len(labels) <= 16 or i % max(len(labels) // 8, 1) == 0:
            short = label.split(" · ")[0][5:16] if " · " in label else label[:11]
            drawn.label = Label(_at(x + bar / 2), height - 14, short)
        chart.bars.append(drawn)
    chart.legend = _legend([(name, color) for name, color, _ in series], left, height - 2)
    return chart


def horizontal_bars(
    items: list[tuple[str, float]], title: str, color: str = FAILED, width: int = 560, unit: str = ""
) -> HorizontalBars:
    """One bar per item, longest first as given (e.g. top quarantine reasons, lag per source)."""
    row, left, top = 22, 220, 24
    peak = max((v for _, v in items), default=0) or 1
    plot_w = width - left - 70
    chart = HorizontalBars(width, top + row * max(len(items), 1) + 8, title)
    for i, (label, value) in enumerate(items):
        y = top + row * i
        w = max(plot_w * value / peak, 1)
        shown = f"{_fmt(value)}{unit}"
        chart.bars.append(
            HorizontalBar(
                Label(left - 6, y + 14, label if len(label) <= 34 else label[:33] + "…"),
                Box(left, y + 3, _at(w), row - 6, color, f"{label}: {shown}"),
                Label(_at(left + w + 4), y + 14, shown),
            )
        )
    if not items:
        chart.empty = Label(left, top + 14, "none")
    return chart


def sparkline(values: list[float], color: str = FAILED, width: int = 90, height: int = 22) -> Sparkline:
    """A tiny trend of one number across updates (latest right)."""
    peak = max(values, default=0) or 1
    if len(values) < 2:
        values = [*values, *values] if values else [0, 0]
    title = "trend: " + ", ".join(_fmt(v) for v in values)
    step = (width - 4) / (len(values) - 1)
    points = [(_at(2 + step * i), _at(height - 3 - (height - 6) * v / peak)) for i, v in enumerate(values)]
    return Sparkline(width, height, title, color, points, points[-1])
