"""The report's resource sections: energy and power, memory, compute efficiency, cost, environment, data.

Plain data (tables of cells, paragraphs, charts) for the templates, which escape every value.
"""

from __future__ import annotations

import base64
from typing import Any

import pandas as pd

from bench import storage
from bench.cases import Case
from bench.report import analysis, charts
from bench.report import cost as costs
from bench.report.analysis import RunData
from bench.report.html import Cell, Csv, Para, Svg, Table, na, num
from bench.report.numbers import human
from bench.report.peaks import datasheet_tflops
from bench.telemetry.energy_check import COUNTER_STEP_S, SHORT_WINDOW_SOURCE

MAX_POWER_CHARTS = 16


def first_gpu(doc: dict) -> dict:
    """The machine's first GPU as results record it ({} on a CPU-only machine); one-GPU cases run on it."""
    gpus = doc.get("machine_info", {}).get("accelbench", {}).get("gpus", [])
    return gpus[0] if gpus else {}


def gpu_name(doc: dict) -> str | None:
    """The first GPU's name as recorded in the machine info (None on a CPU-only machine)."""
    return first_gpu(doc).get("name")


def energy(run: RunData) -> list:
    """Energy per sample, power and clock events per case, per-node figures and power traces.

    Unmeasured cases take one line per reason.
    """
    t = run.table[run.table["status"] == "ok"]
    rows: list[list] = []
    missing: dict[str, list[str]] = {}
    short = []
    for _, r in t.iterrows():
        if r["energy_j"] is None or pd.isna(r["energy_j"]):
            why = r.get("energy_reason") or r.get("gpu_telemetry") or "no telemetry"
            missing.setdefault(str(why), []).append(str(r["case_id"]))
            continue
        mean, peak = r["power_mean_w"], r["power_max_w"]
        if r["energy_source"] == SHORT_WINDOW_SOURCE:
            short.append(float(r["telemetry_window_s"]))
        # a mean above the highest sample cannot be a measurement: the window cannot resolve it
        resolved = mean is None or pd.isna(mean) or peak is None or pd.isna(peak) or mean <= peak
        rows.append(
            [
                r["case_id"],
                num(r["energy_j_per_sample"]) if resolved else na("window too short"),
                num(r["samples_per_joule"]) if resolved else na("-"),
                num(mean, "{:.0f}") if resolved else na("-"),
                num(peak, "{:.0f}"),
                num(r.get("power_limit_w"), "{:.0f}"),
                num(r["energy_above_idle_j"], "{:.1f}") if resolved else na("-"),
                "instant power (short window)"
                if r["energy_source"] == SHORT_WINDOW_SOURCE
                else r["energy_source"] or "-",
                r["throttle_reasons"] or "none",
                r.get("clock_events_info") or "none",
            ]
        )
    headers = ["case", "J/sample", "samples/J", "mean W (energy / window)", "max W (instant sample)", "power limit W"]
    headers += ["J above idle", "energy source", "throttling (power, thermal, slowdown)"]
    headers.append("other clock events (idle, app clocks, sync boost)")
    for why, ids in missing.items():
        label = ids[0] if len(ids) == 1 else Cell(f"{len(ids)} cases", below=", ".join(ids))
        rows.append([label, na(f"not measured ({why})", colspan=len(headers) - 1)])
    blocks: list = []
    if short:
        blocks.append(
            Para(
                f"{len(short)} case(s) timed for {min(short):.2f}-{max(short):.2f} s: fewer than ten steps of NVML's "
                f"energy counter (~{COUNTER_STEP_S * 1000:.0f} ms a step, so one step would be over 10% of the "
                "energy). Their energy is the integral of the instant-power samples (every ~0.1 s): a few percent, "
                "not enough to rank cases that differ by less. Longer rounds (the standard profile) use the counter.",
                cls="box",
            )
        )
    return [*blocks, Table(headers, rows), *_per_node(run), *_power_charts(run)]


def _per_node(run: RunData) -> list:
    """A cluster run's figures node by node (all-gathered by the workers onto rank 0)."""
    rows: list[list] = []
    workers = (run.doc.get("run", {}).get("cluster") or {}).get("workers", [])
    for rec in storage.case_records(run.doc):
        e = rec.info
        if not rec.ok or not e.get("per_node_host_peak_rss_bytes"):
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
    recs = {r.id: r for r in storage.case_records(run.doc) if r.ok and (r.get("telemetry") or {}).get("gpus")}
    first = []
    for h in analysis.headline(run):
        first += [h["best_case"], h["gpu1_best"][0], h["multi_best"][0]]
    order = list(dict.fromkeys([c for c in first if c in recs] + [c for c in run.table["case_id"] if c in recs]))
    idle_all = run.doc["run"].get("idle_power_w") or {}
    blocks: list = []
    for cid in order[:MAX_POWER_CHARTS]:
        gpus = recs[cid].info["telemetry"]["gpus"]
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


