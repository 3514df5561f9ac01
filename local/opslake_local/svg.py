"""Tiny hand-written SVG charts for the HTML report: a line chart, a (grouped) bar chart and a
dot-and-whisker chart of estimates with their intervals.

Each function returns one ``<svg class="chart">`` element with a ``<title>`` and ``aria-label``
(screen readers and browsers' tooltips), fixed pixel size and no external resources. All text
is HTML-escaped here (labels come from op records, which agents wrote) and everything else is a
number formatted here or a constant, so a chart is returned as :class:`~markupsafe.Markup`: the
report's autoescaping template puts it in the page as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape

from markupsafe import Markup

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")
FONT = 'font-family="system-ui, sans-serif" font-size="11"'
_chart_ids = 0


def _id() -> str:
    global _chart_ids
    _chart_ids += 1
    return f"chart-{_chart_ids}"


def _fmt(value: float) -> str:
    """A tick label: integers plainly, small numbers with two significant decimals."""
    if value == 0:
        return "0"
    if value == int(value) and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:,.0f}"


def _percent(value: float) -> str:
    text = f"{value * 100:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "%"


def nice_max(value: float) -> float:
    """A round axis maximum at or above ``value`` (1, 2, 2.5 or 5 × a power of ten)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)


def _open(title: str, width: int, height: int) -> tuple[str, str]:
    chart_id = _id()
    label = escape(title)
    head = (
        f'<svg class="chart" id="{chart_id}" role="img" '
        f'aria-label="{label}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f"<title>{label}</title>"
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>'
    )
    return chart_id, head


def _legend(names: Sequence[str], x: float, y: float) -> str:
    parts = []
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        yy = y + i * 16
        parts.append(
            f'<rect x="{x:.1f}" y="{yy - 9:.1f}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14:.1f}" y="{yy:.1f}" {FONT}>{escape(name)}</text>'
        )
    return "".join(parts)


def _y_axis(
    left: float, top: float, plot_w: float, plot_h: float, y_max: float, fmt: Callable[[float], str]
) -> str:
    parts = []
    for i in range(5):
        value = y_max * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(
            f'<line x1="{left:.1f}" y1="{y:.1f}" x2="{left + plot_w:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text x="{left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{escape(fmt(value))}</text>'
        )
    return "".join(parts)


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    x_label: str = "",
    y_label: str = "",
    width: int = 640,
    height: int = 280,
    y_max: float | None = None,
    percent: bool = False,
) -> Markup:
    """One polyline (with a dot per point) per series; ``series`` maps a name to (x, y) points."""
    _, head = _open(title, width, height)
    names = [name for name, points in series.items() if points]
    left, top, right, bottom = 56.0, 16.0, 150.0, 40.0
    plot_w, plot_h = width - left - right, height - top - bottom
    points_all = [p for name in names for p in series[name]]
    xs = [float(x) for x, _ in points_all] or [0.0, 1.0]
    x_min, x_max = min(xs), max(xs)
    if x_max == x_min:
        x_min, x_max = x_min - 1, x_max + 1
    top_value = y_max if y_max is not None else nice_max(max([float(y) for _, y in points_all] or [1.0]))
    fmt = _percent if percent else _fmt

    def sx(x: float) -> float:
        return left + (float(x) - x_min) / (x_max - x_min) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - min(float(y), top_value) / top_value * plot_h

    body = [_y_axis(left, top, plot_w, plot_h, top_value, fmt)]
    ticks = sorted(set(xs))
    step = max(1, math.ceil(len(ticks) / 12))
    for x in ticks[::step]:
        body.append(
            f'<text x="{sx(x):.1f}" y="{top + plot_h + 16:.1f}" text-anchor="middle" {FONT}>{escape(_fmt(x))}</text>'
        )
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(series[name]))
        body.append(
            f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>'
        )
        for x, y in series[name]:
            body.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                f"<title>{escape(name)}: {escape(fmt(float(y)))} at {escape(_fmt(float(x)))}</title></circle>"
            )
    body.append(_legend(names, left + plot_w + 16, top + 12))
    body.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 6:.1f}" text-anchor="middle" {FONT}>{escape(x_label)}</text>'
        f'<text x="12" y="{top + plot_h / 2:.1f}" text-anchor="middle" {FONT} '
        f'transform="rotate(-90 12 {top + plot_h / 2:.1f})">{escape(y_label)}</text>'
    )
    return Markup(head + "".join(body) + "</svg>")


