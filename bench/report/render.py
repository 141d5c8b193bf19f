"""Self-contained HTML report and Markdown summary from results documents.

HTML goes through Jinja2 templates with autoescaping (``bench/templates``, the base layout shared
with the site): GPU and CPU names, host names, case labels and reasons are untrusted. The
Markdown report escapes them too (``mdtext.md``). Nothing is fetched: inline CSS, inline SVG, the
data embedded as CSV. Failed and unsupported cases never plot as zero.
"""

from __future__ import annotations

import base64
import math
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from bench import __version__, stats, storage
from bench.cases import Case
from bench.report import analysis, charts, compare
from bench.report import cost as costs
from bench.report.analysis import RunData, fmt_ratio
from bench.report.console import case_note
from bench.report.html import Cell, Csv, Para, Section, Svg, Table, na, num, unique_svg_ids
from bench.report.html import render as render_template
from bench.report.mdtext import md
from bench.report.numbers import human, p_value
from bench.report.peaks import datasheet_tflops
from bench.telemetry.derive import BUSY_OTHER_CPU_PCT

MAX_POWER_CHARTS = 16
MAX_BARS = 40


def machine_line(doc: dict) -> str:
    """CPU, GPUs, TensorFlow, host in one line (plain text; escape before use)."""
    mi = doc.get("machine_info", {})
    ab = mi.get("accelbench", {})
    cpu = ab.get("cpu", {})
    names: dict[str, int] = {}
    for g in ab.get("gpus", []):
        names[g.get("name", "?")] = names.get(g.get("name", "?"), 0) + 1
    gtxt = ", ".join(f"{n}x {k}" for k, n in names.items()) or "no GPU"
    fw = [f"TensorFlow {ab['tensorflow']}, Keras {ab.get('keras', '?')}"] if ab.get("tensorflow") else []
    if ab.get("jax"):
        fw.append(f"JAX {ab['jax']} (Keras {ab.get('jax_keras', '?')})")
    return (
        f"{mi.get('node', '?')}: {cpu.get('model', '?')} ({cpu.get('logical_cores', '?')} cores), {gtxt}; "
        f"{', '.join(fw) or 'TensorFlow ?'}, driver {ab.get('driver_version') or '-'}"
    )


def identity_differences(doc: dict, base: dict) -> list[str]:
    """What differs between two runs' machines and software (the history's fingerprint), and their profiles."""
    a, b = storage.machine_fingerprint(doc), storage.machine_fingerprint(base)
    out = [f"{k} {b.get(k)} -> {a.get(k)}" for k in a if a.get(k) != b.get(k)]
    pa, pb = doc.get("run", {}).get("profile"), base.get("run", {}).get("profile")
    if pa != pb:
        out.append(f"profile {pb} -> {pa}")
    return out


def cluster_line(run: RunData) -> str | None:
    """``cluster: 2 workers (tf_config) on 127.0.0.1, all-reduce CollectiveAllReduce/RING`` for a cluster run."""
    c = run.doc.get("run", {}).get("cluster")
    if not c:
        return None
    hosts = sorted({str(w).rsplit(":", 1)[0] for w in c.get("workers", [])})
    reduces = sorted({str(x) for x in run.table["all_reduce"].dropna()}) if "all_reduce" in run.table else []
    return (
        f"cluster: {c.get('world')} workers, one per node ({c.get('launcher')}), on {', '.join(hosts)}; "
        f"all-reduce {', '.join(reduces) or '-'}; interconnect not measured"
    )


def _gpu_name(doc: dict) -> str | None:
    gpus = doc.get("machine_info", {}).get("accelbench", {}).get("gpus", [])
    return gpus[0].get("name") if gpus else None


def _x(v: float) -> str:
    return human(v)


def _speed_cell(r: object, case: str | None = None, big: bool = False) -> Cell:
    if not isinstance(r, stats.Ratio):
        return na("not measured")
    mark = "~" if r.spans_one else ""
    return Cell(
        f"{mark}{_x(r.value)}x", cls="big num" if big else "num", after=f"[{_x(r.ci_low)}-{_x(r.ci_high)}]", below=case
    )


def _gpu_measured(run: RunData) -> bool:
    t = run.table
    return bool(((t["status"] == "ok") & (t["device_kind"] == "gpu")).any())


