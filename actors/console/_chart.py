"""Server-rendered SVG bar charts (stacked by agent, one bar a day): no script, no library."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from markupsafe import Markup

from ._templates import fragment

__all__ = ["stacked_bars"]

_COLORS = ("#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#0ea5e9", "#84cc16", "#9ca3af")
_WIDTH, _HEIGHT, _LEFT, _TOP = 760, 260, 70, 16
_BASE = _HEIGHT - 44
_LEGEND_TEXT = 40
"""The longest legend label (a longer id keeps its end, its most telling part)."""


def stacked_bars(
    title: str,
    days: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    unit: str = "",
    most: int = 7,
) -> Markup:
    """A bar per day, stacked by series (the ``most`` largest; the rest as ``other``).

    Every label goes through the template, so agent ids are escaped like any other text.
    The legend is a list under the chart that the browser lays out and wraps, so its
    labels never run into each other whatever their length and the font.
    """
    ranked = sorted(series, key=lambda name: -sum(series[name]))
    shown = {name: list(series[name]) for name in ranked[:most]}
    rest = ranked[most:]
    if rest:
        shown["other"] = [sum(series[n][i] for n in rest) for i in range(len(days))]
    totals = [sum(values[i] for values in shown.values()) for i in range(len(days))]
    peak = max(totals, default=0.0) or 1.0
    room = _WIDTH - _LEFT - 20
    step = room / max(1, len(days))
    bar_width = max(2.0, min(48.0, step * 0.7))
    bars: list[dict[str, object]] = []
    for i, day in enumerate(days):
        y = float(_BASE)
        for k, (name, values) in enumerate(shown.items()):
            value = values[i]
            if value <= 0:
                continue
            height = (_BASE - _TOP) * value / peak
            y -= height
            bars.append(
                {
                    "x": round(_LEFT + i * step + (step - bar_width) / 2, 1),
                    "y": round(y, 1),
                    "w": round(bar_width, 1),
                    "h": round(height, 1),
                    "color": _COLORS[k % len(_COLORS)],
                    "label": f"{name} · {day}: {_fmt(value, unit)}",
                }
            )
    every = max(1, len(days) // 8)
    ticks = [
        {"x": round(_LEFT + i * step + step / 2, 1), "text": day[5:]}
        for i, day in enumerate(days)
        if i % every == 0
    ]
    legend = [
        {
            "color": _COLORS[k % len(_COLORS)],
            "text": name if len(name) <= _LEGEND_TEXT else "…" + name[-(_LEGEND_TEXT - 1) :],
        }
        for k, name in enumerate(shown)
    ]
    return fragment(
        "chart",
        title=title,
        width=_WIDTH,
        height=_BASE + 24,
        left=_LEFT,
        top=_TOP,
        base=_BASE,
        top_label=_fmt(peak, unit),
        bars=bars,
        ticks=ticks,
        legend=legend,
    )


def _fmt(value: float, unit: str) -> str:
    if unit == "$":
        return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
    return f"{value:,.0f}{unit}"
