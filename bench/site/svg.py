"""Tiny hand-made SVG for the site (sparklines, trend panels): fast for thousands of panels, no JS.

Every label that comes from results (case ids, night ids, states) is escaped here, because the
SVG is handed to the templates as trusted markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from bench.history.detect import Point
from bench.report.numbers import human

COLOURS = {
    "ok": "#0072B2",
    "insufficient": "#56B4E9",
    "improved": "#009E73",
    "suspect": "#E69F00",
    "confirmed": "#D55E00",
    "excluded": "#999999",
    "busy": "#CC79A7",
}


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or abs(hi) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def sparkline(values: Sequence[float | None], label: str, width: int = 120, height: int = 28) -> str:
    """A line of the last nights' values, the latest as a dot; gaps where not measured."""
    pts = [(i, v) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    alt = escape(f"{label}: " + (f"{len(pts)} nights, latest {human(pts[-1][1])}" if pts else "no data"))
    if len(pts) < 2:
        return f'<svg role="img" aria-label="{alt}" width="{width}" height="{height}"><title>{alt}</title></svg>'
    ys = [v for _, v in pts]
    fx = _scale(0, max(1, len(values) - 1), 2, width - 4)
    fy = _scale(min(ys), max(ys), height - 3, 3)
    line = " ".join(f"{fx(i):.1f},{fy(v):.1f}" for i, v in pts)
    lx, ly = fx(pts[-1][0]), fy(pts[-1][1])
    return (
        f'<svg role="img" aria-label="{alt}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f"<title>{alt}</title>"
        f'<polyline fill="none" stroke="#0072B2" stroke-width="1.3" points="{line}"/>'
        f'<circle cx="{lx:.1f}" cy="{ly:.1f}" r="2.5" fill="#D55E00"/></svg>'
    )


def trend(
    points: Sequence[Point],
    title: str,
    links: dict[str, str],
    markers: Sequence[int] = (),
    width: int = 380,
    height: int = 150,
) -> str:
    """One case over nights as a trend panel.

    CI whiskers, the judge's band shaded, points coloured by state, change points (dashed), new
    baselines (solid: fingerprint change or accepted shift); a point links to its night's report
    where there is one.
    """
    vals = [p.value for p in points]
    lows = [p.ci_low if p.ci_low is not None else p.value for p in points]
    highs = [p.ci_high if p.ci_high is not None else p.value for p in points]
    band = [(p.center - p.half, p.center + p.half) for p in points if p.center is not None and p.half is not None]
    ys = [v for v in (*lows, *highs) if v is not None] + [y for b in band for y in b]
    alt = escape(f"{title}: {sum(v is not None for v in vals)} nights")
    if not ys:
        return f'<svg role="img" aria-label="{alt}" width="{width}" height="40"><title>{alt}</title><text x="4" y="20" font-size="11">no measured nights</text></svg>'
    left, right, top, bottom = 46, width - 6, 16, height - 18
    fx = _scale(0, max(1, len(points) - 1), left + 4, right - 4)
    lo, hi = min(ys), max(ys)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.02 or 1
    fy = _scale(lo - pad, hi + pad, bottom, top)
    # a panel whose points link to reports is no image (an image's content is hidden from assistive
    # technology, links included): it keeps SVG's own role, a document its links are part of
    role = "" if any(links.get(p.night_id) for p in points if p.value is not None) else ' role="img"'
    out = [
        f'<svg{role} aria-label="{alt}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-size="10">',
        f"<title>{alt}</title>",
        f'<text x="{left}" y="11" font-weight="600">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#bbb"/>',
        f'<text x="{left - 3}" y="{top + 8}" text-anchor="end">{escape(_short(hi + pad))}</text>',
        f'<text x="{left - 3}" y="{bottom}" text-anchor="end">{escape(_short(lo - pad))}</text>',
    ]
    segs: list[list[tuple[float, float, float]]] = [[]]
    for i, p in enumerate(points):
        if p.segment_start:
            segs.append([])
        if p.center is not None and p.half is not None:
            segs[-1].append((fx(i), fy(p.center + p.half), fy(p.center - p.half)))
    for seg in segs:
        if len(seg) >= 2:
            upper = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in seg)
            lower = " ".join(f"{x:.1f},{y:.1f}" for x, _, y in reversed(seg))
            out.append(f'<polygon points="{upper} {lower}" fill="#0072B2" fill-opacity="0.12" stroke="none"/>')
    for i, p in enumerate(points):
        x = fx(i)
        if p.segment_start:
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}" stroke="#333" stroke-width="1">'
                f"<title>{escape('new baseline: ' + p.segment_start + ' at ' + p.night_id)}</title></line>"
            )
    for m in markers:
        if 0 <= m < len(points):
            x = fx(m)
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}" stroke="#CC79A7" stroke-dasharray="3,2">'
                f"<title>{escape('change point at ' + points[m].night_id)}</title></line>"
            )
    for i, p in enumerate(points):
        if p.value is None:
            continue
        x, y = fx(i), fy(p.value)
        colour = COLOURS.get(p.state, "#0072B2")
        tip = escape(f"{p.night_id}: {human(p.value)} [{human(lows[i])}, {human(highs[i])}] {p.state}")
        dot = (
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{fy(lows[i]):.1f}" y2="{fy(highs[i]):.1f}" stroke="{colour}" stroke-width="0.8"/>'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{3 if p.state in ("suspect", "confirmed") else 2}" '
            f'fill="{"none" if p.state == "excluded" else colour}" stroke="{colour}"><title>{tip}</title></circle>'
        )
        link = links.get(p.night_id)
        out.append(f'<a href="{escape(link)}" aria-label="report of {tip}">{dot}</a>' if link else dot)
    first, last = points[0].night_id, points[-1].night_id
    out.append(f'<text x="{left}" y="{height - 4}">{escape(first)}</text>')
    out.append(f'<text x="{right}" y="{height - 4}" text-anchor="end">{escape(last)}</text>')
    out.append("</svg>")
    return "".join(out)


def _short(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"
