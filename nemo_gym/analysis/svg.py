"""Static SVG plots for the report: no JavaScript, no network, nothing to install.

Each function returns one `<svg class="plot" data-plot="ID">` element whose marks (bars,
points, intervals) carry `class="mark"`, so a test can find them in the DOM and, drawn
in the plot's own colour, in a rendered PNG.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from html import escape

__all__ = [
    "bar_chart",
    "histogram",
    "interval_chart",
    "nice_ticks",
    "scatter",
    "sorted_bars",
    "stacked_bars",
]

WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 58, 16, 36, 52
AXIS = "#444444"
GRID = "#e4e4e4"
FONT = 'font-family="system-ui, -apple-system, Segoe UI, sans-serif"'


def nice_ticks(low: float, high: float, count: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values covering [low, high]; whole numbers only with `integer` (counts)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(1, count)
    if integer:
        raw = max(raw, 1.0)  # a count axis has no tick between 1 and 2
    magnitude = 10 ** math.floor(math.log10(raw))
    multiples = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(m * magnitude for m in multiples if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels of `ticks`, with as many decimals as it takes to tell them apart (a narrow
    range of large values, such as latencies that are all about 120 s)."""
    labels = [_label(t) for t in ticks]
    if len(set(labels)) == len(labels) or len(ticks) < 2:
        return labels
    step = min(abs(b - a) for a, b in itertools.pairwise(ticks) if b != a)
    decimals = max(0, 1 - math.floor(math.log10(step)))
    return [f"{t:.{decimals}f}" for t in ticks]


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10_000 or abs(value) < 0.01:
        return f"{value:.2g}"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3g}"


class _Frame:
    """A plot area with linear x and y scales."""

    def __init__(
        self,
        plot_id: str,
        title: str,
        x_range: tuple[float, float],
        y_range: tuple[float, float],
        *,
        width: int = WIDTH,
        height: int = HEIGHT,
        left: int = LEFT,
    ) -> None:
        self.plot_id, self.title = plot_id, title
        self.width, self.height, self.left = width, height, left
        self.x0, self.x1 = x_range
        self.y0, self.y1 = y_range
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1
        if self.y1 <= self.y0:
            self.y1 = self.y0 + 1
        self.parts: list[str] = []

    @property
    def inner_w(self) -> float:
        return self.width - self.left - RIGHT

    @property
    def inner_h(self) -> float:
        return self.height - TOP - BOTTOM

    def x(self, value: float) -> float:
        return self.left + (value - self.x0) / (self.x1 - self.x0) * self.inner_w

    def y(self, value: float) -> float:
        return TOP + (1 - (value - self.y0) / (self.y1 - self.y0)) * self.inner_h

    def add(self, text: str) -> None:
        self.parts.append(text)

    def y_axis(self, ticks: Sequence[float], label: str = "") -> None:
        for tick, text in zip(ticks, tick_labels(ticks), strict=True):
            y = self.y(tick)
            self.add(
                f'<line x1="{self.left}" x2="{self.width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="{GRID}"/>'
                f'<text x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
                f'fill="{AXIS}">{text}</text>'
            )
        if label:
            self.add(
                f'<text transform="translate(14 {TOP + self.inner_h / 2:.1f}) rotate(-90)" '
                f'text-anchor="middle" font-size="12" fill="{AXIS}">{escape(label)}</text>'
            )

    def x_axis(self, ticks: Sequence[float], label: str = "") -> None:
        base = self.height - BOTTOM
        span = (self.x1 - self.x0) * 1e-9
        # A round tick outside the data's range would fall off the plot.
        shown = [tick for tick in ticks if self.x0 - span <= tick <= self.x1 + span]
        for tick, text in zip(shown, tick_labels(shown), strict=True):
            x = self.x(tick)
            self.add(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 4}" stroke="{AXIS}"/>'
                f'<text x="{x:.1f}" y="{base + 17}" text-anchor="middle" font-size="11" '
                f'fill="{AXIS}">{text}</text>'
            )
        if label:
            self.add(
                f'<text x="{self.left + self.inner_w / 2:.1f}" y="{self.height - 10}" '
                f'text-anchor="middle" font-size="12" fill="{AXIS}">{escape(label)}</text>'
            )

    def render(self, *, axes: bool = True) -> str:
        base = self.height - BOTTOM
        lines = (
            f'<line x1="{self.left}" x2="{self.width - RIGHT}" y1="{base}" y2="{base}" '
            f'stroke="{AXIS}"/><line x1="{self.left}" x2="{self.left}" y1="{TOP}" '
            f'y2="{base}" stroke="{AXIS}"/>'
            if axes
            else ""
        )
        title = (
            f'<text x="{self.left}" y="20" font-size="14" font-weight="600" fill="#222">'
            f"{escape(self.title)}</text>"
        )
        return (
            f'<svg class="plot" data-plot="{escape(self.plot_id)}" '
            f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" '
            f'width="{self.width}" height="{self.height}" role="img" {FONT}>'
            f"<title>{escape(self.title)}</title>{title}{''.join(self.parts)}{lines}</svg>"
        )


