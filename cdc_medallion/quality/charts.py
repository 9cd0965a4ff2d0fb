"""Inline SVG charts for the quality report: self-contained, no script, no network.

Every chart is an `<svg class="chart">` with explicit width and height, `<title>` tooltips on
each mark and text labels, so it renders (and can be read) in any browser or in a mail.
"""

from __future__ import annotations

from html import escape

PASSED, FAILED, DROPPED, QUARANTINED, ROWS = "#2e7d32", "#c62828", "#ef6c00", "#6a1b9a", "#1565c0"
AXIS, GRID, TEXT = "#555", "#e0e0e0", "#222"


def _fmt(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1_000:.0f}k"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>" + "".join(body) + "</svg>"
    )


def _legend(series: list[tuple[str, str]], x: int, y: int) -> list[str]:
    parts = []
    for name, color in series:
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 14}" y="{y}" font-size="11" fill="{TEXT}">{escape(name)}</text>')
        x += 22 + 7 * len(name)
    return parts


def stacked_bars(
    labels: list[str],
    series: list[tuple[str, str, list[float]]],
    title: str,
    width: int = 560,
    height: int = 180,
    highlight: int | None = None,
) -> str:
    """One bar per label (e.g. per update), its segments stacked in `series` order."""
    left, right, top, bottom = 48, 12, 26, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(values[i] for _, _, values in series) for i in range(len(labels))]
    peak = max(totals, default=0) or 1
    body = [f'<text x="{left}" y="14" font-size="12" font-weight="bold" fill="{TEXT}">{escape(title)}</text>']
    for fraction in (0, 0.5, 1):
        y = top + plot_h * (1 - fraction)
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="{GRID}"/>')
        body.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end" fill="{AXIS}">'
            f"{_fmt(peak * fraction)}</text>"
        )
    slot = plot_w / max(len(labels), 1)
    bar = max(min(slot * 0.7, 48), 2)
    for i, label in enumerate(labels):
        x = left + slot * i + (slot - bar) / 2
        y = top + plot_h
        if highlight == i:
            body.append(
                f'<rect x="{left + slot * i:.1f}" y="{top}" width="{slot:.1f}" height="{plot_h}" fill="#fff8e1"/>'
            )
        for name, color, values in series:
            value = values[i]
            if value <= 0:
                continue
            h = max(plot_h * value / peak, 1)
            y -= h
            body.append(
                f'<rect class="mark" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{color}">'
                f"<title>{escape(label)}: {escape(name)} {value:,.0f}</title></rect>"
            )
        if len(labels) <= 16 or i % max(len(labels) // 8, 1) == 0:
            short = label.split(" · ")[0][5:16] if " · " in label else label[:11]
            body.append(
                f'<text x="{x + bar / 2:.1f}" y="{height - 14}" font-size="9" text-anchor="middle" fill="{AXIS}">'
                f"{escape(short)}</text>"
            )
    body += _legend([(name, color) for name, color, _ in series], left, height - 2)
    return _svg(width, height, body, title)


def horizontal_bars(
    items: list[tuple[str, float]], title: str, color: str = FAILED, width: int = 560, unit: str = ""
) -> str:
    """One bar per item, longest first as given (e.g. top quarantine reasons, lag per source)."""
    row, left, top = 22, 220, 24
    height = top + row * max(len(items), 1) + 8
    peak = max((v for _, v in items), default=0) or 1
    plot_w = width - left - 70
    body = [f'<text x="4" y="14" font-size="12" font-weight="bold" fill="{TEXT}">{escape(title)}</text>']
    for i, (label, value) in enumerate(items):
        y = top + row * i
        w = max(plot_w * value / peak, 1)
        short = label if len(label) <= 34 else label[:33] + "…"
        body.append(
            f'<text x="{left - 6}" y="{y + 14}" font-size="11" text-anchor="end" fill="{TEXT}">{escape(short)}</text>'
        )
        body.append(
            f'<rect class="mark" x="{left}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" fill="{color}">'
            f"<title>{escape(label)}: {_fmt(value)}{escape(unit)}</title></rect>"
        )
        body.append(
            f'<text x="{left + w + 4:.1f}" y="{y + 14}" font-size="11" fill="{AXIS}">{_fmt(value)}{escape(unit)}</text>'
        )
    if not items:
        body.append(f'<text x="{left}" y="{top + 14}" font-size="11" fill="{AXIS}">none</text>')
    return _svg(width, height, body, title)


def sparkline(values: list[float], color: str = FAILED, width: int = 90, height: int = 22) -> str:
    """A tiny trend of one number across updates (latest right)."""
    peak = max(values, default=0) or 1
    if len(values) < 2:
        values = [*values, *values] if values else [0, 0]
    step = (width - 4) / (len(values) - 1)
    points = " ".join(f"{2 + step * i:.1f},{height - 3 - (height - 6) * v / peak:.1f}" for i, v in enumerate(values))
    last_x, last_y = points.split(" ")[-1].split(",")
    body = [
        f'<polyline class="mark" points="{points}" fill="none" stroke="{color}" stroke-width="1.5"/>',
        f'<circle cx="{last_x}" cy="{last_y}" r="2" fill="{color}"/>',
    ]
    return _svg(width, height, body, "trend: " + ", ".join(_fmt(v) for v in values))