def _best_cell(h: dict) -> Cell:
    """The best configuration's speed-up; where CPU fp32 itself is the best, no ratio of it against itself."""
    if h["best_case"] == h["baseline_case"]:
        return Cell(
            "1x (baseline)",
            cls="big num",
            below=f"CPU fp32 itself is the fastest: {h['best_case']}, {human(h['samples_per_s'])} samples/s",
        )
    return _speed_cell(h["speedup"], f"{h['best_case']}: {human(h['samples_per_s'])} samples/s", big=True)


def _headline(runs: list[RunData]) -> list:
    blocks: list = []
    for run in runs:
        gpu = _gpu_measured(run)
        rows: list[list] = []
        for h in analysis.headline(run):
            g1c, g1 = h["gpu1_best"]
            mc, m = h["multi_best"]
            gpu_cells = [_speed_cell(h["gpu1_fp32"]), _speed_cell(g1, g1c), _speed_cell(m, mc)] if gpu else []
            rows.append([h["workload"], h["mode"], *gpu_cells, _best_cell(h)])
        gm = analysis.geomean_headline(run)
        rows.append(
            [
                Cell("geometric mean", cls="big"),
                "",
                *([""] * 3 if gpu else []),
                Cell(f"{_x(gm)}x" if gm else "-", cls="big num"),
            ]
        )
        if len(runs) > 1:
            blocks.append(Para(run.label, cls="machine"))
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
        blocks.append(Table(headers, rows, "headline", label="headline"))
    blocks.append(
        Para(
            "Speed-up = ratio of median throughputs over CPU fp32 of the same workload, mode and batch, "
            "with a bootstrap 95% CI; ~ marks a CI that includes 1.",
            small=True,
        )
    )
    return blocks


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
    return f"{r['device_kind']}{r['device_count']}{'-virtual' if r['virtual'] else ''}{be} {r['precision']}{xla}"


def _matrix(run: RunData) -> list:
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


def _throughput(run: RunData) -> list:
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


def _scaling(run: RunData, pool: dict[str, list[float]] | None = None) -> list:
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


def _gains(df: pd.DataFrame, empty: str) -> list:
    if df.empty:
        return [Para(empty, cls="na")]
    rows = [[r["case_id"], r["vs"], Cell(fmt_ratio(r["gain"]), cls="num")] for _, r in df.iterrows()]
    return [Table(["case", "against", "gain [95% CI]"], rows)]


def _energy(run: RunData) -> list:
    t = run.table[run.table["status"] == "ok"]
    rows: list[list] = []
    for _, r in t.iterrows():
        if r["energy_j"] is None or pd.isna(r["energy_j"]):
            rows.append([r["case_id"], na(f"not measured ({r.get('gpu_telemetry') or 'no telemetry'})", colspan=7)])
            continue
        rows.append(
            [
                r["case_id"],
                num(r["energy_j_per_sample"]),
                num(r["samples_per_joule"]),
                num(r["power_mean_w"], "{:.0f}"),
                num(r["power_max_w"], "{:.0f}"),
                num(r["energy_above_idle_j"], "{:.1f}"),
                r["throttle_reasons"] or "none",
                r.get("clock_events_info") or "none",
            ]
        )
    headers = ["case", "J/sample", "samples/J", "mean W", "max W", "J above idle"]
    headers += ["throttling (power, thermal, slowdown)", "other clock events (idle, app clocks, sync boost)"]
    return [Table(headers, rows), *_per_node(run), *_power_charts(run)]


def _per_node(run: RunData) -> list:
    """A cluster run's figures node by node (all-gathered by the workers onto rank 0)."""
    rows: list[list] = []
    workers = (run.doc.get("run", {}).get("cluster") or {}).get("workers", [])
    for rec in run.doc.get("benchmarks", []):
        e = rec["extra_info"]
        if not e.get("per_node_host_peak_rss_bytes"):
            continue
        for i, rss in enumerate(e["per_node_host_peak_rss_bytes"]):
            rows.append(
                [
                    e["case_id"],
                    f"rank {i}" + (f" ({workers[i]})" if i < len(workers) else ""),
                    num((e.get("per_node_energy_j") or [None] * (i + 1))[i], "{:.1f}"),
                    num((e.get("per_node_power_mean_w") or [None] * (i + 1))[i], "{:.0f}"),
                    _mib((e.get("per_node_device_peak_mem_bytes") or [None] * (i + 1))[i], "{:.1f}"),
                    _mib(rss, "{:.0f}"),
                ]
            )
    if not rows:
        return []
    headers = ["case", "node", "energy J", "mean W", "device peak MiB", "host peak RSS MiB"]
    return [Para("Per node (a cluster run: energy is the nodes' sum above)."), Table(headers, rows)]


