"""Charts as inline SVG (matplotlib, Agg): titled, colour-blind-safe, readable in greyscale."""

from __future__ import annotations

import io
import math
import re

import matplotlib

from bench.report.numbers import human

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Text stays text (<text>, escaped by matplotlib), which keeps the SVG small.
# Okabe-Ito: distinguishable with colour-blindness; hatches keep bars apart in greyscale.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
HATCHES = ["", "//", "..", "xx", "\\\\", "--", "++", "oo"]
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": "accelbench"})


def _svg(fig, alt: str) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    from html import escape

    return svg.replace("<svg ", f'<svg role="img" aria-label="{escape(alt)}" ', 1)


def bars(
    labels: list[str],
    values: list[float],
    lo: list[float | None],
    hi: list[float | None],
    title: str,
    xlabel: str,
    groups: list[str] | None = None,
) -> str:
    """Horizontal bars with CI error bars; ``groups`` picks colour and hatch per bar."""
    n = len(labels)
    fig, ax = plt.subplots(figsize=(8, max(1.6, 0.28 * n + 0.8)))
    keys = list(dict.fromkeys(groups or [""] * n))
    for i, (v, a, b) in enumerate(zip(values, lo, hi)):
        k = keys.index((groups or [""] * n)[i])
        err = [[v - a], [b - v]] if a is not None and b is not None else None
        ax.barh(
            i,
            v,
            color=PALETTE[k % len(PALETTE)],
            hatch=HATCHES[k % len(HATCHES)],
            edgecolor="#333333",
            linewidth=0.5,
            xerr=err,
            capsize=2,
            label=keys[k] if keys[k] and keys[k] not in ax.get_legend_handles_labels()[1] else None,
        )
    ax.set_yticks(range(n), labels)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if groups:  # outside the axes, right of them: never over a bar or its error bar
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, f"{title}: " + "; ".join(f"{lab} {human(v)}" for lab, v in zip(labels, values)))


def scaling(series: dict[str, list[tuple[int, float]]], title: str) -> str:
    """Speed-up over one device vs device count, one line per case family, with the ideal (linear) line.

    Speed-up, not throughput: workloads whose throughputs differ by orders of magnitude share the axis.
    """
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    markers = "osD^v<>p"
    alt = []
    top = 1
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(pts)
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        top = max(top, *xs)
        ax.plot(xs, ys, marker=markers[i % len(markers)], color=PALETTE[i % len(PALETTE)], label=name)
        alt.append(f"{name}: " + ", ".join(f"{x} devices {y:.3g}x" for x, y in pts))
    ax.plot([1, top], [1, top], linestyle=":", color="#555555", label="ideal (linear)")
    ax.set_xlabel("devices")
    ax.set_ylabel("speed-up over 1 device")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(fig, title + ": " + "; ".join(alt))


def along(
    series: dict[str, list[tuple[int, float, float, float]]], title: str, axis: str, walls: dict[str, int] | None = None
) -> str:
    """Median samples/s against a swept axis (log2 x, log y), one line per configuration, its 95% CI as a band.

    ``walls``: a configuration's out-of-memory wall (the first batch that did not fit), a dashed line in its colour.
    """
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    markers = "osD^v<>p"
    alt = []
    for i, (name, pts) in enumerate(series.items()):
        xs, ys, lo, hi = zip(*sorted(pts))
        colour = PALETTE[i % len(PALETTE)]
        ax.plot(xs, ys, marker=markers[i % len(markers)], color=colour, label=name)
        ax.fill_between(xs, lo, hi, color=colour, alpha=0.2, linewidth=0)
        alt.append(f"{name}: " + ", ".join(f"{axis} {x} {human(y)}/s" for x, y in zip(xs, ys)))
        wall = (walls or {}).get(name)
        if wall:
            ax.axvline(wall, color=colour, linestyle="--", linewidth=1, label=f"{name}: out of memory at {wall}")
            alt[-1] += f"; out of memory at {axis} {wall}"
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(axis)
    ax.set_ylabel("samples/s (median, 95% CI band)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(fig, title + ": " + "; ".join(alt))


def heatmap(xs: list[int], ys: list[int], cells: dict, title: str, xlabel: str, ylabel: str) -> str:
    """A ratio over two swept axes: diverging about 1 (log2), the ratio in each cell, hatched where its CI spans 1.

    ``cells``: (x, y) -> (ratio, spans_one); missing cells stay blank (not measured, never 0).
    """
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    grid = np.full((len(ys), len(xs)), np.nan)
    for (x, y), (r, _) in cells.items():
        grid[ys.index(y), xs.index(x)] = math.log2(r)
    span = max(1.0, float(np.nanmax(np.abs(grid)))) if cells else 1.0
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(xs) + 2), max(2.2, 0.6 * len(ys) + 1.2)))
    im = ax.imshow(grid, cmap="PuOr", norm=TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span), aspect="auto")
    alt = []
    for (x, y), (r, spans) in sorted(cells.items()):
        i, j = ys.index(y), xs.index(x)
        ax.text(j, i, f"{'~' if spans else ''}{human(r)}x", ha="center", va="center", fontsize=7)
        if spans:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="#555555", lw=0))
        alt.append(f"{ylabel} {y}, {xlabel} {x}: {'~' if spans else ''}{human(r)}x")
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    bar = fig.colorbar(im, ax=ax, shrink=0.8)
    bar.set_label("log2 of the ratio (0 = equal)")
    return _svg(fig, title + ": " + "; ".join(alt))


