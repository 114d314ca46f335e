"""Small inline SVG charts, drawn here so the report needs no chart library and makes no
request. Every string from the data is escaped (and its special characters made visible);
colours come from CSS classes in the page's stylesheet, so there is no style attribute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from equiv.report.text import plain

__all__ = ["Bar", "Strip", "bar_chart", "grouped_chart", "strip_chart"]

WIDTH = 560
LEFT = 52  # room for the y axis's name and tick labels


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    css: str = "bar"
    href: str | None = None


@dataclass(frozen=True)
class Strip:
    """One row of a strip chart: a grey bar to ``reach`` and a dot per named value."""

    label: str
    reach: float | None
    dots: tuple[tuple[str, float | None], ...]
    href: str | None = None


def _t(value: object) -> str:
    return str(escape(plain(str(value))))


def _shown(token: str) -> str:
    """A token as an axis label: newline, tab and edge spaces drawn, since SVG text hides them."""
    text = token.replace("\n", "↵").replace("\t", "→")
    core = text.strip(" ")
    if not core:
        return "␣" * len(text)
    lead, trail = len(text) - len(text.lstrip(" ")), len(text) - len(text.rstrip(" "))
    return "␣" * lead + core + "␣" * trail


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _num(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _nice_max(x: float) -> float:
    if x <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(x))
    for step in (1, 2, 2.5, 5, 10):
        if x <= step * exp:
            return float(step * exp)
    return float(10 * exp)


def _svg(body: list[str], height: int, title: str) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        f'role="img" aria-label="{_t(title)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{_t(title)}</title>{''.join(body)}</svg>"
    )


def _axis_labels(height: int, top: int, bottom: int, x_label: str, y_label: str) -> list[str]:
    """The axes' names: y along the left edge (rotated), x under the plot."""
    out = []
    if y_label:
        mid = _n((top + bottom) / 2)
        out.append(
            f'<text class="axis" x="10" y="{mid}" text-anchor="middle" '
            f'transform="rotate(-90 10 {mid})">{_t(y_label)}</text>'
        )
    if x_label:
        out.append(
            f'<text class="axis" x="{_n((LEFT + WIDTH) / 2)}" y="{height - 2}" '
            f'text-anchor="middle">{_t(x_label)}</text>'
        )
    return out


def _axis(top: int, bottom: int, y_max: float) -> list[str]:
    out = []
    for frac in (0.0, 0.5, 1.0):
        y = bottom - frac * (bottom - top)
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH}" y1="{_n(y)}" y2="{_n(y)}"/>')
        out.append(
            f'<text class="tick" x="{LEFT - 4}" y="{_n(y + 3)}" text-anchor="end">'
            f"{_num(frac * y_max)}</text>"
        )
    return out


def _link(href: str | None, inner: str) -> str:
    return f'<a href="{_t(href)}">{inner}</a>' if href else inner


def bar_chart(
    bars: Sequence[Bar],
    *,
    title: str,
    y_max: float | None = None,
    height: int = 164,
    x_label: str = "",
    y_label: str = "",
) -> Markup | None:
    """Vertical bars, one per item, each with a tooltip and a link, under named axes; None when
    nothing to draw."""
    items = [b for b in bars if math.isfinite(b.value)]
    if not items:
        return None
    top, bottom = 8, height - 28
    peak = y_max if y_max is not None else _nice_max(max(max(b.value for b in items), 0.0))
    slot = (WIDTH - LEFT - 4) / len(items)
    width = max(min(slot * 0.8, 40.0), 1.0)
    body = _axis(top, bottom, peak)
    for i, b in enumerate(items):
        h = max(min(b.value / peak, 1.0), 0.0) * (bottom - top) if peak else 0.0
        x = LEFT + 4 + i * slot + (slot - width) / 2
        rect = (
            f'<rect class="{_t(b.css)}" x="{_n(x)}" y="{_n(bottom - max(h, 1.0))}" '
            f'width="{_n(width)}" height="{_n(max(h, 1.0))}">'
            f"<title>{_t(b.label)}: {_num(b.value)}</title></rect>"
        )
        body.append(_link(b.href, rect))
    body.append(
        f'<text class="tick" x="{LEFT + 4}" y="{bottom + 11}">{len(items)} item(s); hover for '
        "values, click to open</text>"
    )
    body += _axis_labels(height, top, bottom, x_label, y_label)
    return _svg(body, height, title)