def _power_charts(run: RunData) -> list:
    """Power over time per GPU for the headline cases first, at most MAX_POWER_CHARTS."""
    recs = {
        storage.case_id_of(r): r
        for r in run.doc.get("benchmarks", [])
        if (r["extra_info"].get("telemetry") or {}).get("gpus")
    }
    first = []
    for h in analysis.headline(run):
        first += [h["best_case"], h["gpu1_best"][0], h["multi_best"][0]]
    order = list(dict.fromkeys([c for c in first if c in recs] + [c for c in run.table["case_id"] if c in recs]))
    idle_all = run.doc["run"].get("idle_power_w") or {}
    blocks: list = []
    for cid in order[:MAX_POWER_CHARTS]:
        gpus = recs[cid]["extra_info"]["telemetry"]["gpus"]
        traces = {
            g.get("pci_bus_id", "") or g.get("uuid", ""): [tuple(p) for p in g["power_trace"]]
            for g in gpus
            if len(g.get("power_trace") or []) >= 2
        }
        if not traces:
            continue
        idle = [idle_all.get(g.get("uuid")) for g in gpus]
        known = [float(v) for v in idle if v is not None]
        idle_w = sum(known) / len(known) if known and len(known) == len(idle) else None
        blocks.append(Svg(charts.power_trace(traces, f"Power per GPU, {cid} ({gpus[0].get('name', '')})", idle_w)))
    if len(order) > MAX_POWER_CHARTS:
        blocks.append(
            Para(f"Power traces of {len(order) - MAX_POWER_CHARTS} more GPU cases are in the results file.", cls="na")
        )
    return blocks


def _mib(v: Any, fmt: str) -> Cell:
    """Bytes as MiB; empty, never 0, where not measured."""
    return num(v / 2**20 if v is not None and not pd.isna(v) and v else None, fmt)


def _memory(run: RunData) -> Table:
    t = run.table[run.table["status"] == "ok"]
    rows = [
        [
            r["case_id"],
            _mib(r["device_peak_mem_bytes"], "{:.1f}"),
            _mib(r.get("device_peak_mem_compile_bytes"), "{:.1f}"),
            _mib(r["host_peak_rss_bytes"], "{:.0f}"),
            _mib(r["nvml_memory_used_bytes"], "{:.0f}"),
        ]
        for _, r in t.iterrows()
    ]
    headers = [
        "case",
        "device peak MiB, steady state (TF allocator; JAX: peak_bytes_in_use)",
        "device peak MiB while compiling and warming up",
        "host peak RSS MiB",
        "NVML used MiB: TF's process pool (never released, so it carries over between cases of one worker)",
    ]
    return Table(headers, rows)


def _efficiency(run: RunData) -> Table:
    t = run.table[run.table["status"] == "ok"]
    gname = _gpu_name(run.doc)
    rows = []
    for _, r in t.iterrows():
        ds = datasheet_tflops(gname, r["precision"]) if r["device_kind"] == "gpu" else None
        n = Case.of(r).physical_devices  # every chip on every node (a cluster's throughput is global)
        pct_ds = 100 * r["achieved_tflops"] / (ds * n) if ds and r["achieved_tflops"] else None
        rows.append(
            [
                r["case_id"],
                num(r["achieved_tflops"], "{:.3f}"),
                num(r["peak_tflops_measured"], "{:.3f}"),
                num(100 * r["mfu_measured"] if r["mfu_measured"] else None, "{:.1f}"),
                num(pct_ds, "{:.1f}"),
            ]
        )
    headers = ["case", "achieved TFLOP/s", "measured matmul peak TFLOP/s", "% of measured peak", "% of datasheet peak"]
    return Table(headers, rows)


