"""Self-contained HTML report and Markdown summary from results documents.

Every string that comes from a results file is escaped (``html.escape``): GPU and CPU names,
host names, case labels and reasons are untrusted. Nothing is fetched: inline CSS, inline SVG,
the data embedded as CSV. Failed and unsupported cases never plot as zero.
"""

from __future__ import annotations

import base64
import math
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from bench import stats, storage
from bench.report import analysis, charts
from bench.report.analysis import RunData, fmt_ratio
from bench.report.peaks import datasheet_tflops

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1180px;padding:1.2rem;color:#111}
h1{font-size:1.6rem;margin:.2rem 0}h2{border-bottom:2px solid #0072B2;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:13px}th,td{border:1px solid #bbb;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#eef3f8}td.num{text-align:right;font-variant-numeric:tabular-nums}
.machine{color:#333}.pill{display:inline-block;border:1px solid #555;border-radius:1em;padding:0 .6em;margin-right:.4em}
.headline td.big{font-size:1.25rem;font-weight:600}.na{color:#666;font-style:italic}.warn{color:#8a3b00;font-weight:600}
.box{border:1px solid #999;background:#f7f7f7;padding:.6rem 1rem}.virtual{font-style:italic}
pre{white-space:pre-wrap;font-size:12px;background:#f5f5f5;padding:.5rem;overflow:auto;max-height:24rem}
svg{max-width:100%;height:auto}.scroll{overflow-x:auto}table.matrix td,table.matrix th{font-size:12px;padding:.2rem .35rem}
@media print{h2{break-after:avoid}table,svg{break-inside:avoid}}
"""


def _e(x: object) -> str:
    return escape("" if x is None else str(x), quote=True)


def _num(v: object, fmt: str = "{:.4g}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return '<span class="na">-</span>'
    return _e(fmt.format(v))


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def machine_line(doc: dict) -> str:
    """CPU, GPUs, TensorFlow, host in one line (plain text; escape before use in HTML)."""
    mi = doc.get("machine_info", {})
    ab = mi.get("accelbench", {})
    cpu = ab.get("cpu", {})
    gpus = ab.get("gpus", [])
    names: dict[str, int] = {}
    for g in gpus:
        names[g.get("name", "?")] = names.get(g.get("name", "?"), 0) + 1
    gtxt = ", ".join(f"{n}x {k}" for k, n in names.items()) or "no GPU"
    return (
        f"{mi.get('node', '?')}: {cpu.get('model', '?')} ({cpu.get('logical_cores', '?')} cores), {gtxt}; "
        f"TensorFlow {ab.get('tensorflow', '?')}, Keras {ab.get('keras', '?')}, driver {ab.get('driver_version') or '-'}"
    )


def machine_identity(doc: dict) -> tuple:
    """What must match for two runs to be compared: GPU model, driver, CUDA, TF, CPU model."""
    ab = doc.get("machine_info", {}).get("accelbench", {})
    return (
        tuple(sorted(g.get("name", "") for g in ab.get("gpus", []))),
        ab.get("driver_version"),
        ab.get("cuda_build"),
        ab.get("tensorflow"),
        ab.get("cpu", {}).get("model"),
    )


def _na(row: pd.Series, what: str) -> str:
    if row["status"] != "ok":
        return f'<span class="na">not measured ({_e(row["status"])})</span>'
    reason = row.get("gpu_telemetry") or "no telemetry"
    return f'<span class="na">not measured ({_e(reason)})</span>' if what == "energy" else '<span class="na">-</span>'


def _x(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _speed_cell(r: object, case: str | None = None, big: bool = False) -> str:
    if not isinstance(r, stats.Ratio):
        return '<td class="na">not measured</td>'
    mark = "~" if r.spans_one else ""
    sub = f"<br><small>{_e(case)}</small>" if case else ""
    return f'<td class="{"big " if big else ""}num">{mark}{_x(r.value)}x <small>[{_x(r.ci_low)}-{_x(r.ci_high)}]</small>{sub}</td>'


def _headline(runs: list[RunData]) -> str:
    html = ""
    for run in runs:
        body = []
        for h in analysis.headline(run):
            g1c, g1 = h["gpu1_best"]
            mc, m = h["multi_best"]
            best = f"{h['best_case']}: {h['samples_per_s']:.4g} samples/s"
            if h["best_case"] == h["baseline_case"]:
                best = f"CPU fp32 itself is the fastest: {best}"
            body.append(
                [
                    _e(h["workload"]),
                    _e(h["mode"]),
                    _speed_cell(h["gpu1_fp32"]),
                    _speed_cell(g1, g1c),
                    _speed_cell(m, mc),
                    _speed_cell(h["speedup"], best, big=True),
                ]
            )
        gm = analysis.geomean_headline(run)
        body.append(
            [
                "<strong>geometric mean</strong>",
                "",
                "",
                "",
                "",
                f'<td class="big num">{_e(f"{_x(gm)}x") if gm else "-"}</td>',
            ]
        )
        title = f"<p><strong>{_e(run.label)}</strong></p>" if len(runs) > 1 else ""
        headers = [
            "workload",
            "mode",
            "1 GPU, fp32",
            "1 GPU, best precision",
            "several GPUs, best",
            "best configuration",
        ]
        html += title + _table(headers, body, "headline")
    note = (
        "Speed-up = ratio of median throughputs over CPU fp32 of the same workload, mode and batch, "
        "with a bootstrap 95% CI; ~ marks a CI that includes 1."
    )
    return html + f"<p><small>{note}</small></p>"


def _cell_colour(x: float) -> str:
    # lightness falls with speed-up (greyscale-safe); blue hue; below 1 in orange
    if x < 1:
        return "#fbe3c8"
    t = min(1.0, math.log10(x) / 2)  # 1x..100x
    light = int(96 - 50 * t)
    return f"hsl(205,70%,{light}%)"


def _matrix(run: RunData) -> str:
    t = run.table
    sp = analysis.speedups(run).set_index("case_id")["speedup"]
    cols = list(
        dict.fromkeys(
            f"{r['device_kind']}{r['device_count']}{'-virtual' if r['virtual'] else ''} {r['precision']}{' xla' if r['xla'] else ''}"
            for _, r in t.iterrows()
        )
    )
    rows: dict[str, dict[str, str]] = {}
    for _, r in t.iterrows():
        rk = f"{r['workload']} {r['mode']} b{r['per_replica_batch']}"
        ck = f"{r['device_kind']}{r['device_count']}{'-virtual' if r['virtual'] else ''} {r['precision']}{' xla' if r['xla'] else ''}"
        s = sp.get(r["case_id"])
        if r["case_id"] == analysis.baseline_id(r) and r["status"] == "ok":
            cell = f'<td class="num" title="{_e(r["case_id"])}">baseline<br><small>{_num(r["samples_per_s"])}/s</small></td>'
        elif r["status"] == "ok" and isinstance(s, stats.Ratio):
            mark = "~" if s.spans_one else ""
            cell = (
                f'<td class="num" style="background:{_cell_colour(s.value)}" title="{_e(r["case_id"])}">'
                f"{mark}{_x(s.value)}x<br><small>{_x(s.ci_low)}-{_x(s.ci_high)}</small></td>"
            )
        elif r["status"] == "ok":
            cell = f'<td class="num">{_num(r["samples_per_s"])}/s</td>'
        else:
            cell = f'<td class="na" title="{_e(r["reason"])}">{_e(r["status"])}</td>'
        rows.setdefault(rk, {})[ck] = cell
    body = [[_e(rk), *[cells.get(c, "<td class='na'></td>") for c in cols]] for rk, cells in rows.items()]
    return '<div class="scroll">' + _table(["workload mode batch", *cols], body, "matrix") + "</div>"


def _throughput(run: RunData) -> str:
    ok = run.table[run.table["status"] == "ok"]
    rows = [
        [
            _e(r["case_id"]) + (' <span class="warn">unstable</span>' if r["unstable"] else ""),
            f'<td class="num">{_num(r["samples_per_s"])}</td>',
            f'<td class="num">{_num(r["samples_per_s_ci_low"])} - {_num(r["samples_per_s_ci_high"])}</td>',
            f'<td class="num">{_num(r["step_time_median_s"] * 1e3 if r["step_time_median_s"] else None)}</td>',
            f'<td class="num">{_num(r["step_time_p90_s"] * 1e3 if r["step_time_p90_s"] else None)}</td>',
            f'<td class="num">{_num(100 * r["step_time_cv"] if r["step_time_cv"] is not None else None, "{:.1f}")}</td>',
            f'<td class="num">{_num(r["rounds"], "{:.0f}")} x {_num(r["steps_per_round"], "{:.0f}")}</td>',
            f'<td class="num">{_num(r["compile_s"], "{:.2f}")}</td>',
            f'<td class="num">{_num(r["latency_p50_s"] * 1e3 if r["latency_p50_s"] else None)} / {_num(r["latency_p99_s"] * 1e3 if r["latency_p99_s"] else None)}</td>',
        ]
        for _, r in ok.iterrows()
    ]
    html = _table(
        [
            "case",
            "samples/s (median)",
            "95% CI",
            "step ms (median)",
            "step ms p90",
            "CV %",
            "rounds x steps",
            "compile s",
            "latency ms p50/p99",
        ],
        rows,
    )
    for (w, mode), g in ok.groupby(["workload", "mode"], sort=False):
        top = g.sort_values("samples_per_s", ascending=False).head(MAX_BARS) if len(g) > MAX_BARS else g
        note = f" (top {MAX_BARS} of {len(g)})" if len(g) > MAX_BARS else ""
        html += charts.bars(
            [str(c) for c in top["case_id"]],
            [float(v) for v in top["samples_per_s"]],
            [None if pd.isna(v) else float(v) for v in top["samples_per_s_ci_low"]],
            [None if pd.isna(v) else float(v) for v in top["samples_per_s_ci_high"]],
            f"Throughput, {w} {mode}{note}, {run.label}",
            "samples/s (median, 95% CI)",
            groups=[str(p) for p in top["precision"]],
        )
    return html


def _scaling(run: RunData) -> str:
    sc = analysis.scaling(run)
    if sc.empty:
        return '<p class="na">No multi-device cases in this run.</p>'
    rows = [
        [
            _e(r["case_id"])
            + (
                ' <span class="virtual">(virtual devices: shared silicon, checks correctness, not scaling)</span>'
                if r["virtual"]
                else ""
            ),
            f'<td class="num">{r["devices"]}</td>',
            f'<td class="num">{_num(r["samples_per_s"])}</td>',
            f'<td class="num">{_num(r["single_samples_per_s"])}</td>',
            f'<td class="num">{_e(fmt_ratio(r["efficiency"], pct=True))}</td>',
        ]
        for _, r in sc.iterrows()
    ]
    series: dict[str, list[tuple[int, float]]] = {}
    for _, r in sc.iterrows():
        fam = r["single_case"] + (" (virtual)" if r["virtual"] else "")
        series.setdefault(fam, [])
        if r["single_samples_per_s"] and (1, r["single_samples_per_s"]) not in series[fam]:
            series[fam].append((1, r["single_samples_per_s"]))
        series[fam].append((int(r["devices"]), float(r["samples_per_s"])))
    return _table(["case", "devices", "samples/s", "1 device", "efficiency thr_N/(N thr_1)"], rows) + charts.scaling(
        series, f"Multi-device scaling, {run.label}"
    )


def _gains(df: pd.DataFrame, empty: str) -> str:
    if df.empty:
        return f'<p class="na">{_e(empty)}</p>'
    rows = [
        [_e(r["case_id"]), _e(r["vs"]), f'<td class="num">{_e(fmt_ratio(r["gain"]))}</td>'] for _, r in df.iterrows()
    ]
    return _table(["case", "against", "gain [95% CI]"], rows)


def _energy(run: RunData) -> str:
    t = run.table[run.table["status"] == "ok"]
    rows = []
    for _, r in t.iterrows():
        if r["energy_j"] is None or pd.isna(r["energy_j"]):
            rows.append([_e(r["case_id"]), f'<td colspan="6">{_na(r, "energy")}</td>'])
            continue
        rows.append(
            [
                _e(r["case_id"]),
                f'<td class="num">{_num(r["energy_j_per_sample"])}</td>',
                f'<td class="num">{_num(r["samples_per_joule"])}</td>',
                f'<td class="num">{_num(r["power_mean_w"], "{:.0f}")}</td>',
                f'<td class="num">{_num(r["power_max_w"], "{:.0f}")}</td>',
                f'<td class="num">{_num(r["energy_above_idle_j"], "{:.1f}")}</td>',
                _e(r["throttle_reasons"] or "none"),
                _e(r.get("clock_events_info") or "none"),
            ]
        )
    html = _table(
        [
            "case",
            "J/sample",
            "samples/J",
            "mean W",
            "max W",
            "J above idle",
            "throttling (power, thermal, slowdown)",
            "other clock events (idle, app clocks, sync boost)",
        ],
        rows,
    )
    return html + _power_charts(run)


MAX_POWER_CHARTS = 16
MAX_BARS = 40


def _power_charts(run: RunData) -> str:
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
    html = ""
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
        html += charts.power_trace(traces, f"Power per GPU, {cid} ({gpus[0].get('name', '')})", idle_w)
    if len(order) > MAX_POWER_CHARTS:
        html += (
            f'<p class="na">Power traces of {len(order) - MAX_POWER_CHARTS} more GPU cases are in the results file.</p>'
        )
    return html


def _memory(run: RunData) -> str:
    t = run.table[run.table["status"] == "ok"]
    rows = [
        [
            _e(r["case_id"]),
            f'<td class="num">{_mib(r["device_peak_mem_bytes"], "{:.1f}")}</td>',
            f'<td class="num">{_mib(r.get("device_peak_mem_compile_bytes"), "{:.1f}")}</td>',
            f'<td class="num">{_mib(r["host_peak_rss_bytes"], "{:.0f}")}</td>',
            f'<td class="num">{_mib(r["nvml_memory_used_bytes"], "{:.0f}")}</td>',
        ]
        for _, r in t.iterrows()
    ]
    return _table(
        [
            "case",
            "device peak MiB, steady state (TF allocator)",
            "device peak MiB while compiling and warming up",
            "host peak RSS MiB",
            "NVML used MiB: TF's process pool (never released, so it carries over between cases of one worker)",
        ],
        rows,
    )


def _mib(v: Any, fmt: str) -> str:
    """Bytes as MiB; empty, never 0, where not measured."""
    return _num(v / 2**20 if v is not None and not pd.isna(v) and v else None, fmt)


def _efficiency(run: RunData) -> str:
    t = run.table[run.table["status"] == "ok"]
    gpus = run.doc.get("machine_info", {}).get("accelbench", {}).get("gpus", [])
    gname = gpus[0]["name"] if gpus else None
    rows = []
    for _, r in t.iterrows():
        ds = datasheet_tflops(gname, r["precision"]) if r["device_kind"] == "gpu" else None
        n = 1 if r["virtual"] else int(r["device_count"])
        pct_ds = 100 * r["achieved_tflops"] / (ds * n) if ds and r["achieved_tflops"] else None
        rows.append(
            [
                _e(r["case_id"]),
                f'<td class="num">{_num(r["achieved_tflops"], "{:.3f}")}</td>',
                f'<td class="num">{_num(r["peak_tflops_measured"], "{:.3f}")}</td>',
                f'<td class="num">{_num(100 * r["mfu_measured"] if r["mfu_measured"] else None, "{:.1f}")}</td>',
                f'<td class="num">{_num(pct_ds, "{:.1f}")}</td>',
            ]
        )
    return _table(
        ["case", "achieved TFLOP/s", "measured matmul peak TFLOP/s", "% of measured peak", "% of datasheet peak"], rows
    )


def _failed(run: RunData) -> str:
    t = run.table[run.table["status"] != "ok"]
    if t.empty:
        return "<p>Every case ran.</p>"
    return _table(
        ["case", "status", "reason"], [[_e(r["case_id"]), _e(r["status"]), _e(r["reason"])] for _, r in t.iterrows()]
    )


METHOD = """<div class="box"><ul>
<li>Each case runs in a process of its own per device configuration; devices are fixed before TensorFlow starts.</li>
<li>The first step (trace, compile) is timed apart as <em>compile s</em>; then warm-up steps with the timed shapes.</li>
<li>Timed rounds of K steps, one device sync per round (never per step); K and the rounds follow the profile's time budget (at least 6 rounds).</li>
<li>Throughput = global samples of a round / wall time of the round; the median over rounds with a distribution-free 95% CI from order statistics; CV flags unstable cases (&gt; 10%).</li>
<li>Speed-ups are ratios of medians with a bootstrap 95% CI; "~" marks a CI that spans 1. Scaling efficiency = thr_N / (N x thr_1).</li>
<li>Multi-device = MirroredStrategy, weak scaling: the per-replica batch is fixed, the global batch grows with devices. Virtual devices share one chip and check correctness only.</li>
<li><strong>fp32 means TF32 off</strong> (set explicitly; TensorFlow enables TF32 by default on Ampere and newer); tf32 turns it on; mixed_* are Keras dtype policies (float32 variables, fp16 with loss scaling or bf16 compute).</li>
<li>Synthetic data resident on each device; the input pipeline is not measured.</li>
<li>Energy: NVML's energy counter over the same window as the throughput (instant-power integration where no counter); mean power = energy / time. Missing sensors are shown as not measured, never as zero.</li>
<li>FLOPs are analytic per workload (training = 3 x forward); the matmul probe measures the reachable peak of the device in the same run.</li>
</ul></div>"""


def _environment(doc: dict) -> str:
    mi = doc.get("machine_info", {})
    ab = mi.get("accelbench", {})
    run = doc.get("run", {})
    ci = doc.get("commit_info", {})
    rows = [
        ["host", _e(mi.get("node"))],
        ["CPU", _e(f"{ab.get('cpu', {}).get('model')} flags: {', '.join(ab.get('cpu', {}).get('flags', []))}")],
        [
            "GPUs",
            _e(
                "; ".join(f"{g.get('name')} {g.get('pci_bus_id')} {g.get('uuid')}" for g in ab.get("gpus", []))
                or "none"
            ),
        ],
        ["GPU note", _e(ab.get("no_gpu_reason") or "-")],
        ["driver / CUDA driver", _e(f"{ab.get('driver_version') or '-'} / {ab.get('cuda_driver_version') or '-'}")],
        ["CUDA / cuDNN (TF build)", _e(f"{ab.get('cuda_build') or '-'} / {ab.get('cudnn_build') or '-'}")],
        ["TensorFlow / Keras", _e(f"{ab.get('tensorflow')} / {ab.get('keras')}")],
        ["Python", _e(mi.get("python_version"))],
        ["commit", _e(f"{ci.get('id', '-')} {'(dirty)' if ci.get('dirty') else ''}")],
        ["command", _e("accelbench " + " ".join(run.get("argv", [])))],
        ["profile", _e(run.get("profile"))],
        ["run", _e(f"{run.get('id')} {run.get('start')} -> {run.get('end')} ({run.get('status')})")],
        ["RAPL", _e(ab.get("rapl"))],
    ]
    return _table(["", ""], rows)


def _data(run: RunData) -> str:
    csv = run.table.to_csv(index=False)
    b64 = base64.b64encode(csv.encode()).decode()
    return (
        f'<p><a download="{_e(run.run_id)}.csv" href="data:text/csv;base64,{b64}">Download the data as CSV</a> '
        f"({len(run.table)} cases, one row each).</p><details><summary>Show the CSV</summary><pre>{_e(csv)}</pre></details>"
    )


def _baseline(run: RunData, base: dict, threshold: float) -> str:
    note = ""
    if machine_identity(run.doc) != machine_identity(base):
        note = (
            '<p class="warn">The two runs come from different machine identities (GPU model, driver, CUDA, '
            f"TensorFlow or CPU differ): {_e(machine_line(base))} vs {_e(machine_line(run.doc))}.</p>"
        )
    rows = []
    for cid, change in changes(run.doc, base, threshold):
        rows.append(
            [
                _e(cid),
                f'<td class="num">{_e(fmt_ratio(change.ratio))}</td>',
                f'<td class="num">{change.p_value:.3g}</td>',
                f'<td class="{"warn" if change.verdict == "regressed" else ""}">{_e(change.verdict)}</td>',
            ]
        )
    return note + (
        _table(
            ["case", "new / baseline [95% CI]", "Mann-Whitney p", f"verdict (threshold {threshold:.0%}, p < 0.01)"],
            rows,
        )
        if rows
        else '<p class="na">No case was measured in both runs.</p>'
    )


def changes(doc: dict, base: dict, threshold: float) -> list[tuple[str, stats.Change]]:
    """Per case measured in both: the change of throughput against the baseline (rule 26)."""
    new, old = analysis.load_run(doc), analysis.load_run(base)
    out = []
    for cid, s in new.samples.items():
        if s and old.samples.get(cid):
            out.append((cid, stats.compare(old.samples[cid], s, threshold=threshold)))
    return out


def regressions(doc: dict, base: dict, threshold: float) -> list[tuple[str, float]]:
    """(case id, ratio) of every case flagged as regressed."""
    return [(cid, c.ratio.value) for cid, c in changes(doc, base, threshold) if c.verdict == "regressed"]


def html_report(docs: list[dict], baseline: dict | None = None, threshold: float = 0.05) -> str:
    """The whole report as one HTML string."""
    runs = [analysis.load_run(d, f"{d['run']['id']} ({d.get('machine_info', {}).get('node', '?')})") for d in docs]
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>accelbench report {_e(runs[0].run_id)}</title>"
        f"<meta name='viewport' content='width=device-width,initial-scale=1'><style>{CSS}</style></head><body>",
        "<h1>accelbench: how much faster, at what cost</h1>",
    ]
    for run in runs:
        counts = analysis.status_counts(run)
        failed = sum(v for k, v in counts.items() if k not in ("ok", "unsupported"))
        parts.append(
            f'<p class="machine"><strong>{_e(run.label)}</strong>: {_e(machine_line(run.doc))}<br>'
            f'<span class="pill">{counts.get("ok", 0)} ok</span><span class="pill">{counts.get("unsupported", 0)} unsupported</span>'
            f'<span class="pill">{failed} failed</span> run {_e(run.doc["run"].get("status"))}, profile {_e(run.doc["run"].get("profile"))}</p>'
        )
    parts += ["<h2>Headline: best configuration vs CPU fp32</h2>", _headline(runs)]
    for run in runs:
        sfx = f" - {_e(run.label)}" if len(runs) > 1 else ""
        parts += [
            f"<h2>Speed-up matrix (vs CPU fp32, same workload, mode and batch){sfx}</h2>",
            _matrix(run),
            f"<h2>Throughput{sfx}</h2>",
            _throughput(run),
            f"<h2>Multi-device scaling{sfx}</h2>",
            _scaling(run),
            f"<h2>Precision gains (vs fp32 on the same devices){sfx}</h2>",
            _gains(analysis.precision_gains(run), "No mixed-precision or TF32 case was measured."),
            f"<h3>XLA on vs off{sfx}</h3>",
            _gains(analysis.xla_gains(run), "XLA on and off did not both run (use --xla both)."),
            f"<h2>Energy and power{sfx}</h2>",
            _energy(run),
            f"<h2>Memory{sfx}</h2>",
            _memory(run),
            f"<h2>Compute efficiency{sfx}</h2>",
            _efficiency(run),
            f"<h2>Unsupported and failed cases{sfx}</h2>",
            _failed(run),
        ]
        if baseline is not None:
            parts += [
                f"<h2>Against the baseline {_e(baseline['run']['id'])}{sfx}</h2>",
                _baseline(run, baseline, threshold),
            ]
    parts += ["<h2>Method</h2>", METHOD]
    for run in runs:
        parts += [
            f"<h2>Environment - {_e(run.label)}</h2>",
            _environment(run.doc),
            f"<h2>Data - {_e(run.label)}</h2>",
            _data(run),
        ]
    parts.append("</body></html>")
    return "\n".join(parts)


def markdown_report(docs: list[dict], baseline: dict | None = None, threshold: float = 0.05) -> str:
    """Headline and speed-up table, sized for a CI job summary or a PR comment."""
    out = ["# accelbench report", ""]
    for d in docs:
        run = analysis.load_run(d)
        counts = analysis.status_counts(run)
        out += [
            f"**{run.run_id}**: {machine_line(d)}  ",
            "cases: " + ", ".join(f"{v} {k}" for k, v in counts.items()),
            "",
        ]
        hl = [
            [h["workload"], h["mode"], h["best_case"], f"{h['samples_per_s']:.4g}", fmt_ratio(h["speedup"])]
            for h in analysis.headline(run)
        ]
        out += [
            "## Headline",
            "",
            tabulate(hl, headers=["workload", "mode", "best case", "samples/s", "vs CPU fp32"], tablefmt="github"),
            "",
        ]
        sp = analysis.speedups(run).set_index("case_id")["speedup"]
        rows = [
            [
                r["case_id"],
                r["status"],
                f"{r['samples_per_s']:.4g}" if r["status"] == "ok" else "-",
                fmt_ratio(sp.get(r["case_id"])),
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
                [cid, fmt_ratio(c.ratio), f"{c.p_value:.3g}", c.verdict] for cid, c in changes(d, baseline, threshold)
            ]
            out += [
                f"## Against {baseline['run']['id']}",
                "",
                tabulate(ch, headers=["case", "new/base", "p", "verdict"], tablefmt="github"),
                "",
            ]
    return "\n".join(out)


def render(docs: list[dict], out_dir: str | Path, baseline: dict | None = None, threshold: float = 0.05) -> Path:
    """Write ``index.html`` and ``report.md`` into ``out_dir``; returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html = html_report(docs, baseline, threshold)
    md = markdown_report(docs, baseline, threshold)
    tmp = out / ".index.html.tmp"
    tmp.write_text(html)
    tmp.replace(out / "index.html")
    (out / "report.md").write_text(md)
    return out