def grouped_chart(
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None], str]],
    *,
    title: str,
    height: int = 184,
    x_label: str = "",
    y_label: str = "",
) -> Markup | None:
    """Bars per category, one per series (``(name, values, css class)``), with a legend and
    named axes: for observed vs expected counts. None when nothing to draw."""
    values = _finite([v for _, vs, _ in series for v in vs])
    if not categories or not values:
        return None
    top, bottom = 22, height - 44
    peak = _nice_max(max(max(values), 0.0))
    slot = (WIDTH - LEFT - 4) / len(categories)
    width = max(min(slot * 0.8 / len(series), 30.0), 1.0)
    body = _axis(top, bottom, peak)
    for s, (name, _, css) in enumerate(series):
        x = LEFT + 4 + s * 120
        body.append(f'<rect class="{_t(css)}" x="{x}" y="4" width="10" height="10"/>')
        body.append(f'<text class="tick" x="{x + 14}" y="13">{_t(name)}</text>')
    for i, category in enumerate(categories):
        x0 = LEFT + 4 + i * slot + (slot - width * len(series)) / 2
        for s, (name, vs, css) in enumerate(series):
            v = vs[i] if i < len(vs) else None
            if v is None or not math.isfinite(v):
                continue
            h = max(min(v / peak, 1.0), 0.0) * (bottom - top)
            body.append(
                f'<rect class="{_t(css)}" x="{_n(x0 + s * width)}" y="{_n(bottom - h)}" '
                f'width="{_n(width)}" height="{_n(h)}"><title>{_t(category)} {_t(name)}: '
                f"{_num(v)}</title></rect>"
            )
        if len(categories) <= 24:
            label = _shown(category if len(category) <= 8 else category[:7] + "…")
            body.append(
                f'<text class="tick" x="{_n(LEFT + 4 + (i + 0.5) * slot)}" y="{bottom + 12}" '
                f'text-anchor="middle">{_t(label)}</text>'
            )
    body += _axis_labels(height, top, bottom, x_label, y_label)
    return _svg(body, height, title)


def _strip_row(
    row: Strip,
    y: float,
    label_w: int,
    x_at: Callable[[float], float],
    reach_name: str,
    css_of: Mapping[str, str],
) -> str:
    """One row of `strip_chart` at height ``y``: its label, its reach bar and its dots."""
    label = row.label if len(row.label) <= 28 else row.label[:17] + "…" + row.label[-10:]
    parts = [
        f'<text class="rowlabel" x="{label_w - 6}" y="{y + 12}" text-anchor="end">'
        f"{_t(label)}<title>{_t(row.label)}</title></text>"
    ]
    if row.reach is not None and math.isfinite(row.reach):
        width = max(x_at(row.reach) - x_at(0.0), 0.0)
        parts.append(
            f'<rect class="reach" x="{_n(x_at(0.0))}" y="{y + 5}" height="7" width="{_n(width)}">'
            f"<title>{_t(reach_name)}: {_num(row.reach)}</title></rect>"
        )
    for name, value in row.dots:
        if value is None or not math.isfinite(value):
            continue
        parts.append(
            f'<circle class="{_t(css_of.get(name, "dot"))}" cx="{_n(x_at(value))}" cy="{y + 8}" '
            f'r="4"><title>{_t(name)}: {_num(value)}</title></circle>'
        )
    return _link(row.href, "".join(parts))


def strip_chart(
    rows: Sequence[Strip],
    *,
    title: str,
    legend: Sequence[tuple[str, str]],
    reach_name: str,
    x_label: str = "",
) -> Markup | None:
    """One row per item: a grey bar from 0 to ``reach`` and a dot per value, on one linear
    axis named ``x_label``; ``legend`` names each dot's CSS class. None when nothing to draw."""
    values = _finite([r.reach for r in rows] + [v for r in rows for _, v in r.dots])
    if not rows or not values:
        return None
    label_w, row_h, top = 190, 18, 22
    height = top + row_h * len(rows) + 18 + (14 if x_label else 0)
    peak = _nice_max(max(max(values), 0.0))
    low = -_nice_max(-min(values)) if min(values) < 0 else 0.0  # a negative margin: a bug
    span = WIDTH - label_w - 10

    def x_at(v: float) -> float:
        return label_w + max(min((v - low) / (peak - low), 1.0), 0.0) * span

    def x_of(v: float) -> str:
        return _n(x_at(v))

    body = [f'<rect class="reach" x="{label_w}" y="4" width="10" height="10"/>']
    body.append(f'<text class="tick" x="{label_w + 14}" y="13">{_t(reach_name)}</text>')
    for i, (name, css) in enumerate(legend):
        x = label_w + 140 + i * 120
        body.append(f'<circle class="{_t(css)}" cx="{x + 5}" cy="9" r="4"/>')
        body.append(f'<text class="tick" x="{x + 14}" y="13">{_t(name)}</text>')
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        tick = low + frac * (peak - low)
        tx = x_of(tick)
        bottom = height - 16 - (14 if x_label else 0)
        body.append(f'<line class="grid" x1="{tx}" x2="{tx}" y1="{top}" y2="{bottom}"/>')
        body.append(
            f'<text class="tick" x="{tx}" y="{height - 4 - (14 if x_label else 0)}" '
            f'text-anchor="middle">{_num(tick)}</text>'
        )
    css_of = dict(legend)
    for i, row in enumerate(rows):
        body.append(_strip_row(row, top + i * row_h, label_w, x_at, reach_name, css_of))
    if x_label:
        body.append(
            f'<text class="axis" x="{_n(label_w + span / 2)}" y="{height - 2}" '
            f'text-anchor="middle">{_t(x_label)}</text>'
        )
    return _svg(body, height, title)
