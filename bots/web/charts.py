"""The dashboard's pictures as inline SVG, drawn on the server: no script, no library.

Pure functions from numbers to markup: stacked bars per day, a cumulative line, and one
horizontal bar split into shares (the context window). Every label is escaped; every bar
carries a `<title>`, which browsers show on hover.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from markupsafe import Markup, escape

from bots.web.store import DayCount

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
STATUS_COLOURS = {"done": "#59a14f", "failed": "#e15759", "skipped": "#edc948"}
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 640, 180, 44, 22, 8


@dataclass(frozen=True)
class Share:
    """One part of a horizontal bar."""

    label: str
    value: float
    colour: str


def day_range(days: int, today: date) -> list[str]:
    """The last `days` days, oldest first, as YYYY-MM-DD."""
    return [(today - timedelta(days=n)).isoformat() for n in range(days - 1, -1, -1)]


def colour_of(series: str, order: Sequence[str]) -> str:
    if series in STATUS_COLOURS:
        return STATUS_COLOURS[series]
    return PALETTE[order.index(series) % len(PALETTE)] if series in order else PALETTE[-1]


def compact_number(value: float) -> str:
    """12, 3.4k, 1.2M: axis labels that fit."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1_000:.0f}k"
    if value >= 1_000:
        return f"{value / 1_000:.1f}k"
    return f"{value:g}"


def _legend(series: Sequence[str], y: int) -> str:
    parts, x = [], LEFT
    for name in series:
        colour = colour_of(name, series)
        parts.append(
            f'<rect x="{x}" y="{y}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{y + 9}" class="legend">{escape(name)}</text>'
        )
        x += 24 + 7 * len(name)
    return "".join(parts)


def _frame(body: str, peak: float, days: Sequence[str], title: str, legend: str) -> Markup:
    plot_h = HEIGHT - BOTTOM - TOP
    axis = (
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH}" y2="{TOP + plot_h}" class="axis"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 8}" class="tick" text-anchor="end">'
        f"{compact_number(peak)}</text>"
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" class="tick" text-anchor="end">0</text>'
    )
    if days:
        axis += (
            f'<text x="{LEFT}" y="{HEIGHT - 6}" class="tick">{days[0][5:]}</text>'
            f'<text x="{WIDTH}" y="{HEIGHT - 6}" class="tick" text-anchor="end">'
            f"{days[-1][5:]}</text>"
        )
    total_h = HEIGHT + (18 if legend else 0)
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {total_h}" role="img"'
        f' aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>{axis}{body}{legend}</svg>"
    )


def stacked_bars(counts: Sequence[DayCount], days: Sequence[str], title: str) -> Markup:
    """One bar per day, its series stacked (largest series at the bottom)."""
    totals: dict[str, int] = {}
    cells: dict[tuple[str, str], int] = {}
    for count in counts:
        if count.day in days:
            cells[(count.day, count.series)] = cells.get((count.day, count.series), 0) + count.value
            totals[count.series] = totals.get(count.series, 0) + count.value
    series = sorted(totals, key=lambda name: -totals[name])
    peak = max((sum(cells.get((d, s), 0) for s in series) for d in days), default=0) or 1
    plot_h, step = HEIGHT - BOTTOM - TOP, (WIDTH - LEFT) / max(len(days), 1)
    bars = []
    for i, day in enumerate(days):
        y = float(TOP + plot_h)
        for name in series:
            value = cells.get((day, name), 0)
            if not value:
                continue
            h = value / peak * plot_h
            y -= h
            bars.append(
                f'<rect x="{LEFT + i * step + 1:.1f}" y="{y:.1f}" width="{max(step - 2, 1):.1f}"'
                f' height="{h:.1f}" fill="{colour_of(name, series)}">'
                f"<title>{day} {escape(name)}: {value:,}</title></rect>"
            )
    legend = _legend(series, HEIGHT + 4) if series else ""
    if not series:
        bars.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="empty">nothing yet</text>')
    return _frame("".join(bars), peak, days, title, legend)


def cumulative_line(
    counts: Sequence[DayCount], days: Sequence[str], start: int, title: str
) -> Markup:
    """A running total per day, starting from `start` (what came before the first day)."""
    per_day = {day: 0 for day in days}
    for count in counts:
        if count.day in per_day:
            per_day[count.day] += count.value
    running, points = start, []
    for day in days:
        running += per_day[day]
        points.append((day, running))
    peak = max((value for _, value in points), default=0) or 1
    plot_h, step = HEIGHT - BOTTOM - TOP, (WIDTH - LEFT) / max(len(days) - 1, 1)
    coords = [
        (LEFT + i * step, TOP + plot_h - value / peak * plot_h)
        for i, (_, value) in enumerate(points)
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{PALETTE[0]}">'
        f"<title>{day}: {value:,}</title></circle>"
        for (x, y), (day, value) in zip(coords, points, strict=True)
    )
    body = f'<polyline points="{path}" fill="none" stroke="{PALETTE[0]}" stroke-width="2"/>{dots}'
    return _frame(body, peak, days, title, "")


def share_bar(shares: Sequence[Share], total: float, title: str) -> Markup:
    """One horizontal bar: each share's width is its part of `total`, labelled below."""
    width, height, x = 640.0, 28, 0.0
    parts, labels = [], []
    for share in shares:
        if share.value <= 0:
            continue
        w = share.value / total * width if total else 0.0
        percent = share.value / total * 100 if total else 0.0
        parts.append(
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{share.colour}">'
            f"<title>{escape(share.label)}: {share.value:,.0f} tokens ({percent:.1f}%)</title>"
            "</rect>"
        )
        labels.append(
            f'<tr><td><svg width="12" height="12"><rect width="12" height="12"'
            f' fill="{share.colour}"/></svg></td><td>{escape(share.label)}</td>'
            f'<td class="num">{share.value:,.0f}</td><td class="num">{percent:.1f}%</td></tr>'
        )
        x += w
    bar = (
        f'<svg class="sharebar" viewBox="0 0 {width:.0f} {height}" preserveAspectRatio="none"'
        f' role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f'<rect width="{width:.0f}" height="{height}" class="track"/>{"".join(parts)}</svg>'
    )
    table = (
        '<table class="shares"><thead><tr><th></th><th>part</th><th class="num">tokens</th>'
        f'<th class="num">share</th></tr></thead><tbody>{"".join(labels)}</tbody></table>'
    )
    return Markup(bar + table)
