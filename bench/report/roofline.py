"""The roofline of a batch sweep: each point's achieved TFLOP/s under the run's measured roofs, and its share of peak.

Shown for runs with ``--sweep batch=...`` (``bench.report.sweeps`` draws the lines). The compute
roof is the matmul probe in the case's precision, the memory roof the copy probe
(``bench.loop.best_copy_rate``); both are measured in the run, never typed in. The x axis is a
step's weight intensity (ParaDnn's convention), stated where shown.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd
from tabulate import tabulate

from bench.cases import Case
from bench.report import charts
from bench.report.analysis import RunData
from bench.report.html import Cell, Para, Svg, Table
from bench.report.mdtext import md
from bench.report.numbers import human
from bench.report.sweeps import Line, axes, lines, number, where_of

WEIGHT_BYTES = 4  # bytes per parameter: every precision here keeps fp32 variables (Keras' mixed policies, autocast)

NOTE = (
    "Roofline: each point is one case's achieved TFLOP/s per device (analytic FLOPs, as executed) against its "
    f"weight intensity, a step's FLOPs per device over the model's parameter bytes ({WEIGHT_BYTES} B each, read "
    "once per step: ParaDnn's convention). Activations, gradients and optimizer state are not counted, so a "
    "point's true intensity is lower than shown. Roofs are measured in this run: the compute roof is the matmul "
    "probe in the case's precision, the memory roof the copy probe (y = x + 1 over 256 MiB, read + write "
    "counted). A point far below both roofs is bound by fixed per-step cost (see t0 in the fits above). Share "
    "of peak: achieved over the measured peak (model FLOPs as executed over the probe's matmul rate); a share "
    "above 100% (marked !) says a FLOP count or the probe is off, never that the device beat its roof."
)

HEADERS = [
    "where",
    "configuration",
    "measured peak (TFLOP/s per device)",
    "measured bandwidth (GB/s)",
    "ridge (FLOP per weight byte)",
    "share of the measured peak at each batch",
]

XLABEL = "FLOP per weight byte (a step's, per device)"


@dataclass(frozen=True)
class Roof:
    """One point's place on the roofline: achieved TFLOP/s per device under its measured roofs."""

    batch: int
    tflops: float | None  # achieved, per device
    peak: float | None  # the matmul probe in the case's precision, per device
    bandwidth_gbps: float | None  # the copy probe, per device
    intensity: float | None  # FLOP per weight byte (WEIGHT_BYTES a parameter)
    share: float | None  # achieved / measured peak


def _roof(r: pd.Series) -> Roof:
    case = Case.of(r)
    devices = max(1, case.physical_devices)
    achieved, fps, params, peak = (
        number(r.get(k)) for k in ("achieved_tflops", "flops_per_sample", "params", "peak_tflops_measured")
    )
    return Roof(
        case.per_replica_batch,
        achieved / devices if achieved else None,
        peak / devices if peak else None,
        number(r.get("mem_bw_gbps_per_device")),
        fps * case.per_replica_batch / (params * WEIGHT_BYTES) if fps and params else None,
        number(r.get("mfu_measured")),
    )


def _share(share: float | None) -> str:
    if share is None:
        return "-"
    return f"{100 * share:.3g}%" + ("!" if share > 1 else "")  # above the roof: a FLOP count or probe is off


def _median(values: list[float]) -> float | None:
    return statistics.median_high(values) if values else None  # a measured value, never a mean of two


def points(run: RunData) -> list[tuple[Line, list[Roof]]]:
    """Each batch line with its points' roofline facts (empty where the run swept no batch)."""
    if "batch" not in axes(run):
        return []
    by_id = {str(r["case_id"]): r for _, r in run.table.iterrows()}
    return [(line, [_roof(by_id[cid]) for cid in line.ids]) for line in lines(run, "batch")]


def charts_of(
    run: RunData,
) -> list[tuple[str, dict[str, list[tuple[float, float, int]]], dict[str, float], float | None]]:
    """Per batch-swept group, device and backend: (title, points by configuration, compute roofs, memory roof)."""
    return _charts(points(run))


def _charts(lined: list[tuple[Line, list[Roof]]]) -> list:
    found: dict[tuple, tuple[str, dict, dict, list]] = {}
    for line, roofs in lined:
        pts = [(p.intensity, p.tflops, p.batch) for p in roofs if p.intensity and p.tflops]
        if len(pts) < 2:
            continue
        device, backend = line.parts["device"], line.parts["backend"]
        title = f"{where_of(line, 'batch')} on {device}{' ' + backend if backend else ''}: roofline"
        _, by_label, peaks, bws = found.setdefault((line.group, device, backend), (title, {}, {}, []))
        by_label[line.label] = pts
        peak = _median([p.peak for p in roofs if p.peak])
        if peak:
            peaks[line.label] = peak
        bws += [p.bandwidth_gbps for p in roofs if p.bandwidth_gbps]
    return [(t, pts, peaks, _median(bws)) for t, pts, peaks, bws in found.values()]


def rows(run: RunData) -> list[list[str]]:
    """Per batch line: where, configuration, measured peak, bandwidth, ridge point, share of peak at each batch."""
    return _rows(points(run))


def _rows(lined: list[tuple[Line, list[Roof]]]) -> list[list[str]]:
    out = []
    for line, roofs in lined:
        peak = _median([p.peak for p in roofs if p.peak])
        bw = _median([p.bandwidth_gbps for p in roofs if p.bandwidth_gbps])
        ridge = f"{1e3 * peak / bw:.3g}" if peak and bw else "-"
        shares = " ".join(f"{p.batch}:{_share(p.share)}" for p in roofs)
        out.append([where_of(line, "batch"), line.label, human(peak), human(bw), ridge, shares])
    return out


def section(run: RunData) -> list:
    """The roofline charts and the share-of-peak table (HTML blocks; empty where the run swept no batch)."""
    lined = points(run)  # the lines once, for the charts and the table
    blocks: list = [Svg(charts.roofline(pts, peaks, bw, title, XLABEL)) for title, pts, peaks, bw in _charts(lined)]
    found = _rows(lined)
    if found:
        cells = [[*r[:2], *(Cell(v, cls="num") for v in r[2:5]), Cell(r[5])] for r in found]
        blocks += [Table(HEADERS, cells, label="roofline and share of peak"), Para(NOTE, small=True)]
    return blocks


def markdown(run: RunData) -> list[str]:
    """The share-of-peak table in Markdown (empty where the run swept no batch)."""
    found = rows(run)
    if not found:
        return []
    table = tabulate([[md(v) for v in r] for r in found], headers=HEADERS, tablefmt="github")
    return ["## Share of the measured peak along batch", "", table, "", NOTE, ""]


def console(run: RunData) -> list[str]:
    """One line per batch line: its share of the measured peak at each batch."""
    return [f"share of the measured peak: {r[0]} {r[1]}: {r[5]}" for r in rows(run)]