def roofline(
    points: dict[str, list[tuple[float, float, int]]],
    peaks: dict[str, float],
    bandwidth_gbps: float | None,
    title: str,
    xlabel: str,
) -> str:
    """Achieved TFLOP/s against arithmetic intensity (log-log), points coloured by batch, under the measured roofs.

    ``points``: a configuration's (FLOP per byte, TFLOP/s, batch); ``peaks``: its measured compute roof
    (TFLOP/s), a dashed line; ``bandwidth_gbps``: the measured memory roof (y = bandwidth x intensity),
    dotted, where the copy probe ran. Markers tell the configurations apart, colour the batch (log2).
    """
    from matplotlib.colors import LogNorm

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    markers = "osD^v<>p"
    batches = [b for pts in points.values() for _, _, b in pts]
    norm = LogNorm(vmin=min(batches), vmax=max(max(batches), min(batches) + 1))
    xs_all = [x for pts in points.values() for x, _, _ in pts]
    lo, hi = min(xs_all) / 4, max(xs_all) * 4
    alt = []
    sc = None
    for i, (name, pts) in enumerate(points.items()):
        xs, ys, bs = zip(*sorted(pts))
        sc = ax.scatter(xs, ys, c=bs, cmap="viridis", norm=norm, marker=markers[i % len(markers)],
                        edgecolors="#333333", linewidths=0.5, label=name, zorder=3)  # fmt: skip
        ax.plot(xs, ys, color="#999999", linewidth=0.8, zorder=2)
        alt.append(
            f"{name}: " + ", ".join(f"batch {b} {human(y)} TFLOP/s at {x:.3g} FLOP/B" for x, y, b in zip(xs, ys, bs))
        )
        peak = peaks.get(name)
        if peak:
            ax.axhline(peak, color="#555555", linestyle=(0, (4, 2 + i)), linewidth=1)
            ax.annotate(f"{name}: measured peak {human(peak)} TFLOP/s", (lo, peak), fontsize=7,
                        xytext=(2, 2), textcoords="offset points")  # fmt: skip
            alt[-1] += f"; measured peak {human(peak)} TFLOP/s"
    if bandwidth_gbps:
        ridge = min(hi, max(peaks.values()) * 1e3 / bandwidth_gbps) if peaks else hi  # up to the highest roof
        ax.plot([lo, ridge], [bandwidth_gbps * lo / 1e3, bandwidth_gbps * ridge / 1e3], color="#555555", linestyle=":",
                linewidth=1.2, label=f"measured bandwidth {human(bandwidth_gbps)} GB/s")  # fmt: skip
        alt.append(f"bandwidth roof {human(bandwidth_gbps)} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    top = max([*peaks.values(), *(y for pts in points.values() for _, y, _ in pts)])
    bottom = min(y for pts in points.values() for _, y, _ in pts)
    ax.set_ylim(bottom / 4, top * 3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("achieved TFLOP/s per device")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.18, 1.0), frameon=False)
    if sc is not None:
        bar = fig.colorbar(sc, ax=ax, shrink=0.8)
        bar.set_label("batch per device")
    return _svg(fig, title + ": " + "; ".join(alt))


