"""Points to SVG, drawn on the server: line charts with axes, and sparklines.

No JavaScript and nothing fetched: each chart is an inline ``<svg>`` that the
page (and its live socket) carries like any other fragment. Every text that
ends up in the markup (titles, series names, axis labels) is escaped here;
numbers are formatted here, so no caller's string reaches the SVG unescaped.

A series is a list of ``(t, value)`` with ``t`` in Unix seconds; a value of
None breaks the line (no data for that stretch: the leader was down, or the
queue did not exist yet).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

Point = tuple[float, float | None]

WIDTH = 640
HEIGHT = 180
# Room for the axis labels: left, right, top, bottom.
PAD = (56, 12, 12, 24)


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its name (shown in the legend), its points and a CSS class
    (``s0``, ``s1``…) that colours it."""

    name: str
    points: Sequence[Point]
    css: str = "s0"


def nice_max(value: float) -> float:
    """The smallest "round" number (1, 2, 2.5 or 5 times a power of ten) at or
    above ``value``; 1 for nothing (so an empty or all-zero chart still has
    an axis)."""
    if not math.isfinite(value) or value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 2.5, 5, 10):
        if value <= factor * power * (1 + 1e-9):
            return float(factor * power)
    return float(10 * power)  # pragma: no cover  (the loop always returns)


def number(value: float) -> str:
    """A compact axis label: 0, 0.25, 12, 1.5k, 2M."""
    if value == 0:
        return "0"
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def path_of(points: Sequence[Point], x: Callable[[float], float], y: Callable[[float], float]) -> str:
    """The ``d`` of an SVG path through ``points``, starting a new stretch
    (``M``) after each None. Empty when there is nothing to draw."""
    parts: list[str] = []
    pen_down = False
    for t, value in points:
        if value is None or not math.isfinite(value):
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{x(t):.1f},{y(value):.1f}")
        pen_down = True
    return " ".join(parts)


def time_label(t: float, span: float) -> str:
    """A time on the x axis, in UTC: HH:MM within a day, else the day and hour."""
    when = datetime.fromtimestamp(t, tz=UTC)
    return when.strftime("%H:%M") if span <= 86400 else when.strftime("%a %H:%M")


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    start: float,
    end: float,
    unit: str = "",
    width: int = WIDTH,
    height: int = HEIGHT,
) -> SafeString:
    """An SVG line chart of ``series`` from ``start`` to ``end`` (Unix
    seconds), with a y axis from 0 to a round maximum (three labels, in
    ``unit``), time labels in UTC below, and a legend. Pure."""
    left, right, top, bottom = PAD
    plot_w, plot_h = width - left - right, height - top - bottom
    span = max(end - start, 1e-9)
    values = [v for s in series for _, v in s.points if v is not None and math.isfinite(v)]
    top_value = nice_max(max(values, default=0.0))

    def x(t: float) -> float:
        return left + (min(max(t, start), end) - start) / span * plot_w

    def y(v: float) -> float:
        return top + plot_h - max(min(v / top_value, 1.0), 0.0) * plot_h

    label = f"{title} ({unit})" if unit else title
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'preserveAspectRatio="none" aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
    ]
    for fraction in (0.0, 0.5, 1.0):
        gy = top + plot_h - fraction * plot_h
        out.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{gy:.1f}" y2="{gy:.1f}"/>')
        out.append(
            f'<text class="axis" x="{left - 6}" y="{gy + 4:.1f}" text-anchor="end">'
            f"{escape(number(top_value * fraction))}</text>"
        )
    for fraction, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        t = start + fraction * span
        out.append(
            f'<text class="axis" x="{left + fraction * plot_w:.1f}" y="{height - 6}" '
            f'text-anchor="{anchor}">{escape(time_label(t, span))}</text>'
        )
    for s in series:
        d = path_of(s.points, x, y)
        if d:
            out.append(f'<path class="line {escape(s.css)}" d="{d}"><title>{escape(s.name)}</title></path>')
    if not values:
        out.append(
            f'<text class="nodata" x="{left + plot_w / 2:.1f}" y="{top + plot_h / 2:.1f}" '
            'text-anchor="middle">no data yet</text>'
        )
    out.append("</svg>")
    legend = "".join(f'<span class="key {escape(s.css)}">{escape(s.name)}</span>' for s in series)
    return mark_safe(
        f'<figure class="chart-box"><figcaption>{escape(label)} {legend}</figcaption>{"".join(out)}</figure>'
    )


def sparkline(points: Sequence[Point], *, title: str, width: int = 120, height: int = 24) -> SafeString:
    """A small line without axes, from 0 to the points' maximum, for a table
    cell; ``title`` (escaped) is its tooltip and accessible name. Pure."""
    known = [(t, v) for t, v in points if v is not None and math.isfinite(v)]
    out = [
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
    ]
    if len(known) >= 2:
        first, last = known[0][0], known[-1][0]
        span = max(last - first, 1e-9)
        peak = max(v for _, v in known) or 1.0
        d = path_of(
            points,
            lambda t: (t - first) / span * (width - 2) + 1,
            lambda v: height - 1 - max(v, 0.0) / peak * (height - 2),
        )
        # The area under the line too, so that a flat line still reads as a level, not a border.
        stretches = [stretch for stretch in d.split("M") if stretch]
        for stretch in stretches:
            xs = [float(xy.split(",")[0]) for xy in stretch.replace("L", " ").split()]
            out.append(f'<path class="area" d="M{stretch.strip()} L{xs[-1]:.1f},{height} L{xs[0]:.1f},{height} Z"/>')
        out.append(f'<path class="line" d="{d}"/>')
    out.append("</svg>")
    return mark_safe("".join(out))