def _peak_cell(r: pd.Series) -> Cell:
    """The device peak; where the allocator could not attribute it (a shared JAX worker), XLA's estimate, said so."""
    cell = _mib(r["device_peak_mem_bytes"], "{:.1f}")
    if r.get("device_peak_mem_source") == "xla estimate":
        return Cell(cell.text, cls="num", below="XLA estimate (not attributable)")
    return cell


def _mib(v: Any, fmt: str) -> Cell:
    """Bytes as MiB; empty, never 0, where not measured."""
    return num(v / 2**20 if v is not None and not pd.isna(v) and v else None, fmt)


# what each backend's memory figures hold, for the headings: (device peak, NVML used)
MEMORY_SCOPE = {
    "tensorflow": (
        "device peak MiB, steady state (TensorFlow's allocator, peak reset after compile and warm-up)",
        "NVML used MiB: TensorFlow's process pool (never released, so it carries over between cases of one worker)",
    ),
    "jax": (
        "device peak MiB incl. compile (JAX peak_bytes_in_use, which cannot be reset: the case's own where it "
        "rose above every earlier case of its worker, smallest first; else XLA's estimate of the step, marked)",
        "NVML used MiB: XLA's client pool on demand (no preallocation, capped at the worker's memory fraction)",
    ),
    **{
        b: (
            "device peak MiB, steady state (torch.cuda.max_memory_allocated per rank, summed; reset after compile "
            "and warm-up; torch keeps no such figure for the CPU)",
            "NVML used MiB: torch's caching allocator (kept between cases of a worker, emptied after each)",
        )
        for b in ("torch", "torch-native")
    },
}
RSS_HEADING = "host peak RSS MiB (the worker's high-water mark: includes what earlier cases of the worker kept)"


def memory(run: RunData) -> list:
    """Device and host memory peaks per case; one table per backend, its headings naming that backend's allocator."""
    t = run.table[run.table["status"] == "ok"]
    blocks: list = []
    for backend, g in t.groupby("backend", sort=False):
        device, pool = MEMORY_SCOPE.get(str(backend), MEMORY_SCOPE["tensorflow"])
        rows = [
            [
                r["case_id"],
                _peak_cell(r),
                _mib(r.get("device_peak_mem_compile_bytes"), "{:.1f}"),
                _mib(r["host_peak_rss_bytes"], "{:.0f}"),
                # tenants: NVML's per-process figures, summed over the tenants
                _mib(r["nvml_memory_used_bytes"], "{:.0f}")
                if r["nvml_memory_used_bytes"] is not None and not pd.isna(r["nvml_memory_used_bytes"])
                else _mib(r.get("tenant_gpu_mem_sum_bytes"), "{:.0f}"),
            ]
            for _, r in g.iterrows()
        ]
        compile_heading = (
            "device peak MiB while compiling and warming up"
            if backend != "jax"
            else "device peak MiB while compiling (in the lifetime peak)"
        )
        if t["backend"].nunique() > 1:
            blocks.append(Para(f"{backend}:", cls="machine"))
        label = f"table: memory of the {backend} cases"  # one region per backend, named apart
        blocks.append(Table(["case", device, compile_heading, RSS_HEADING, pool], rows, label=label))
    return blocks


# a case within this share of the probe's peak runs its GEMMs as fast as the probe's (the probe's
# best-of spread on the H200 was ~1%): the probe is no ceiling there, only a matching reference
AT_PEAK = 0.97


def _pct_of_peak(mfu: Any) -> Cell:
    if mfu is None or pd.isna(mfu):
        return num(None)
    if mfu >= AT_PEAK:
        return Cell(f"{100 * mfu:.0f}", cls="num", after="at the probe's peak")
    return num(100 * mfu, "{:.1f}")