def _empty(plot_id: str, title: str, note: str) -> str:
    frame = _Frame(plot_id, title, (0, 1), (0, 1))
    frame.add(
        f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" font-size="13" '
        f'fill="#777">{escape(note)}</text>'
    )
    return frame.render()


def histogram(
    values: Sequence[float],
    *,
    plot_id: str,
    title: str,
    xlabel: str,
    color: str,
    bins: int = 20,
    value_range: tuple[float, float] | None = None,
    ylabel: str = "rollouts",
) -> str:
    """Counts of `values` in `bins` equal bins (a bar per bin)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return _empty(plot_id, title, "no values")
    low, high = value_range or (min(finite), max(finite))
    if high <= low:
        low, high = low - 0.5, high + 0.5
    width = (high - low) / bins
    counts = [0] * bins
    for value in finite:
        index = min(bins - 1, max(0, int((value - low) / width)))
        counts[index] += 1
    y_ticks = nice_ticks(0, max(counts), 4, integer=True)
    frame = _Frame(plot_id, title, (low, high), (0, y_ticks[-1]))
    frame.y_axis(y_ticks, ylabel)
    for index, count in enumerate(counts):
        if not count:
            continue
        x0 = frame.x(low + index * width) + 1
        x1 = frame.x(low + (index + 1) * width) - 1
        y = frame.y(count)
        frame.add(
            f'<rect class="mark" x="{x0:.1f}" y="{y:.1f}" width="{max(1.0, x1 - x0):.1f}" '
            f'height="{frame.y(0) - y:.1f}" fill="{color}"><title>'
            f"{_label(low + index * width)}–{_label(low + (index + 1) * width)}: {count}"
            f"</title></rect>"
        )
    frame.x_axis(nice_ticks(low, high, 5)[:12], xlabel)
    return frame.render()


def bar_chart(
    bars: Sequence[tuple[str, float]],
    *,
    plot_id: str,
    title: str,
    ylabel: str,
    color: str | Sequence[str],
    y_max: float | None = None,
    empty: str = "nothing to show",
    counts: bool = False,
) -> str:
    """One labelled vertical bar per (label, value); `counts`: whole-number ticks."""
    if not bars:
        return _empty(plot_id, title, empty)
    top = y_max if y_max is not None else max(v for _, v in bars)
    y_ticks = nice_ticks(0, top if top > 0 else 1, 4, integer=counts)
    frame = _Frame(plot_id, title, (0, len(bars)), (0, y_ticks[-1]))
    frame.y_axis(y_ticks, ylabel)
    slot = frame.inner_w / len(bars)
    colors = [color] * len(bars) if isinstance(color, str) else list(color)
    for index, (label, value) in enumerate(bars):
        x = frame.left + index * slot + slot * 0.15
        y = frame.y(value)
        frame.add(
            f'<rect class="mark" x="{x:.1f}" y="{y:.1f}" width="{slot * 0.7:.1f}" '
            f'height="{frame.y(0) - y:.1f}" fill="{colors[index % len(colors)]}">'
            f"<title>{escape(label)}: {_label(value)}</title></rect>"
        )
        shown = label if len(label) <= 18 else label[:17] + "…"
        cx = frame.left + (index + 0.5) * slot
        base = HEIGHT - BOTTOM
        if len(bars) > 6:
            frame.add(
                f'<text transform="translate({cx:.1f} {base + 12}) rotate(30)" font-size="10" '
                f'fill="{AXIS}">{escape(shown)}</text>'
            )
        else:
            frame.add(
                f'<text x="{cx:.1f}" y="{base + 16}" text-anchor="middle" font-size="11" '
                f'fill="{AXIS}">{escape(shown)}</text>'
            )
    return frame.render()


def sorted_bars(
    values: Sequence[float],
    *,
    plot_id: str,
    title: str,
    xlabel: str,
    ylabel: str,
    color: str,
    limit: int = 400,
) -> str:
    """The values sorted from lowest to highest, one thin bar each (quantiles of them
    when there are more than `limit`)."""
    if not values:
        return _empty(plot_id, title, "no tasks")
    ordered = sorted(values)
    if len(ordered) > limit:
        step = (len(ordered) - 1) / (limit - 1)
        ordered = [ordered[round(i * step)] for i in range(limit)]
    frame = _Frame(plot_id, title, (0, len(ordered)), (0, 1))
    frame.y_axis([0, 0.25, 0.5, 0.75, 1.0], ylabel)
    slot = frame.inner_w / len(ordered)
    for index, value in enumerate(ordered):
        y = frame.y(max(value, 0.0))
        height = frame.y(0) - y
        if height <= 0:
            height = 1.5  # a task nobody passes still shows as a sliver
            y = frame.y(0) - height
        frame.add(
            f'<rect class="mark" x="{frame.left + index * slot:.2f}" y="{y:.1f}" '
            f'width="{max(0.8, slot - 0.4):.2f}" height="{height:.1f}" fill="{color}"/>'
        )
    frame.x_axis([], xlabel)
    return frame.render()


def scatter(
    points: Sequence[tuple[float, float]],
    *,
    plot_id: str,
    title: str,
    xlabel: str,
    ylabel: str,
    color: str,
    jitter: float = 0.0,
    y_range: tuple[float, float] | None = None,
) -> str:
    """Points (x, y); `jitter` spreads equal y values apart (deterministically)."""
    if not points:
        return _empty(plot_id, title, "no points")
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    x_ticks = nice_ticks(min(xs), max(xs), 5)
    low, high = y_range or (min(ys), max(ys))
    y_ticks = nice_ticks(low, high, 4)
    frame = _Frame(plot_id, title, (x_ticks[0], x_ticks[-1]), (y_ticks[0], y_ticks[-1]))
    frame.y_axis(y_ticks, ylabel)
    for index, (x, y) in enumerate(points):
        # A fixed low-discrepancy offset per point, not random: the report is stable.
        offset = ((index * 0.618033988749895) % 1.0 - 0.5) * 2 * jitter
        frame.add(
            f'<circle class="mark" cx="{frame.x(x):.1f}" cy="{frame.y(y + offset):.1f}" '
            f'r="3.4" fill="{color}" stroke="#ffffff" stroke-width="0.6"/>'
        )
    frame.x_axis(x_ticks, xlabel)
    return frame.render()


def stacked_bars(
    rows: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    *,
    plot_id: str,
    title: str,
    colors: dict[str, str],
    xlabel: str,
) -> str:
    """One horizontal bar per row, split into its (segment, value) parts (shares in
    [0, 1]); a legend of the segments below."""
    if not rows or not any(v for _, parts in rows for _, v in parts):
        return _empty(plot_id, title, "no reward was lost")
    names = [name for name in colors if any(n == name for _, parts in rows for n, _ in parts)]
    legend_rows = math.ceil(len(names) / 4)
    height = TOP + BOTTOM + 30 * len(rows) + 18 * legend_rows
    frame = _Frame(plot_id, title, (0, 1), (0, 1), height=height, left=120)
    for index, (label, parts) in enumerate(rows):
        y = TOP + index * 30 + 4
        x: float = frame.left
        shown = label if len(label) <= 16 else label[:15] + "…"
        frame.add(
            f'<text x="{frame.left - 6}" y="{y + 15}" text-anchor="end" font-size="11" '
            f'fill="{AXIS}">{escape(shown)}</text>'
        )
        for name, value in parts:
            if value <= 0:
                continue
            width = value * frame.inner_w
            frame.add(
                f'<rect class="mark" x="{x:.1f}" y="{y}" width="{width:.1f}" height="22" '
                f'fill="{colors.get(name, "#999")}"><title>{escape(label)} · {escape(name)}: '
                f"{100 * value:.1f}%</title></rect>"
            )
            x += width
    base = TOP + 30 * len(rows) + 8
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        x = frame.x(tick)
        frame.add(
            f'<text x="{x:.1f}" y="{base + 10}" text-anchor="middle" font-size="11" '
            f'fill="{AXIS}">{int(tick * 100)}%</text>'
        )
    frame.add(
        f'<text x="{frame.left + frame.inner_w / 2:.1f}" y="{base + 26}" text-anchor="middle" '
        f'font-size="12" fill="{AXIS}">{escape(xlabel)}</text>'
    )
    for index, name in enumerate(names):
        lx = frame.left + (index % 4) * 110
        ly = base + 40 + (index // 4) * 18
        frame.add(
            f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colors[name]}"/>'
            f'<text x="{lx + 14}" y="{ly}" font-size="11" fill="{AXIS}">{escape(name)}</text>'
        )
    return frame.render(axes=False)  # the bars are their own frame


def interval_chart(
    items: Sequence[tuple[str, float, float, float]],
    *,
    plot_id: str,
    title: str,
    ylabel: str,
    color: str,
    reference: float | None = None,
) -> str:
    """A point and an interval per (label, value, low, high)."""
    finite = [v for _, m, lo, hi in items for v in (m, lo, hi) if math.isfinite(v)]
    if not finite:
        return _empty(plot_id, title, "nothing to compare")
    low, high = min(finite), max(finite)
    if reference is not None:
        low, high = min(low, reference), max(high, reference)
    pad = (high - low) * 0.1 or 0.05
    y_ticks = nice_ticks(low - pad, high + pad, 4)
    frame = _Frame(plot_id, title, (0, len(items)), (y_ticks[0], y_ticks[-1]))
    frame.y_axis(y_ticks, ylabel)
    if reference is not None:
        y = frame.y(reference)
        frame.add(
            f'<line x1="{frame.left}" x2="{frame.width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#999" stroke-dasharray="4 3"/>'
        )
    slot = frame.inner_w / len(items)
    for index, (label, value, lo, hi) in enumerate(items):
        cx = frame.left + (index + 0.5) * slot
        if math.isfinite(lo) and math.isfinite(hi):
            frame.add(
                f'<line class="mark" x1="{cx:.1f}" x2="{cx:.1f}" y1="{frame.y(lo):.1f}" '
                f'y2="{frame.y(hi):.1f}" stroke="{color}" stroke-width="3"/>'
                f'<line x1="{cx - 8:.1f}" x2="{cx + 8:.1f}" y1="{frame.y(lo):.1f}" '
                f'y2="{frame.y(lo):.1f}" stroke="{color}" stroke-width="2"/>'
                f'<line x1="{cx - 8:.1f}" x2="{cx + 8:.1f}" y1="{frame.y(hi):.1f}" '
                f'y2="{frame.y(hi):.1f}" stroke="{color}" stroke-width="2"/>'
            )
        if math.isfinite(value):
            frame.add(
                f'<circle class="mark" cx="{cx:.1f}" cy="{frame.y(value):.1f}" r="6" '
                f'fill="{color}"><title>{escape(label)}: {value:.4f} [{lo:.4f}, {hi:.4f}]'
                f"</title></circle>"
            )
        shown = label if len(label) <= 18 else label[:17] + "…"
        frame.add(
            f'<text x="{cx:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" '
            f'font-size="11" fill="{AXIS}">{escape(shown)}</text>'
        )
    return frame.render()