def cost_rows(run: RunData, prices: costs.Prices) -> tuple[list[dict], dict[tuple[str, str], dict]]:
    """Per measured case its cost per million samples; and the cheapest case per (workload, mode)."""
    gname = _gpu_name(run.doc)
    out = []
    for _, r in run.table[run.table["status"] == "ok"].iterrows():
        c = costs.per_million(
            prices,
            r["device_kind"],
            Case.of(r).physical_devices,
            bool(r["virtual"]),
            r["samples_per_s"],
            None if pd.isna(r["energy_j_per_sample"]) else r["energy_j_per_sample"],
            gname if r["device_kind"] == "gpu" else None,
        )
        out.append({"case_id": r["case_id"], "workload": r["workload"], "mode": r["mode"], "cost": c, "row": r})
    cheapest: dict[tuple[str, str], dict] = {}
    for o in out:
        if o["cost"] is None:
            continue
        k = (o["workload"], o["mode"])
        if k not in cheapest or o["cost"].per_million < cheapest[k]["cost"].per_million:
            cheapest[k] = o
    return out, cheapest


def _cost(run: RunData, prices: costs.Prices) -> list:
    rows_, cheapest = cost_rows(run, prices)
    cur = prices.currency
    best_ids = {o["case_id"] for o in cheapest.values()}
    rows = [
        [
            Cell(o["case_id"], badge="cheapest" if o["case_id"] in best_ids else None, badge_cls="green"),
            num(o["row"]["samples_per_s"]),
            num(o["row"]["energy_j_per_sample"]),
            Cell(human(o["cost"].per_million), cls="num") if o["cost"] else na("no price for this device kind"),
            "device-hours + energy"
            if o["cost"] and o["cost"].energy_included
            else "device-hours only (energy not measured)"
            if o["cost"]
            else "-",
        ]
        for o in rows_
    ]
    summary = "; ".join(
        f"{w} {m}: {o['case_id']} at {human(o['cost'].per_million)} {cur}" for (w, m), o in cheapest.items()
    )
    return [
        Para(f"Cheapest per sample: {summary or 'nothing could be priced'}."),
        Table(["case", "samples/s", "J/sample", f"{cur} per million samples", "includes"], rows),
    ]


def _failed(run: RunData) -> list:
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


def _environment(doc: dict) -> Table:
    mi = doc.get("machine_info", {})
    ab = mi.get("accelbench", {})
    run = doc.get("run", {})
    ci = doc.get("commit_info", {})
    gpus = "; ".join(f"{g.get('name')} {g.get('pci_bus_id')} {g.get('uuid')}" for g in ab.get("gpus", []))
    rows = [
        ["host", mi.get("node")],
        ["CPU", f"{ab.get('cpu', {}).get('model')} flags: {', '.join(ab.get('cpu', {}).get('flags', []))}"],
        ["GPUs", gpus or "none"],
        ["GPU note", ab.get("no_gpu_reason") or "-"],
        ["driver / CUDA driver", f"{ab.get('driver_version') or '-'} / {ab.get('cuda_driver_version') or '-'}"],
        ["CUDA / cuDNN (TF build)", f"{ab.get('cuda_build') or '-'} / {ab.get('cudnn_build') or '-'}"],
        ["TensorFlow / Keras", f"{ab.get('tensorflow') or '-'} / {ab.get('keras') or '-'}"],
        [
            "JAX / jaxlib / Keras",
            f"{ab.get('jax')} / {ab.get('jaxlib')} / {ab.get('jax_keras')}" if ab.get("jax") else "-",
        ],
        ["JAX GPU note", ab.get("jax_no_gpu_reason") or "-"],
        ["Python", mi.get("python_version")],
        ["commit", f"{ci.get('id', '-')} {'(dirty)' if ci.get('dirty') else ''}"],
        ["command", "accelbench " + " ".join(run.get("argv", []))],
        ["profile", run.get("profile")],
        ["run", f"{run.get('id')} {run.get('start')} -> {run.get('end')} ({run.get('status')})"],
        ["testbed / runner", f"{run.get('testbed') or '-'} / {run.get('runner_name') or '-'}"],
        ["cluster", ", ".join(str(w) for w in (run.get("cluster") or {}).get("workers", [])) or "-"],
        ["RAPL", ab.get("rapl")],
    ]
    return Table(["setting", "value"], rows, label="environment")


def _data(run: RunData) -> Csv:
    csv = run.table.to_csv(index=False)
    return Csv(f"{run.run_id}.csv", base64.b64encode(csv.encode()).decode(), csv, len(run.table))


