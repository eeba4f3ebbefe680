"""Bar charts drawn on the server as SVG: tokens per day, stacked by channel or by person.

No script and no style attribute (the console's Content-Security-Policy allows neither inline):
colours are presentation attributes, and every label is escaped text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 220
_LEFT, _BOTTOM, _TOP = 56, 28, 10
_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
OTHERS = "others"
# Series drawn at most; the rest are summed as "others".
MAX_SERIES = 7


def _top(per_day: Mapping[str, Mapping[str, int]]) -> list[str]:
    totals: dict[str, int] = {}
    for series in per_day.values():
        for name, value in series.items():
            totals[name] = totals.get(name, 0) + value
    return sorted(totals, key=lambda name: (-totals[name], name))


def stacked_bars(
    title: str, per_day: Mapping[str, Mapping[str, int]], scrub: Callable[[str], str]
) -> Markup:
    """``per_day``: day ("2026-12-01") -> series name -> tokens, drawn in day order."""
    days = sorted(per_day)
    names = _top(per_day)
    shown, rest = names[:MAX_SERIES], set(names[MAX_SERIES:])
    if rest:
        shown.append(OTHERS)
    stacks = []
    for day in days:
        values = dict(per_day[day])
        if rest:
            values[OTHERS] = sum(values.pop(name, 0) for name in rest)
        stacks.append([(name, values.get(name, 0)) for name in shown])
    peak = max((sum(v for _, v in stack) for stack in stacks), default=0) or 1
    plot_w, plot_h = WIDTH - _LEFT - 10, HEIGHT - _BOTTOM - _TOP
    step = plot_w / max(1, len(days))
    bar = max(2.0, step * 0.7)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{WIDTH}" '
        f'height="{HEIGHT + 20 * len(shown)}" viewBox="0 0 {WIDTH} {HEIGHT + 20 * len(shown)}">',
        f"<title>{escape(scrub(title))}</title>",
        f'<text x="4" y="{_TOP + 10}" font-size="11" fill="#444">{peak:,}</text>',
        f'<line x1="{_LEFT}" y1="{HEIGHT - _BOTTOM}" x2="{WIDTH - 10}" '
        f'y2="{HEIGHT - _BOTTOM}" stroke="#888"/>',
    ]
    for i, (day, stack) in enumerate(zip(days, stacks, strict=True)):
        x, base = _LEFT + i * step, float(HEIGHT - _BOTTOM)
        for j, (name, value) in enumerate(stack):
            if not value:
                continue
            h = value / peak * plot_h
            base -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{_COLOURS[j % len(_COLOURS)]}"><title>{escape(day)} '
                f"{escape(scrub(name))}: {value:,}</title></rect>"
            )
        if len(days) <= 16 or i % max(1, len(days) // 8) == 0:
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - 10}" font-size="10" fill="#444">'
                f"{escape(day[5:])}</text>"
            )
    for j, name in enumerate(shown):
        y = HEIGHT + 14 + 20 * j
        parts.append(
            f'<rect x="{_LEFT}" y="{y - 10}" width="12" height="12" '
            f'fill="{_COLOURS[j % len(_COLOURS)]}"/>'
            f'<text x="{_LEFT + 18}" y="{y}" font-size="12" fill="#222">'
            f"{escape(scrub(name))}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