def efficiency(run: RunData) -> list:
    """Achieved TFLOP/s (executed FLOPs) against the measured matmul peak and the datasheet peak.

    The model-FLOPs share of the datasheet (the MFU of papers) is beside it.
    """
    t = run.table[run.table["status"] == "ok"]
    gname = gpu_name(run.doc)
    rows = []
    at_peak = []
    for _, r in t.iterrows():
        ds = datasheet_tflops(gname, r["precision"]) if r["device_kind"] == "gpu" else None
        n = Case.of(r).physical_devices  # every chip on every node (a cluster's throughput is global)
        pct_ds = 100 * r["achieved_tflops"] / (ds * n) if ds and r["achieved_tflops"] else None
        model = r.get("model_flops_per_sample")
        model_tflops = model * r["samples_per_s"] / 1e12 if model and not pd.isna(model) else None
        mfu_model = 100 * model_tflops / (ds * n) if ds and model_tflops else None
        if r["mfu_measured"] and not pd.isna(r["mfu_measured"]) and r["mfu_measured"] >= AT_PEAK:
            at_peak.append(str(r["case_id"]))
        rows.append(
            [
                r["case_id"],
                num(r["flops_per_sample"], "{:,.0f}"),
                num(r["achieved_tflops"], "{:.3f}"),
                Cell(f"{r['peak_tflops_measured']:.3f}", cls="num", after=f"probe n={int(r['probe_n'])}")
                if pd.notna(r.get("probe_n")) and pd.notna(r["peak_tflops_measured"])  # a case without a probe: NaN
                else num(r["peak_tflops_measured"], "{:.3f}"),
                _pct_of_peak(r["mfu_measured"]),
                num(pct_ds, "{:.1f}"),
                num(mfu_model, "{:.1f}"),
            ]
        )
    headers = ["case", "FLOPs per sample (executed)", "achieved TFLOP/s (executed FLOPs)"]
    headers += ["measured matmul peak TFLOP/s (probe size)", "% of measured peak", "% of datasheet peak"]
    headers.append("MFU, model FLOPs (3 x forward) / datasheet, %")
    blocks: list = [Table(headers, rows)]
    notes = (
        "Executed FLOPs count what the step computes: forward, and backward without the gradient of the data "
        "input, which no framework computes. Model FLOPs (3 x forward, the convention of MFU papers) count it "
        "too: 8.5% more for the standard MLP, so their MFU reads higher."
    )
    if at_peak:
        notes += (
            f" {', '.join(at_peak)}: at or above {100 * AT_PEAK:.0f}% of the measured peak, i.e. the workload's "
            "GEMMs run as fast as the probe's, within the probe's noise; the probe is a reference measured "
            "in the same run, not a ceiling."
        )
    blocks.append(Para(notes, small=True))
    return blocks


def cost_rows(run: RunData, prices: costs.Prices) -> tuple[list[dict], dict[tuple[str, str], dict]]:
    """Per measured case its cost per million samples; and the cheapest case per (workload, mode)."""
    gname = gpu_name(run.doc)
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


def cost(run: RunData, prices: costs.Prices) -> list:
    """Cost per million samples per case and the cheapest per workload and mode."""
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


CPU_ALLOCATORS = {  # bench.backends.tf_cpu_allocator; a run from before it was recorded shows "-"
    "bfc": "BFC (TF_CPU_ALLOCATOR_USE_BFC=true, the accelbench default: it keeps the memory peak)",
    "default": "the TensorFlow default (TF_CPU_ALLOCATOR_USE_BFC off: slower on large buffers)",
}


def environment(doc: dict) -> Table:
    """Where and how the run was made: machine, software, command, run."""
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
        ["TensorFlow CPU allocator", CPU_ALLOCATORS.get(ab.get("tf_cpu_allocator"), "-")],
        [
            "JAX / jaxlib / Keras",
            f"{ab.get('jax')} / {ab.get('jaxlib')} / {ab.get('jax_keras')}" if ab.get("jax") else "-",
        ],
        ["JAX GPU note", ab.get("jax_no_gpu_reason") or "-"],
        [
            "torch / its CUDA build / Keras",
            f"{ab.get('torch')} / {ab.get('torch_cuda_build') or 'CPU only'} / {ab.get('torch_keras')}"
            if ab.get("torch")
            else "-",
        ],
        ["torch GPU note", ab.get("torch_no_gpu_reason") or "-"],
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


def data(run: RunData) -> Csv:
    """The run's table as an embedded CSV download."""
    csv = run.table.to_csv(index=False)
    return Csv(f"{run.run_id}.csv", base64.b64encode(csv.encode()).decode(), csv, len(run.table))
