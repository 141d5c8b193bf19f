"""The report's speed sections: headline, speed-up matrix, throughput, scaling, gains, cases that did not run.

Plain data (tables of cells, paragraphs, charts) for the templates, which escape every value.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from bench import stats
from bench.report import analysis, charts
from bench.report.analysis import RunData, fmt_ratio
from bench.report.console import case_note
from bench.report.html import Cell, Para, Svg, Table, na, num
from bench.report.numbers import human
from bench.telemetry.derive import BUSY_OTHER_CPU_PCT

MAX_BARS = 40


def _x(v: float) -> str:
    return human(v)


def _speed_cell(r: object, case: str | None = None, big: bool = False) -> Cell:
    if not isinstance(r, stats.Ratio):
        return na("not measured")
    mark = "~" if r.spans_one else ""
    return Cell(
        f"{mark}{_x(r.value)}x", cls="big num" if big else "num", after=f"[{_x(r.ci_low)}-{_x(r.ci_high)}]", below=case
    )


def gpu_measured(run: RunData) -> bool:
    """Whether any GPU case of the run was measured."""
    t = run.table
    return bool(((t["status"] == "ok") & (t["device_kind"] == "gpu")).any())


def _energy(h: dict) -> str:
    j = h.get("energy_j_per_sample")
    return f", {human(j)} J/sample" if j is not None and not pd.isna(j) else ""


def _absolute(h: dict) -> str:
    return f"{h['best_case']}: {human(h['samples_per_s'])} samples/s{_energy(h)}"


def headline_text(h: dict) -> str:
    """The best-configuration cell as one line (the Markdown and console reports)."""
    if not h["baseline_measured"]:
        return f"{human(h['samples_per_s'])} samples/s{_energy(h)} (no CPU fp32 case: no speed-up)"
    if h["best_case"] == h["baseline_case"]:
        if h["gpu_not_run"]:
            return f"1x (baseline; {len(h['gpu_not_run'])} planned GPU case(s) did not run)"
        return "1x (baseline: CPU fp32 itself is the fastest)"
    return fmt_ratio(h["speedup"]) + (f" ({len(h['not_run'])} planned cases did not run)" if h["not_run"] else "")


# the headline's GPU columns: which planned device labels each one covers
GPU_COLUMNS = {
    "gpu1_fp32": lambda dev, cid: dev == "gpu1" and "-fp32-" in cid,
    "gpu1_best": lambda dev, cid: dev == "gpu1",
    "multi_best": lambda dev, cid: dev.startswith("gpu") and dev != "gpu1",
}


def _gpu_cell(h: dict, column: str, run: RunData) -> Cell:
    """A GPU column's speed-up, or what stands in its place.

    Without a CPU fp32 case the case's absolute throughput; "not run" where its planned cases have
    no record, "not planned" where none was planned.
    """
    case, r = h[column]
    if isinstance(r, stats.Ratio):
        return _speed_cell(r, case)
    if case is not None:  # measured, with no CPU fp32 case to hold it against
        return Cell(f"{human(run.samples_median(case))}/s", cls="num", below=f"{case}; no CPU fp32 case")
    covers = GPU_COLUMNS[column]
    if any(covers(c.split("-")[2], c) for c in h["gpu_not_run"]):
        return na("not run")
    planned = run.doc.get("run", {}).get("planned") or []
    prefix = f"{h['workload']}-{h['mode']}-"
    if planned and not any(c.startswith(prefix) and covers(c.split("-")[2], c) for c in planned):
        return na("not planned")
    return na("not measured")


def _unstable(run: RunData, *case_ids: str) -> str:
    """``; baseline unstable (CV 12.3%)`` for each of the cases flagged unstable, as the matrix marks them."""
    t = run.table.set_index("case_id")
    out = ""
    for role, cid in zip(("", "baseline "), case_ids):
        if cid in t.index and bool(t.at[cid, "unstable"]):
            out += f"; {role}unstable (CV {100 * float(t.at[cid, 'step_time_cv']):.1f}%)"
    return out


def _best_cell(h: dict, run: RunData) -> Cell:
    """The best configuration: its speed-up, or its absolute figure where no CPU fp32 case ran.

    Never a claim that a planned case which did not run could change.
    """
    if not h["baseline_measured"]:
        return Cell(
            f"{human(h['samples_per_s'])} samples/s",
            cls="big num",
            below=f"{h['best_case']}{_energy(h)}. No CPU fp32 case in this run, so no speed-up",
        )
    if h["best_case"] == h["baseline_case"]:
        if h["gpu_not_run"]:
            return Cell(
                "1x (baseline)",
                cls="big num",
                below=f"only the CPU was measured: {len(h['gpu_not_run'])} planned GPU case(s) did not run",
            )
        return Cell("1x (baseline)", cls="big num", below=f"CPU fp32 itself is the fastest: {_absolute(h)}")
    below = _absolute(h) + _unstable(run, h["best_case"], h["baseline_case"])
    if h["not_run"]:
        below += f"; of the cases measured ({len(h['not_run'])} planned did not run)"
    return _speed_cell(h["speedup"], below, big=True)


def headline(runs: list[RunData]) -> list:
    """The headline table per run: the best configuration against CPU fp32.

    GPU columns where a GPU was measured or planned; a run without a CPU fp32 case shows absolute figures.
    """
    blocks: list = []
    for run in runs:
        rows_h = analysis.headline(run)
        gpu = gpu_measured(run) or any(h["gpu_not_run"] for h in rows_h)
        rows: list[list] = []
        for h in rows_h:
            gpu_cells = [_gpu_cell(h, column, run) for column in GPU_COLUMNS]
            rows.append([h["workload"], h["mode"], *(gpu_cells if gpu else []), _best_cell(h, run)])
        gm, scope = analysis.geomean_headline(run)
        rows.append(
            [
                Cell("geometric mean", cls="big"),
                "",
                *([""] * 3 if gpu else []),
                Cell(f"{_x(gm)}x", cls="big num", below=scope) if gm else na(scope),
            ]
        )
        if len(runs) > 1:
            blocks.append(Para(run.label, cls="machine"))
        blocks += [Para(f"GPU not used: {note}", cls="box") for note in unused_gpu_notes(run.doc)]
        if not gpu:
            why = run.doc.get("machine_info", {}).get("accelbench", {}).get("no_gpu_reason")
            blocks.append(
                Para(
                    "No GPU was measured in this run"
                    + (f" ({why.rstrip('.')})." if why else ".")
                    + " So nothing here is a GPU speed-up: the table compares the CPU's other precisions "
                    "(and any virtual multi-device cases) with CPU fp32 on the same CPU. Run it on a machine with "
                    "an NVIDIA GPU for the GPU columns.",
                    cls="box",
                )
            )
            headers = ["workload", "mode", "best CPU configuration vs CPU fp32"]
        else:
            headers = ["workload", "mode", "1 GPU, fp32", "1 GPU, best precision", "several GPUs, best"]
            headers.append("best configuration")
        if rows_h and not any(h["baseline_measured"] for h in rows_h):
            blocks.append(
                Para(
                    "This run has no CPU fp32 case, so no speed-up: each row gives the best configuration's "
                    "throughput (and energy per sample where measured). Run with --devices cpu,gpu:1 for speed-ups.",
                    cls="box",
                )
            )
        blocks.append(Table(headers, rows, "headline", label="headline"))
    blocks.append(
        Para(
            "Speed-up = ratio of median throughputs over CPU fp32 of the same workload, mode and batch, "
            "with a bootstrap 95% CI; ~ marks a CI that includes 1. Serve cases are not in this table "
            "(their figure is the rate at the latency SLO, in Serving).",
            small=True,
        )
    )
    return blocks


def unused_gpu_notes(doc: dict) -> list[str]:
    """Each backend of the run that saw no GPU where NVML saw one, with why (as ``accelbench devices`` says)."""
    ab = doc.get("machine_info", {}).get("accelbench", {})
    if not ab.get("gpus"):
        return []
    chosen = str(doc.get("run", {}).get("options", {}).get("backend") or "tensorflow")
    notes = []
    for key, backend in (("no_gpu_reason", "tensorflow"), ("jax_no_gpu_reason", "jax")):
        if ab.get(key) and chosen in (backend, "all"):
            notes.append(str(ab[key]))
    return notes


def _cell_colour(x: float) -> str:
    # lightness falls with speed-up (greyscale-safe); blue hue; below 1 in orange
    if x < 1:
        return "#fbe3c8"
    t = min(1.0, math.log10(x) / 2)  # 1x..100x
    return f"hsl(205,70%,{int(96 - 50 * t)}%)"


def _config(r: pd.Series) -> str:
    """``cpu1 fp32``, ``gpu2 mixed_bfloat16 xla``, ``cpu2-virtual jax-mp fp32`` (JAX always compiles: no ``xla``)."""
    backend = r.get("backend") or "tensorflow"
    be = "" if backend == "tensorflow" else f" {backend}{'-mp' if r.get('parallelism') == 'model' else ''}"
    xla = " xla" if r["xla"] and backend == "tensorflow" else ""
    tenants = f" x{int(r['tenants'])} tenants" if int(r.get("tenants") or 1) > 1 else ""
    return (
        f"{r['device_kind']}{r['device_count']}{'-virtual' if r['virtual'] else ''}{be} {r['precision']}{xla}{tenants}"
    )


def matrix(run: RunData) -> list:
    """The speed-up matrix (workload x configuration), leaving out configurations where nothing ran."""
    t = run.table
    sp = analysis.speedups(run).set_index("case_id")["speedup"]
    cols = list(dict.fromkeys(_config(r) for _, r in t.iterrows()))
    left_out = [c for c in cols if all(r["status"] == "unsupported" for _, r in t.iterrows() if _config(r) == c)]
    rows: dict[str, dict[str, Cell]] = {}
    for _, r in t.iterrows():
        s = sp.get(r["case_id"])
        if r["case_id"] == analysis.baseline_id(r) and r["status"] == "ok":
            cell = Cell("baseline", cls="num", title=r["case_id"], below=f"{human(r['samples_per_s'])}/s")
        elif r["status"] == "ok" and isinstance(s, stats.Ratio):
            cell = Cell(
                f"{'~' if s.spans_one else ''}{_x(s.value)}x",
                cls="num",
                style=f"background:{_cell_colour(s.value)}",
                title=r["case_id"],
                below=f"{_x(s.ci_low)}-{_x(s.ci_high)}",
            )
        elif r["status"] == "ok":
            cell = Cell(f"{human(r['samples_per_s'])}/s", cls="num")
        else:
            cell = Cell(r["status"], cls="na", title=r["reason"])
        rows.setdefault(f"{r['workload']} {r['mode']} b{r['per_replica_batch']}", {})[_config(r)] = cell
    # a configuration nothing ran in (every case unsupported: a CPU-only machine's GPU columns) is
    # left out; the unsupported cases are listed by reason further down
    ran = {_config(r) for _, r in t.iterrows() if r["status"] != "unsupported"}
    cols = [c for c in cols if c in ran]
    body = [[rk, *[cells.get(c, na("")) for c in cols]] for rk, cells in rows.items()]
    table = Table(["workload mode batch", *cols], body, "matrix", wrap=True, label="speed-up matrix")
    if not left_out:
        return [table]
    note = f"Left out, every case unsupported: {', '.join(left_out)} (reasons under Unsupported and failed cases)."
    return [table, Para(note, small=True)]


def _ms(v: Any) -> float | None:
    return v * 1e3 if v is not None and not pd.isna(v) and v else None


def throughput(run: RunData) -> list:
    """Throughput table with step times and latency, a busy-machine warning, and a bar chart per workload and mode."""
    ok = run.table[run.table["status"] == "ok"]
    rows = [
        [
            Cell(r["case_id"], badge=", ".join(_flags(r)) or None, badge_cls="warn", title=case_note(r) or None),
            num(r["samples_per_s"]),
            Cell(f"{human(r['samples_per_s_ci_low'])} - {human(r['samples_per_s_ci_high'])}", cls="num")
            if r["samples_per_s_ci_low"] is not None and not pd.isna(r["samples_per_s_ci_low"])
            else num(None),
            num(_ms(r["step_time_median_s"])),
            num(_ms(r["step_time_p90_s"])),
            num(100 * r["step_time_cv"] if r["step_time_cv"] is not None else None, "{:.1f}"),
            Cell(f"{r['rounds']:.0f} x {r['steps_per_round']:.0f}", cls="num"),
            num(r["compile_s"], "{:.2f}"),
            Cell(f"{_fmt(_ms(r['latency_p50_s']))} / {_fmt(_ms(r['latency_p99_s']))}", cls="num"),
        ]
        for _, r in ok.iterrows()
    ]
    headers = ["case", "samples/s (median)", "95% CI", "step ms (median)", "step ms p90", "CV %"]
    blocks: list = [*_busy(run), Table([*headers, "rounds x steps", "compile s", "latency ms p50/p99"], rows)]
    for (w, mode), g in ok.groupby(["workload", "mode"], sort=False):
        top = g.sort_values("samples_per_s", ascending=False).head(MAX_BARS) if len(g) > MAX_BARS else g
        note = f" (top {MAX_BARS} of {len(g)})" if len(g) > MAX_BARS else ""
        svg = charts.bars(
            [str(c) for c in top["case_id"]],
            [float(v) for v in top["samples_per_s"]],
            [None if pd.isna(v) else float(v) for v in top["samples_per_s_ci_low"]],
            [None if pd.isna(v) else float(v) for v in top["samples_per_s_ci_high"]],
            f"Throughput, {w} {mode}{note}, {run.label}",
            "samples/s (median, 95% CI)",
            groups=[str(p) for p in top["precision"]],
        )
        blocks.append(Svg(svg))
    return blocks


def _flags(r: pd.Series) -> list[str]:
    """``unstable`` (CV > 10%) and ``busy`` (other processes used the machine) marks of a case."""
    return [f for f, on in (("unstable", r["unstable"]), ("busy", r.get("busy"))) if on]


def _busy(run: RunData) -> list:
    """A warning over the throughput table when some cases ran on a busy machine."""
    ok = run.table[run.table["status"] == "ok"]
    busy = ok[ok["busy"].astype(bool)] if "busy" in ok else ok.iloc[0:0]
    if busy.empty:
        return []
    worst = max((float(v) for v in busy["other_cpu_pct"] if v is not None and not pd.isna(v)), default=None)
    cpu = f" (up to {worst:.0f}% of the CPU)" if worst is not None else ""
    return [
        Para(
            f"{len(busy)} case{'s' if len(busy) != 1 else ''} ran on a busy machine: other processes used the CPU "
            f"above {BUSY_OTHER_CPU_PCT:.0f}% of its cores, or computed on the case's GPUs{cpu}. Their throughput "
            "says what the machine gave the benchmark then, not what it can do: "
            + ", ".join(str(c) for c in busy["case_id"][:8])
            + (", ..." if len(busy) > 8 else "")
            + ".",
            cls="warn",
        )
    ]


def _fmt(v: float | None) -> str:
    return human(v)


def scaling(run: RunData, pool: dict[str, list[float]] | None = None) -> list:
    """Multi-device and multi-node scaling: efficiency table and speed-up chart."""
    sc = analysis.scaling(run, pool)
    if sc.empty:
        return [Para("No multi-device cases in this run.", cls="na")]
    rows = [
        [
            Cell(
                r["case_id"],
                badge="(virtual devices: shared silicon, checks correctness, not scaling)" if r["virtual"] else None,
                badge_cls="virtual",
            ),
            Cell(r["devices"] if r["nodes"] == 1 else f"{r['devices']} ({r['nodes']} nodes)", cls="num"),
            num(r["samples_per_s"]),
            num(r["single_samples_per_s"]),
            Cell(fmt_ratio(r["efficiency"], pct=True), cls="num"),
        ]
        for _, r in sc.iterrows()
    ]
    # speed-up over one device, so workloads of very different throughput share one axis
    series: dict[str, list[tuple[int, float]]] = {}
    for _, r in sc.iterrows():
        if not r["single_samples_per_s"]:
            continue
        fam = r["single_case"] + (" (virtual)" if r["virtual"] else "")
        series.setdefault(fam, [(1, 1.0)]).append(
            (int(r["devices"]), float(r["samples_per_s"]) / r["single_samples_per_s"])
        )
    blocks: list = [Table(["case", "devices", "samples/s", "1 device", "efficiency thr_N/(N thr_1)"], rows)]
    if series:
        blocks.append(Svg(charts.scaling(series, f"Multi-device scaling, {run.label}")))
    return blocks


def gains(df: pd.DataFrame, empty: str) -> list:
    """A table of gains (precision or XLA) against their reference case."""
    if df.empty:
        return [Para(empty, cls="na")]
    if "scope" in df:  # XLA: what it compiled (the whole step on one device; forward and backward on several)
        rows = [
            [r["case_id"], r["vs"], Cell(fmt_ratio(r["gain"]), cls="num"), r["scope"] or "-"] for _, r in df.iterrows()
        ]
        return [Table(["case", "against", "gain [95% CI]", "XLA compiled"], rows)]
    rows = [[r["case_id"], r["vs"], Cell(fmt_ratio(r["gain"]), cls="num")] for _, r in df.iterrows()]
    return [Table(["case", "against", "gain [95% CI]"], rows)]


def failed(run: RunData) -> list:
    """Failed cases one per row; unsupported ones grouped by reason (as the console does)."""
    t = run.table[run.table["status"] != "ok"]
    if t.empty:
        return [Para("Every case ran.")]
    blocks: list = []
    bad = t[t["status"] != "unsupported"]
    if not bad.empty:
        rows = [[r["case_id"], r["status"], r["reason"]] for _, r in bad.iterrows()]
        blocks.append(Table(["case", "status", "reason"], rows, label="failed cases"))
    groups: dict[str, list[str]] = {}
    for _, r in t[t["status"] == "unsupported"].iterrows():
        groups.setdefault(str(r["reason"]), []).append(str(r["case_id"]))
    if groups:
        rows = [
            [
                Cell(len(ids), cls="num"),
                reason,
                Cell(", ".join(ids[:3]) + (", ..." if len(ids) > 3 else ""), title=", ".join(ids)),
            ]
            for reason, ids in sorted(groups.items(), key=lambda kv: -len(kv[1]))
        ]
        blocks.append(Table(["unsupported cases", "reason", "for example"], rows, label="unsupported cases by reason"))
    return blocks
