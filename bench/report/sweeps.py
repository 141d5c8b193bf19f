"""The sweep section: throughput along each swept axis, and where one configuration starts to beat another.

Shown for runs with ``--sweep`` (``bench.sweep``). Lines: the cases that differ only in the swept
axis (batch, or a size knob at a fixed batch). Pairs (``bench.crossover``): each device against
the CPU at the same precision, and each precision against fp32 on the same device, over the
points both measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from tabulate import tabulate

from bench import crossover, stats, sweep
from bench.batchsearch import HEADROOM
from bench.cases import Case
from bench.report import charts
from bench.report.analysis import RunData
from bench.report.html import Cell, Para, Svg, Table
from bench.report.mdtext import md
from bench.report.numbers import human

NOTE = (
    "Crossover: S = A's median samples/s over B's at each point, with its bootstrap 95% CI. Bracket: the last "
    "point whose CI lies below 1 before the first whose CI lies above 1; the estimate interpolates log S "
    "against log x inside it, and its 95% interval resamples every case's rounds (within-worker noise: "
    "a rerun may land further, see the rerun interval). Fit: each side's median step time as t0 + c x batch "
    "(t0: fixed cost per step, c: cost per sample), and the batch where the fits meet. Each point's own CI: "
    "about 1 in 20 points (or heat-map cells) may be marked clear of 1 by chance. Heat map: the ratio over "
    "batch x size on a diverging scale about 1 (log2), hatched where its CI spans 1."
)


@dataclass(frozen=True)
class Line:
    """One configuration's points along a swept axis: x, median samples/s, CI, per-round throughput."""

    group: tuple  # workload, mode, and every other fixed part
    label: str  # device, backend, precision, XLA
    parts: dict
    xs: tuple[int, ...]
    medians: tuple[float, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    rounds: tuple[list[float], ...]
    energy: tuple[float | None, ...]  # J per sample where the case's energy was measured
    energy_reason: str  # why not, where a point has none
    without_batch: str = ""  # along batch: the cases' id less its batch (what a largest-batch search is keyed by)
    ids: tuple[str, ...] = ()  # each point's case id


def axes(run: RunData) -> list[str]:
    """The run's swept axes (``--sweep`` names, in order)."""
    opts = run.doc.get("run", {}).get("options") or {}
    return [str(s).partition("=")[0].strip().lower() for s in opts.get("sweeps") or []]


def _measured(run: RunData) -> pd.DataFrame:
    """The run's measured train and infer cases, each alone on its device (what a sweep's lines hold)."""
    t = run.table
    return t[(t["status"] == "ok") & t["mode"].isin(["train", "infer"]) & (t["tenants"].fillna(1) == 1)]


def lines(run: RunData, axis: str) -> list[Line]:
    """The measured train and infer cases along ``axis``, one line per configuration with two or more points."""
    found: dict[tuple, dict] = {}
    for _, r in _measured(run).iterrows():
        case = Case.of(r)
        parts = case.id_parts()
        fixed: tuple
        if axis == "batch":
            x, fixed = case.per_replica_batch, tuple(case.knobs)
        else:
            col = f"size_{axis}"
            if col not in r or pd.isna(r[col]):
                continue
            x, fixed = int(r[col]), (tuple(kv for kv in case.knobs if kv[0] != axis), parts["batch"])
        group = (parts["workload"], parts["mode"], fixed)
        entry = found.setdefault((group, sweep.label(parts)), {"parts": parts, "pts": {}})
        entry["pts"][x] = (r, run.samples.get(str(r["case_id"])) or [])
    out = []
    for (group, label), e in found.items():
        xs = sorted(e["pts"])
        if len(xs) < 2:
            continue
        rows = [e["pts"][x][0] for x in xs]
        out.append(
            Line(
                group,
                label,
                e["parts"],
                tuple(xs),
                tuple(float(r["samples_per_s"]) for r in rows),
                tuple(float(r["samples_per_s_ci_low"]) for r in rows),
                tuple(float(r["samples_per_s_ci_high"]) for r in rows),
                tuple(e["pts"][x][1] for x in xs),
                tuple(number(r.get("energy_j_per_sample")) for r in rows),
                next(
                    (str(r.get(k)) for r in rows for k in ("energy_reason", "cpu_energy_reason") if _text(r.get(k))), ""
                ),
                Case.of(rows[0]).id_without("batch") if axis == "batch" else "",
                tuple(str(r["case_id"]) for r in rows),
            )
        )
    return out


@dataclass(frozen=True)
class Largest:
    """One case's largest-batch search, as the run planned it (``--batch-size max``, ``--sweep batch=...,max``)."""

    case: str  # its id less the batch
    safe: int | None  # the batch measured (largest that fit with its peak within the headroom)
    max_ok: int | None  # the largest batch that fit
    first_fail: int | None  # the smallest that did not (out of memory), None where the search never failed
    found: str  # what the search found, in words


def largest(run: RunData) -> list[Largest]:
    """The run's largest-batch answers (empty where no case was asked at max)."""
    opts = run.doc.get("run", {}).get("options") or {}
    out = []
    for e in opts.get("max_batches") or []:
        if isinstance(e, (list, tuple)) and len(e) == 5:
            safe, max_ok, first_fail = (int(v) if isinstance(v, int) else None for v in e[1:4])
            out.append(Largest(str(e[0]), safe, max_ok, first_fail, str(e[4])))
    return out


LARGEST_NOTE = (
    f"Each probe is one fresh worker at one batch, doubling then bisecting; out of memory is told apart from "
    f"other failures. The batch measured keeps its peak memory within {HEADROOM:.0%} of the pool (the device's "
    "memory on a GPU, --memory-limit on a CPU), so it may lie below the largest that fit. On the charts the "
    "dashed line marks the first failure (the out-of-memory wall) in the line's colour."
)


def _batch(v: int | None) -> str:
    return "-" if v is None else str(v)


def largest_section(run: RunData) -> list:
    """The largest-batch table (HTML blocks; empty where no case was asked at max)."""
    found = largest(run)
    if not found:
        return []
    table = [
        [
            e.case,
            Cell(_batch(e.max_ok), cls="num"),
            Cell(_batch(e.first_fail), cls="num"),
            Cell(_batch(e.safe), cls="num"),
            e.found,
        ]
        for e in found
    ]
    headers = ["case (less its batch)", "largest that fit", "first failure", "measured at", "search"]
    return [Table(headers, table, label="largest batches"), Para(LARGEST_NOTE, small=True)]


def _walls(run: RunData, mine: list[Line]) -> dict[str, int]:
    """Each line's out-of-memory wall (its search's first failure), by label."""
    fails = {e.case: e.first_fail for e in largest(run) if e.first_fail}
    return {line.label: fails[line.without_batch] for line in mine if line.without_batch in fails}


def pairs(found: list[Line], axis: str) -> list[tuple[Line, Line, crossover.Crossover]]:
    """Each device against the CPU (same precision), each precision against fp32 (same device): their crossover."""
    out = []
    for a in found:
        for b in found:
            if a is b or a.group != b.group or not sweep.paired(a.parts, b.parts):
                continue
            xs = [x for x in a.xs if x in b.xs and a.rounds[a.xs.index(x)] and b.rounds[b.xs.index(x)]]
            if len(xs) < 2:
                continue
            ra = [a.rounds[a.xs.index(x)] for x in xs]
            rb = [b.rounds[b.xs.index(x)] for x in xs]
            out.append((a, b, crossover.analyse(xs, ra, rb, batch_axis=axis == "batch")))
    return out


def number(v: object) -> float | None:
    """A positive, finite figure, else None (not measured)."""
    return float(v) if isinstance(v, (int, float)) and v == v and v > 0 else None  # type: ignore[operator]


def _text(v: object) -> bool:
    return isinstance(v, str) and bool(v)


def energy(a: Line, b: Line, axis: str) -> str:
    """Where A's energy per sample falls below B's, from each case's one reading (no CI), or why it cannot be said."""
    xs = [x for x in a.xs if x in b.xs]
    pairs_ = [(x, a.energy[a.xs.index(x)], b.energy[b.xs.index(x)]) for x in xs]
    if any(ea is None or eb is None for _, ea, eb in pairs_):
        why = "; ".join(dict.fromkeys(w for w in (a.energy_reason, b.energy_reason) if w)) or "not measured"
        return f"unavailable: {why}"
    less = [x for x, ea, eb in pairs_ if ea < eb]  # type: ignore[operator]
    if not less:
        return f"{a.label} uses more energy per sample at every tested {axis} (one reading per case, no CI)"
    if less[0] == xs[0] and len(less) == len(xs):
        return f"{a.label} uses less energy per sample at every tested {axis} (one reading per case, no CI)"
    return f"{a.label} uses less energy per sample from {axis} {less[0]} (one reading per case, no CI)"


def heatmaps(run: RunData) -> list[tuple[str, list[int], list[int], dict]]:
    """A full grid of batch x a size knob: each pair's ratio in every cell both measured (title, xs, ys, cells)."""
    knobs = [a for a in axes(run) if a != "batch"]
    opts = run.doc.get("run", {}).get("options") or {}
    if "batch" not in axes(run) or not knobs or opts.get("grid") != "full":
        return []
    knob = knobs[0]
    configs: dict[tuple, tuple[dict, dict]] = {}  # (workload, mode, label) -> (parts, (batch, knob value) -> rounds)
    for _, r in _measured(run).iterrows():
        case, col = Case.of(r), f"size_{knob}"
        if col not in r or pd.isna(r[col]) or any(k != knob for k, _ in case.knobs):
            continue
        parts = case.id_parts()
        _, cells_of = configs.setdefault((parts["workload"], parts["mode"], sweep.label(parts)), (parts, {}))
        cells_of[(case.per_replica_batch, int(r[col]))] = run.samples.get(str(r["case_id"])) or []
    out = []
    for a, (pa, ca) in configs.items():
        for b, (pb, cb) in configs.items():
            if a[:2] != b[:2] or not sweep.paired(pa, pb):
                continue
            cells = {}
            for xy in ca.keys() & cb.keys():
                if ca[xy] and cb[xy]:
                    ratio = stats.ratio_of_medians(ca[xy], cb[xy])
                    cells[xy] = (ratio.value, ratio.spans_one)
            if len(cells) >= 2:
                xs = sorted({x for x, _ in cells})
                ys = sorted({y for _, y in cells})
                out.append((f"{a[0]} {a[1]}: {a[2]} / {b[2]}", xs, ys, cells))
    return out


def where_of(line: Line, axis: str) -> str:
    """Where a line lies: its workload, mode and what is held fixed along ``axis``."""
    workload, mode, fixed = line.group
    if axis == "batch":
        size = ", ".join(f"{k} {v}" for k, v in fixed) or "profile size"
    else:
        knobs, batch = fixed
        size = ", ".join([*(f"{k} {v}" for k, v in knobs), batch])
    return f"{workload} {mode} ({size})"


def _fit(x: crossover.Crossover, i: int) -> str:
    if not x.fits:
        return "-"
    f = x.fits[i]
    return f"{1e3 * f.t0_s:.3g} ms + {1e6 * f.c_s:.3g} us/sample"


def rows(run: RunData) -> list[tuple[str, Line, Line, crossover.Crossover]]:
    """(axis, A, B, crossover) of every pair along every swept axis."""
    return [(axis, a, b, x) for axis in axes(run) for a, b, x in pairs(lines(run, axis), axis)]


def stopped(run: RunData) -> list[tuple[str, str]]:
    """The points a batch sweep left unmeasured once its crossings were answered: (case id, why)."""
    t = run.table
    left = t[t["status"] == "skipped"].sort_values("per_replica_batch", kind="stable")
    return [(str(r["case_id"]), str(r["reason"])) for _, r in left.iterrows()]


def section(run: RunData) -> list:
    """Charts of throughput along each axis and the crossover table (HTML blocks)."""
    blocks: list = []
    left = stopped(run)
    if left:
        blocks.append(
            Para(
                f"{len(left)} higher batch point{'s' if len(left) > 1 else ''} not measured: "
                + "; ".join(f"{cid} ({why})" for cid, why in left)
                + ". Run with --every-point to measure them all.",
                cls="na",
            )
        )
    found_pairs = []
    for axis in axes(run):
        found = lines(run, axis)
        if not found:
            blocks.append(Para(f"No configuration was measured at two or more {axis} points.", cls="na"))
            continue
        found_pairs += [(axis, a, b, x) for a, b, x in pairs(found, axis)]
        for group in dict.fromkeys(line.group for line in found):
            mine = [line for line in found if line.group == group]
            title = f"{where_of(mine[0], axis)}: samples/s against {axis}"
            series = {line.label: list(zip(line.xs, line.medians, line.lows, line.highs)) for line in mine}
            walls = _walls(run, mine) if axis == "batch" else {}
            blocks.append(Svg(charts.along(series, title, axis, walls)))
    for title, xs, ys, cells in heatmaps(run):
        knob = next(a for a in axes(run) if a != "batch")
        blocks.append(Svg(charts.heatmap(xs, ys, cells, title, "batch", knob)))
    table = []
    for axis, a, b, x in found_pairs:
        model = "-" if x.model_x is None else f"{x.model_x:.3g}"
        table.append(
            [
                where_of(a, axis),
                f"{a.label} vs {b.label}",
                Cell(" ".join(f"{v}:{'~' if r.spans_one else ''}{human(r.value)}x" for v, r in zip(x.xs, x.ratios))),
                Cell(x.sentence(a.label, b.label, axis), cls="warn" if x.non_monotone else ""),
                Cell(_fit(x, 0), cls="num"),
                Cell(_fit(x, 1), cls="num"),
                Cell(model, cls="num"),
                Cell(energy(a, b, axis)),
            ]
        )
    if table:
        headers = [
            "where",
            "A vs B",
            "A / B at each point",
            "crossover [95% CI]",
            "fit A",
            "fit B",
            "fits meet at",
            "energy per sample",
        ]
        blocks += [Table(headers, table, label="crossovers"), Para(NOTE, small=True)]
    elif axes(run):
        blocks.append(
            Para("No pair (a device and the CPU, or a precision and fp32) shares two swept points.", cls="na")
        )
    return blocks


def largest_markdown(run: RunData) -> list[str]:
    """The largest-batch table in Markdown (empty where no case was asked at max)."""
    found = largest(run)
    if not found:
        return []
    table = [[md(e.case), _batch(e.max_ok), _batch(e.first_fail), _batch(e.safe), md(e.found)] for e in found]
    headers = ["case (less its batch)", "largest that fit", "first failure", "measured at", "search"]
    return ["## Largest batch that fits", "", tabulate(table, headers=headers, tablefmt="github"), "", LARGEST_NOTE, ""]


def markdown(run: RunData) -> list[str]:
    """The crossover table in Markdown (empty where the run swept nothing)."""
    found = rows(run)
    table = [
        [
            md(where_of(a, axis)),
            md(f"{a.label} vs {b.label}"),
            md(x.sentence(a.label, b.label, axis)),
            md(energy(a, b, axis)),
        ]
        for axis, a, b, x in found
    ]
    out = (
        [
            "## Crossovers along the swept axes",
            "",
            tabulate(table, headers=["where", "A vs B", "crossover", "energy per sample"], tablefmt="github"),
            "",
        ]
        if found
        else []
    )
    return out


def console(run: RunData) -> list[str]:
    """One line per crossover, for the console table."""
    out = [f"crossover: {where_of(a, axis)}: {x.sentence(a.label, b.label, axis)}" for axis, a, b, x in rows(run)]
    out += [f"not measured: {cid}: {why}" for cid, why in stopped(run)]
    return out + [f"largest batch: {e.case}: measured at {_batch(e.safe)} ({e.found})" for e in largest(run)]
