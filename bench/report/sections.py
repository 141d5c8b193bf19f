"""The report's speed sections: speed-up matrix, throughput, scaling, gains, cases that did not run.

Plain data (tables of cells, paragraphs, charts) for the templates, which escape every value.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from bench import stats, storage
from bench.cases import Case
from bench.report import analysis, charts
from bench.report.analysis import RunData, fmt_ratio
from bench.report.console import case_note
from bench.report.html import Cell, Para, Svg, Table, na, num
from bench.report.numbers import human
from bench.telemetry.derive import BUSY_OTHER_CPU_PCT

MAX_BARS = 40


def _x(v: float) -> str:
    return human(v)


def _cell_colour(x: float) -> str:
    # lightness falls with speed-up (greyscale-safe); blue hue; below 1 in orange
    if x < 1:
        return "#fbe3c8"
    t = min(1.0, math.log10(x) / 2)  # 1x..100x
    return f"hsl(205,70%,{int(96 - 50 * t)}%)"


def _config(r: pd.Series) -> str:
    """A recorded case's matrix column (``_config_of_parts`` of its id's parts)."""
    return _config_of_parts(Case.of(r).id_parts())


def matrix(run: RunData) -> list:
    """The speed-up matrix (workload x configuration), leaving out configurations where nothing ran."""
    t = run.table
    sp = analysis.speedups(run).set_index("case_id")["speedup"]
    cols = list(dict.fromkeys(_config(r) for _, r in t.iterrows()))
    left_out = [c for c in cols if all(r["status"] == "unsupported" for _, r in t.iterrows() if _config(r) == c)]
    rows: dict[str, dict[str, Cell]] = {}
    shaky = set(t.loc[t["unstable"].astype(bool), "case_id"])
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
                # a ratio is as steady as its shakier side: the baseline's flag shows here too
                badge="unstable" if {r["case_id"], analysis.baseline_id(r)} & shaky else None,
                badge_cls="warn",
            )
        elif r["status"] == "ok":
            cell = Cell(f"{human(r['samples_per_s'])}/s", cls="num")
        else:
            cell = Cell(r["status"], cls="na", title=r["reason"])
        rows.setdefault(f"{r['workload']} {r['mode']} b{r['per_replica_batch']}", {})[_config(r)] = cell
    # a configuration nothing ran in (every case unsupported: a CPU-only machine's GPU columns) is
    # left out; the unsupported cases are listed by reason further down
    ran = {_config(r) for _, r in t.iterrows() if r["status"] != "unsupported"}
    # planned cases with no record: (row, column) of each, from the id's named parts
    missing = {(f"{p['workload']} {p['mode']} {p['batch']}", _config_of_parts(p)) for p in analysis.not_run_parts(run)}
    for rk, c in sorted(missing):  # a configuration only planned cases of had: its column, saying so
        if rk in rows and c not in cols:
            cols.append(c)
        ran.add(c)
    cols = [c for c in cols if c in ran]

    def gap(rk: str, c: str) -> Cell:
        return na("not run") if (rk, c) in missing else na("")

    body = [[rk, *[cells.get(c) or gap(rk, c) for c in cols]] for rk, cells in rows.items()]
    table = Table(["workload mode batch", *cols], body, "matrix", wrap=True, label="speed-up matrix")
    if not left_out:
        return [table]
    note = f"Left out, every case unsupported: {', '.join(left_out)} (reasons under Unsupported and failed cases)."
    return [table, Para(note, small=True)]


def _config_of_parts(p: dict[str, str]) -> str:
    """A matrix column from a case id's named parts (``Case.id_parts``, or ``parse_id`` of a planned id).

    ``cpu1 fp32``, ``gpu2 mixed_bfloat16 xla``, ``cpu2-virtual jax-mp fp32`` (JAX always compiles: no
    ``xla``), ``gpu1 fp32 x2 tenants``, ``gpu1 jax fp32 beside train-b64``; nodes are not a column.
    """
    device = re.sub(r"x\d+nodes", "", p["device"])
    device = "cpu1" + device[3:] if device.startswith("cpu") and not device[3:4].isdigit() else device
    backend = f" {p['backend']}{'-mp' if p['parallelism'] else ''}" if p["backend"] else ""
    tenants = p["tenants"]
    if tenants.startswith("beside-"):
        tenants = f" beside {tenants[len('beside-') :]}"
    elif tenants:
        tenants = f" x{tenants[1:]} tenants"
    return f"{device}{backend} {p['precision']}{' xla' if p['xla'] else ''}{tenants}"


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
            Cell(f"{human(r['run_ci_low'])} - {human(r['run_ci_high'])}", cls="num")
            if not pd.isna(r.get("run_ci_low"))
            else Cell("-", cls="num", title="no case of this device kind ran in a second worker"),
            num(_ms(r["step_time_median_s"])),
            num(_ms(r["step_time_p90_s"]) if r["rounds"] >= stats.samples_to_resolve(90) else None),
            num(100 * r["step_time_cv"] if r["step_time_cv"] is not None else None, "{:.1f}"),
            Cell(f"{r['rounds']:.0f} x {r['steps_per_round']:.0f}", cls="num"),
            _compile_cell(r),
            _latency_cell(r),
        ]
        for _, r in ok.iterrows()
    ]
    headers = ["case", "samples/s (median)", "95% CI (within worker)", "rerun 95% (run-level)", "step ms (median)"]
    headers += ["step ms p90", "CV %"]
    blocks: list = [*_busy(run), Table([*headers, "rounds x steps", "compile s (cold)", "latency ms p50/p99"], rows)]
    if (unresolved := _unresolved_note(ok)) is not None:
        blocks.append(unresolved)
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


def _compile_cell(r: pd.Series) -> Cell:
    """The cold compile time; a compile-cache hit says so, with the time it took to load."""
    hit = r.get("compile_cache") in ("hit", "partial")
    cold = r.get("cold_compile_s") if "cold_compile_s" in r and not pd.isna(r.get("cold_compile_s")) else None
    if not hit:
        return num(r["compile_s"], "{:.2f}")
    text = f"{cold:.2f}" if cold is not None else "-"
    return Cell(text, cls="num", below=f"cache {r['compile_cache']}: {r['compile_s']:.2f} s with it")


def _flags(r: pd.Series) -> list[str]:
    """``unstable`` (CV > 10%), ``CI target missed`` and ``busy`` (other processes used the machine) marks of a case."""
    marks = (("unstable", r["unstable"]), ("CI target missed", r.get("target_missed")), ("busy", r.get("busy")))
    return [f for f, on in marks if on and not pd.isna(on)]


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


def _latency_cell(r: Any) -> Cell:
    """p50 / p99 in ms; where the samples cannot resolve a percentile, "-" and how many it needs."""
    n = r.get("latency_samples")
    known = n is not None and not pd.isna(n)  # files before the count was recorded: as recorded
    shown = [
        None if known and n < stats.samples_to_resolve(q) else _ms(r.get(k))
        for q, k in ((50, "latency_p50_s"), (99, "latency_p99_s"))
    ]
    need = [f"p{q} needs {stats.samples_to_resolve(q)} latency samples" for q, v in zip((50, 99), shown) if v is None]
    title = f"{'; '.join(need)}; this case has {n:.0f}" if need and known else None
    return Cell(f"{_fmt(shown[0])} / {_fmt(shown[1])}", cls="num", title=title)


def _unresolved_note(ok: pd.DataFrame) -> Para | None:
    """Say why a tail percentile is "-": its samples cannot resolve it (a p99 of 10 is their maximum)."""
    p90, p99 = stats.samples_to_resolve(90), stats.samples_to_resolve(99)
    step = int((ok["rounds"] < p90).sum()) if "rounds" in ok else 0
    lat = ok["latency_samples"] if "latency_samples" in ok else pd.Series(dtype=float)
    latency = int(((lat < p99) & lat.notna()).sum())
    if not step and not latency:
        return None
    return Para(
        f"A percentile is shown only where its samples resolve it: step ms p90 from {p90} rounds or more "
        f"({step} case(s) here have fewer), latency p99 from {p99} latency samples or more ({latency} case(s) "
        "have fewer; their counts are in the CSV). With fewer, no sample is expected beyond the percentile and "
        f"the figure would be the largest sample: a p99 of {p90} samples estimates about the p91.",
        small=True,
    )


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
    missing = analysis.not_run(run)
    if t.empty and not missing:
        return [Para("Every planned case ran.")]
    blocks: list = []
    if missing:
        blocks.append(
            Table(
                ["planned, not run", "case"],
                [[Cell(i + 1, cls="num"), c] for i, c in enumerate(missing)],
                label="planned cases that did not run",
            )
        )
    bad = t[~t["status"].isin(storage.NOT_FAILED)]  # serve outcomes are in Serving
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