def _grid_and_labels(
    labels: Sequence[str],
    top_value: float,
    fmt: Callable[[float], str],
    *,
    left: float,
    top: float,
    plot_w: float,
    group_h: float,
) -> list[str]:
    """A horizontal chart's five vertical gridlines with their values, and each group's label (cut
    to 40 characters; the full text is its title)."""
    body = []
    for i in range(5):
        x = left + plot_w * i / 4
        body.append(
            f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{top + group_h * len(labels):.1f}" stroke="#e5e7eb"/>'
            f'<text x="{x:.1f}" y="{top + group_h * len(labels) + 14:.1f}" text-anchor="middle" {FONT}>'
            f"{escape(fmt(top_value * i / 4))}</text>"
        )
    for row, label in enumerate(labels):
        y0 = top + row * group_h + 4
        shown = label if len(label) <= 40 else label[:39] + "…"
        body.append(
            f'<text x="{left - 6:.1f}" y="{y0 + group_h / 2:.1f}" text-anchor="end" {FONT}>'
            f"<title>{escape(label)}</title>{escape(shown)}</text>"
        )
    return body


def bar_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    value_label: str = "",
    width: int = 640,
    bar_height: int = 12,
    label_width: int = 220,
    percent: bool = False,
) -> Markup:
    """Horizontal bars, one group per label and one bar per series in it (a single series is a
    plain bar chart). Long labels are cut to 40 characters (the full text is in the bar's title)."""
    names = list(series)
    group_h = bar_height * len(names) + 8
    top, bottom = 12.0, 44.0 + 16 * max(0, len(names) - 1)
    height = int(top + bottom + group_h * max(1, len(labels)))
    _, head = _open(title, width, height)
    left = float(label_width)
    plot_w = width - left - 60
    values = [float(v) for name in names for v in series[name]]
    top_value = nice_max(max(values or [1.0]))
    fmt = _percent if percent else _fmt
    body = _grid_and_labels(labels, top_value, fmt, left=left, top=top, plot_w=plot_w, group_h=group_h)
    for row, label in enumerate(labels):
        y0 = top + row * group_h + 4
        for j, name in enumerate(names):
            value = float(series[name][row])
            w = max(1.0, value / top_value * plot_w) if value > 0 else 0.0
            y = y0 + j * bar_height
            body.append(
                f'<rect class="bar" x="{left:.1f}" y="{y:.1f}" width="{w:.1f}" height="{bar_height - 2}" '
                f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(label)} · {escape(name)}: '
                f"{escape(fmt(value))}</title></rect>"
                f'<text x="{left + w + 4:.1f}" y="{y + bar_height - 3:.1f}" {FONT}>{escape(fmt(value))}</text>'
            )
    legend_y = top + group_h * len(labels) + 32
    if len(names) > 1 or value_label:
        body.append(_legend(names if len(names) > 1 else [value_label], left, legend_y))
    return Markup(head + "".join(body) + "</svg>")


def interval_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[tuple[float, float, float] | None]],
    *,
    title: str,
    width: int = 640,
    row_height: int = 14,
    label_width: int = 220,
    percent: bool = False,
) -> Markup:
    """A dot-and-whisker chart: one group per label, one dot (the estimate) with a whisker (its
    interval) per series in it; ``series`` maps a name to ``(estimate, low, high)`` per label, None
    where that label has none. Long labels are cut to 40 characters (the full text is their title)."""
    names = list(series)
    group_h = row_height * len(names) + 8
    top, bottom = 12.0, 44.0 + 16 * max(0, len(names) - 1)
    height = int(top + bottom + group_h * max(1, len(labels)))
    _, head = _open(title, width, height)
    left = float(label_width)
    plot_w = width - left - 60
    values = [float(v) for name in names for item in series[name] if item is not None for v in item]
    top_value = nice_max(max(values or [1.0]))
    fmt = _percent if percent else _fmt

    def sx(value: float) -> float:
        return left + max(0.0, min(float(value), top_value)) / top_value * plot_w

    body = _grid_and_labels(labels, top_value, fmt, left=left, top=top, plot_w=plot_w, group_h=group_h)
    for row, label in enumerate(labels):
        y0 = top + row * group_h + 4
        for j, name in enumerate(names):
            item = series[name][row]
            if item is None:
                continue
            estimate, low, high = (float(v) for v in item)
            y = y0 + j * row_height + row_height / 2
            color = PALETTE[j % len(PALETTE)]
            tip = escape(f"{label} · {name}: {fmt(estimate)} [{fmt(low)}, {fmt(high)}]")
            body.append(
                f'<line class="whisker" x1="{sx(low):.1f}" y1="{y:.1f}" x2="{sx(high):.1f}" y2="{y:.1f}" '
                f'stroke="{color}" stroke-width="2"/>'
                f'<circle class="point" cx="{sx(estimate):.1f}" cy="{y:.1f}" r="4" fill="{color}">'
                f"<title>{tip}</title></circle>"
            )
    legend_y = top + group_h * len(labels) + 32
    body.append(_legend(names, left, legend_y))
    return Markup(head + "".join(body) + "</svg>")