def _baseline(run: RunData, base: dict, threshold: float) -> list:
    blocks: list = []
    diff = identity_differences(run.doc, base)
    if diff:
        blocks.append(
            Para(
                f"The two runs differ in {'; '.join(diff)}: {machine_line(base)} vs {machine_line(run.doc)}.",
                cls="warn",
            )
        )
    if not same_profile(run.doc, base):
        return [
            *blocks,
            Para(
                "Runs of different profiles measure different model sizes under the same case ids: not compared.",
                cls="na",
            ),
        ]
    rows = [
        [
            cid,
            Cell(fmt_ratio(c.ratio), cls="num"),
            Cell(p_value(c.p_value), cls="num"),
            Cell(c.verdict, cls="warn" if c.verdict == "regressed" else ""),
        ]
        for cid, c in changes(run.doc, base, threshold)
    ]
    if not rows:
        return [*blocks, Para("No case was measured in both runs.", cls="na")]
    headers = ["case", "new / baseline [95% CI]", "Mann-Whitney p", f"verdict (threshold {threshold:.0%}, p < 0.01)"]
    return [*blocks, Table(headers, rows)]


def same_profile(doc: dict, base: dict) -> bool:
    """The profile sizes the models: the smoke MLP at batch 64 is not the standard MLP at batch 64."""
    return doc.get("run", {}).get("profile") == base.get("run", {}).get("profile")


def changes(doc: dict, base: dict, threshold: float) -> list[tuple[str, stats.Change]]:
    """Per case measured in both runs of one profile: the change of throughput against the baseline (rule 26)."""
    if not same_profile(doc, base):
        return []
    new, old = analysis.load_run(doc), analysis.load_run(base)
    out = []
    for cid, s in new.samples.items():
        if s and old.samples.get(cid):
            out.append((cid, stats.compare(old.samples[cid], s, threshold=threshold)))
    return out


def regressions(doc: dict, base: dict, threshold: float) -> list[tuple[str, float]]:
    """(case id, ratio) of every case flagged as regressed."""
    return [(cid, c.ratio.value) for cid, c in changes(doc, base, threshold) if c.verdict == "regressed"]


def html_report(
    docs: list[dict],
    baseline: dict | None = None,
    threshold: float = 0.05,
    prices: costs.Prices | None = None,
    back: str | None = None,
) -> str:
    """The whole report as one HTML string (``back``: a link up to the site, for nightly copies)."""
    runs = [analysis.load_run(d, f"{d['run']['id']} ({d.get('machine_info', {}).get('node', '?')})") for d in docs]
    heads = []
    for run in runs:
        counts = analysis.status_counts(run)
        heads.append(
            {
                "label": run.label,
                "machine": machine_line(run.doc),
                "ok": counts.get("ok", 0),
                "unsupported": counts.get("unsupported", 0),
                "failed": sum(v for k, v in counts.items() if k not in ("ok", "unsupported")),
                "status": run.doc["run"].get("status"),
                "profile": run.doc["run"].get("profile"),
                "cluster": cluster_line(run),
            }
        )
    pool = {
        cid: smp for r in runs for cid, smp in r.samples.items()
    }  # a cluster run's 1-device baseline may sit in another file
    sections = [Section("Headline: best configuration vs CPU fp32", _headline(runs))]
    for run in runs:
        sfx = f" - {run.label}" if len(runs) > 1 else ""
        sections += [
            Section(f"Speed-up matrix (vs CPU fp32, same workload, mode and batch){sfx}", _matrix(run)),
            Section(f"Throughput{sfx}", _throughput(run)),
            Section(f"Multi-device and multi-node scaling{sfx}", _scaling(run, pool)),
            Section(
                f"Precision gains (vs fp32 on the same devices){sfx}",
                _gains(analysis.precision_gains(run), "No mixed-precision or TF32 case was measured."),
            ),
            Section(
                f"XLA on vs off{sfx}",
                _gains(analysis.xla_gains(run), "XLA on and off did not both run (use --xla both)."),
                level=3,
            ),
            Section(f"Backends: JAX vs TensorFlow{sfx}", compare.backends(run, pool)),
            Section(f"Model vs data parallel{sfx}", compare.parallelism(run), level=3),
            Section(f"Energy and power{sfx}", _energy(run)),
            Section(f"Memory{sfx}", [_memory(run)]),
            Section(f"Compute efficiency{sfx}", [_efficiency(run)]),
        ]
        if prices is not None:
            sections.append(Section(f"Cost per million samples{sfx}", _cost(run, prices)))
        sections.append(Section(f"Unsupported and failed cases{sfx}", _failed(run)))
        if baseline is not None:
            sections.append(
                Section(f"Against the baseline {baseline['run']['id']}{sfx}", _baseline(run, baseline, threshold))
            )
    sections.append(Section("Method", [], method=True))
    for run in runs:
        sections += [
            Section(f"Environment - {run.label}", [_environment(run.doc)]),
            Section(f"Data - {run.label}", [_data(run)]),
        ]
    return unique_svg_ids(
        render_template(
            "report.html", run_id=runs[0].run_id, runs=heads, sections=sections, version=__version__, back=back
        )
    )