def power_trace(traces: dict[str, list[tuple[float, float]]], title: str, idle_w: float | None = None) -> str:
    """Instant power over the measurement window, one line per GPU."""
    fig, ax = plt.subplots(figsize=(6.5, 2.4))
    styles = ["-", "--", "-.", ":"]
    alt = []
    for i, (name, trace) in enumerate(traces.items()):
        ps = [p for _, p in trace]
        ax.plot(
            [t for t, _ in trace],
            ps,
            color=PALETTE[i % len(PALETTE)],
            linestyle=styles[i % 4],
            linewidth=1.1,
            label=name,
        )
        alt.append(f"{name}: {len(ps)} samples, {min(ps):.0f} to {max(ps):.0f} W")
    if idle_w is not None:
        ax.axhline(idle_w, linestyle="--", color="#555555", linewidth=0.8, label=f"idle {idle_w:.0f} W")
    if len(traces) <= 8:
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_xlabel("seconds into the timed window")
    ax.set_ylabel("W")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _svg(fig, f"{title}: " + "; ".join(alt))


def latency_vs_rate(
    series: dict[str, list[tuple[float, float | None, float | None]]],
    slo_ms: float,
    found: dict[str, float | None],
    title: str,
) -> str:
    """p50 (dashed) and p99 (solid) latency against the served request rate, one colour per case.

    The SLO is a horizontal line; a ring marks each case's rate at the SLO. Log axes: a CPU and a
    GPU differ by orders of magnitude in both.
    """
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    markers = "osD^v<>p"
    alt = []
    for i, (name, pts) in enumerate(series.items()):
        nan = float("nan")  # a missing p50 is a gap in its line
        ok = sorted((x, nan if p50 is None else p50, p99) for x, p50, p99 in pts if x > 0 and p99 is not None)
        if not ok:
            continue
        colour, m = PALETTE[i % len(PALETTE)], markers[i % len(markers)]
        xs = [p[0] for p in ok]
        ax.plot(xs, [p[2] for p in ok], marker=m, color=colour, label=f"{name} p99", linewidth=1.2)
        p50 = [p[1] for p in ok]
        has_p50 = any(v == v for v in p50)  # a legend entry only for a line that is drawn
        ax.plot(
            xs,
            p50,
            marker=m,
            color=colour,
            linestyle="--",
            linewidth=0.8,
            alpha=0.7,
            label=f"{name} p50" if has_p50 else None,
        )
        rate = found.get(name)
        at = [p for p in ok if rate and abs(p[0] / rate - 1) < 0.1]
        if rate and at:
            ax.plot([at[-1][0]], [at[-1][2]], marker="o", markersize=11, fillstyle="none", color=colour)
        alt.append(f"{name}: " + (f"{human(rate)} req/s at the SLO" if rate else "no rate meets the SLO"))
    ax.axhline(slo_ms, color="#D55E00", linestyle=":", linewidth=1.2, label=f"SLO {slo_ms:g} ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("requests/s served")
    ax.set_ylabel("latency, ms (p99 solid, p50 dashed)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(fig, f"{title}: " + "; ".join(alt))


def sharing(series: dict[str, list[tuple[int, float, float | None]]], title: str) -> str:
    """STP and the worst slowdown against the tenant count N, one line per case; STP's ideal (N) and break-even (1)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.2))
    markers = "osD^v<>p"
    alt = []
    top = 2
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted([(1, 1.0, 1.0), *pts])  # one tenant alone: STP 1, no slowdown
        ns = [p[0] for p in pts]
        top = max(top, *ns)
        style = {"marker": markers[i % len(markers)], "color": PALETTE[i % len(PALETTE)], "label": name}
        a.plot(ns, [p[1] for p in pts], **style)
        b.plot([n for n, _, w in pts if w is not None], [w for _, _, w in pts if w is not None], **style)
        alt.append(f"{name}: " + ", ".join(f"N={n} STP {s:.3g} worst slowdown {human(w)}x" for n, s, w in pts[1:]))
    a.plot([1, top], [1, top], linestyle=":", color="#555555", label="no interference (STP = N)")
    a.axhline(1, linestyle="--", color="#999999", linewidth=0.8, label="one job's work (STP = 1)")
    a.set(xlabel="tenants N", ylabel="system throughput STP", title="STP")
    b.set(xlabel="tenants N", ylabel="worst slowdown (x)", title="worst slowdown")
    ticks = sorted({1, *(n for pts in series.values() for n, _, _ in pts)})
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.set_xticks(ticks)  # tenant counts are whole
    fig.suptitle(title, y=1.04)
    a.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.22), frameon=False, ncol=2)
    return _svg(fig, title + ": " + "; ".join(alt))
