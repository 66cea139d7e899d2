"""Charts as inline SVG (no script, no network): line charts of curves, bars with intervals."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

WIDTH, HEIGHT = 420, 220
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 52, 12, 26, 30
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


@dataclass(frozen=True)
class Line:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    smoothed: Sequence[float] | None = None  # drawn solid over a faint raw line when given
    color: str = COLORS[0]


def line_chart(title: str, lines: Sequence[Line]) -> str:
    """One chart of ``lines`` on shared axes, with a legend when there are several."""
    xs = [x for line in lines for x in line.xs]
    ys = [y for line in lines for y in (*line.ys, *(line.smoothed or ()))]
    if not xs:
        return ""
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if y0 == y1:
        y0, y1 = y0 - 0.5, y1 + 0.5
    if x0 == x1:
        x0, x1 = x0 - 0.5, x1 + 0.5

    def px(x: float) -> float:
        return MARGIN_LEFT + (x - x0) / (x1 - x0) * (WIDTH - MARGIN_LEFT - MARGIN_RIGHT)

    def py(y: float) -> float:
        return HEIGHT - MARGIN_BOTTOM - (y - y0) / (y1 - y0) * (HEIGHT - MARGIN_TOP - MARGIN_BOTTOM)

    def path(values_x: Sequence[float], values_y: Sequence[float]) -> str:
        return " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(values_x, values_y))

    parts = [_frame(title), *_axis_labels(x0, x1, y0, y1, px, py)]
    for line in lines:
        faint = line.smoothed is not None
        parts.append(f'<polyline fill="none" stroke="{line.color}" stroke-width="1" '
                     f'stroke-opacity="{0.3 if faint else 1}" points="{path(line.xs, line.ys)}"/>')
        if line.smoothed is not None:
            parts.append(f'<polyline fill="none" stroke="{line.color}" stroke-width="1.8" '
                         f'points="{path(line.xs, line.smoothed)}"/>')
    if len(lines) > 1:
        parts += _legend([(line.label, line.color) for line in lines])
    return _svg(parts)


def interval_bars(title: str, bars: Sequence[tuple[str, float, float | None, float | None, str]]) -> str:
    """Bars (label, value, interval low, interval high, color) on a 0..1 scale, with whiskers."""
    if not bars:
        return ""
    slot = (WIDTH - MARGIN_LEFT - MARGIN_RIGHT) / len(bars)

    def py(y: float) -> float:
        return HEIGHT - MARGIN_BOTTOM - y * (HEIGHT - MARGIN_TOP - MARGIN_BOTTOM)

    parts = [_frame(title), *_axis_labels(0, 1, 0, 1, lambda x: MARGIN_LEFT, py, x_ticks=False)]
    for index, (label, value, low, high, color) in enumerate(bars):
        left = MARGIN_LEFT + index * slot + slot * 0.15
        width = slot * 0.7
        parts.append(f'<rect x="{left:.1f}" y="{py(value):.1f}" width="{width:.1f}" height="{py(0) - py(value):.1f}" '
                     f'fill="{color}"><title>{html.escape(label)}: {value:.3f}</title></rect>')
        if low is not None and high is not None:
            middle = left + width / 2
            parts.append(f'<line x1="{middle:.1f}" x2="{middle:.1f}" y1="{py(low):.1f}" y2="{py(high):.1f}" '
                         'stroke="black" stroke-width="1.2"/>')
        parts.append(f'<text x="{left + width / 2:.1f}" y="{HEIGHT - 12}" font-size="10" text-anchor="middle">'
                     f'{html.escape(label)}</text>')
        parts.append(f'<text x="{left + width / 2:.1f}" y="{py(value) - 4:.1f}" font-size="10" '
                     f'text-anchor="middle">{value:.1%}</text>')
    return _svg(parts)


def _frame(title: str) -> str:
    return (f'<text x="{WIDTH / 2}" y="16" font-size="13" text-anchor="middle" font-weight="bold">'
            f'{html.escape(title)}</text>'
            f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{WIDTH - MARGIN_LEFT - MARGIN_RIGHT}" '
            f'height="{HEIGHT - MARGIN_TOP - MARGIN_BOTTOM}" fill="none" stroke="#ccc"/>')


def _axis_labels(x0, x1, y0, y1, px, py, *, x_ticks: bool = True) -> list[str]:  # noqa: ANN001
    labels = [f'<text x="{MARGIN_LEFT - 4}" y="{py(y) + 4:.1f}" font-size="10" text-anchor="end">{_short(y)}</text>'
              for y in (y0, (y0 + y1) / 2, y1)]
    if x_ticks:
        labels += [f'<text x="{px(x):.1f}" y="{HEIGHT - 12}" font-size="10" text-anchor="middle">{_short(x)}</text>'
                   for x in (x0, (x0 + x1) / 2, x1)]
    return labels


def _legend(entries: Sequence[tuple[str, str]]) -> list[str]:
    return [f'<text x="{MARGIN_LEFT + 6}" y="{MARGIN_TOP + 12 + 12 * i}" font-size="10" fill="{color}">'
            f'{html.escape(label)}</text>' for i, (label, color) in enumerate(entries)]


def _short(value: float) -> str:
    return f"{value:.3g}"


def _svg(parts: list[str]) -> str:
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
            f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')