def markdown_report(
    docs: list[dict], baseline: dict | None = None, threshold: float = 0.05, prices: costs.Prices | None = None
) -> str:
    """Headline and speed-up table, sized for a CI job summary or a PR comment; text from results escaped."""
    out = ["# accelbench report", ""]
    for d in docs:
        run = analysis.load_run(d)
        counts = analysis.status_counts(run)
        out += [
            f"**{md(run.run_id)}**: {md(machine_line(d))}  ",
            "cases: " + ", ".join(f"{v} {md(k)}" for k, v in counts.items()),
            "",
        ]
        hl = [
            [
                md(h["workload"]),
                md(h["mode"]),
                md(h["best_case"]),
                human(h["samples_per_s"]),
                "1x (baseline)" if h["best_case"] == h["baseline_case"] else fmt_ratio(h["speedup"]),
            ]
            for h in analysis.headline(run)
        ]
        out += ["## Headline", ""]
        if not _gpu_measured(run):
            out += ["No GPU was measured in this run: the best CPU configuration against CPU fp32.", ""]
        out += [
            tabulate(hl, headers=["workload", "mode", "best case", "samples/s", "vs CPU fp32"], tablefmt="github"),
            "",
        ]
        if prices is not None:
            _, cheapest = cost_rows(run, prices)
            out += [
                "## Cheapest per sample",
                "",
                *[
                    f"- {md(w)} {md(m)}: {md(o['case_id'])}, {human(o['cost'].per_million)} {md(prices.currency)} per million samples"
                    for (w, m), o in cheapest.items()
                ],
                "",
            ]
        bc = analysis.backend_comparison(run)
        if not bc.empty:
            out += [
                "## JAX vs TensorFlow",
                "",
                tabulate(
                    [[md(r["case_id"]), md(r["vs"]), fmt_ratio(r["ratio"])] for _, r in bc.iterrows()],
                    headers=["JAX case", "TensorFlow case", "JAX / TF"],
                    tablefmt="github",
                ),
                "",
            ]
        sp = analysis.speedups(run).set_index("case_id")["speedup"]
        rows = [
            [
                md(r["case_id"]),
                md(r["status"]),
                human(r["samples_per_s"]) if r["status"] == "ok" else "-",
                "baseline"
                if r["status"] == "ok" and r["case_id"] == analysis.baseline_id(r)
                else fmt_ratio(sp.get(r["case_id"])),
            ]
            for _, r in run.table.iterrows()
        ]
        out += [
            "## Cases",
            "",
            tabulate(rows, headers=["case", "status", "samples/s", "vs CPU fp32"], tablefmt="github"),
            "",
        ]
        if baseline is not None:
            ch = [
                [md(cid), fmt_ratio(c.ratio), p_value(c.p_value), c.verdict]
                for cid, c in changes(d, baseline, threshold)
            ]
            out += [
                f"## Against {md(baseline['run']['id'])}",
                "",
                tabulate(ch, headers=["case", "new/base", "p", "verdict"], tablefmt="github"),
                "",
            ]
    return "\n".join(out)


def render(
    docs: list[dict],
    out_dir: str | Path,
    baseline: dict | None = None,
    threshold: float = 0.05,
    prices: costs.Prices | None = None,
) -> Path:
    """Write ``index.html`` and ``report.md`` into ``out_dir``; returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html = html_report(docs, baseline, threshold, prices)
    md_text = markdown_report(docs, baseline, threshold, prices)
    tmp = out / ".index.html.tmp"
    tmp.write_text(html)
    tmp.replace(out / "index.html")
    (out / "report.md").write_text(md_text)
    return out
