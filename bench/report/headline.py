"""The report's headline (the best configuration per workload and mode) and what each run measured.

Plain data (tables of cells, paragraphs) for the templates, which escape every value.
"""

from __future__ import annotations

import pandas as pd

from bench import stats
from bench.report import analysis
from bench.report.analysis import RunData, fmt_ratio
from bench.report.html import Cell, Para, Table, na, num
from bench.report.numbers import human
from workloads import WORKLOADS


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
    "gpu1_fp32": lambda p: p["device"] == "gpu1" and p["precision"] == "fp32",
    "gpu1_best": lambda p: p["device"] == "gpu1",
    "multi_best": lambda p: p["device"].startswith("gpu") and p["device"] != "gpu1",
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
    if any(covers(p) for p in h["gpu_not_run"]):
        return na("not run")
    if run.doc.get("run", {}).get("planned") and not any(covers(p) for p in h["planned"]):
        return na("not planned")
    return na("not measured")


def _unstable(run: RunData, *case_ids: str) -> str:
    """``; baseline unstable (CV 12.3%)`` for each of the cases flagged unstable, as the matrix marks them."""
    rows = {str(r["case_id"]): r for _, r in run.table.iterrows()}
    out = ""
    for role, cid in zip(("", "baseline "), case_ids):
        r = rows.get(cid)
        if r is not None and bool(r["unstable"]):
            out += f"; {role}unstable (CV {100 * float(r['step_time_cv']):.1f}%)"
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
    larger = any(not toy(r) for r in runs)
    for run in runs:
        if toy(run) and larger:  # toy models beside real ones: no claims from the toys
            blocks += [
                Para(run.label, cls="machine"),
                Para(f"Left out of the headline: {TOY} (the smoke profile's models; see Models and sizes).", cls="box"),
            ]
            continue
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
        if toy(run):
            blocks.append(
                Para(f"Smoke profile, {TOY}: launch and framework overhead dominate these figures.", cls="box")
            )
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


TOY = "toy sizes: checks the machinery, not for conclusions"


def toy(run: RunData) -> bool:
    """Whether the run measured the smoke profile's toy models."""
    return run.doc.get("run", {}).get("profile") == "smoke"


def models(runs: list[RunData]) -> list:
    """What each run measured: per workload its profile, parameters and FLOPs per sample.

    The model's name where a case is exactly a known one (ResNet-50 v1.5, BERT-base blocks).
    """
    rows = []
    for run in runs:
        profile = str(run.doc.get("run", {}).get("profile") or "?")
        t = run.table
        for (w, knobs), g in t.assign(knobs=t["knobs"].fillna("")).groupby(["workload", "knobs"], sort=False):
            params = g["params"].dropna()
            by_mode = {m: gm["flops_per_sample"].dropna() for m, gm in g.groupby("mode")}
            model = g["model_flops_per_sample"].dropna() if "model_flops_per_sample" in g else pd.Series()
            infer = by_mode.get("infer", by_mode.get("serve", pd.Series()))
            if infer.empty and not model.empty:  # training only: forward = model FLOPs / 3
                infer = model[g.loc[model.index, "mode"] == "train"] // 3
            train = by_mode.get("train", pd.Series())
            train_model = model[g.loc[model.index, "mode"] == "train"] if not model.empty else pd.Series()
            spec = WORKLOADS.get(str(w))
            known = spec.known_as.get(profile, "") if spec and not knobs else ""  # a sweep's other size: another model
            rows.append(
                [
                    *([run.label] if len(runs) > 1 else []),
                    f"{w} ({knobs})" if knobs else str(w),
                    Cell(profile, below=TOY if profile == "smoke" else None),
                    num(params.iloc[0] if not params.empty else None, "{:,.0f}"),
                    num(infer.iloc[0] if not infer.empty else None, "{:,.0f}"),
                    num(train.iloc[0] if not train.empty else None, "{:,.0f}"),
                    num(train_model.iloc[0] if not train_model.empty else None, "{:,.0f}"),
                    known or "-",
                    ", ".join(f"b{b}" for b in sorted({int(b) for b in g["per_replica_batch"].dropna()})),
                ]
            )
    headers = [*(["run"] if len(runs) > 1 else []), "workload", "profile", "parameters (incl. non-trainable)"]
    headers += ["FLOPs/sample, forward", "FLOPs/sample, training (executed)", "training, model FLOPs (3 x forward)"]
    headers += ["exactly", "batches (per device)"]
    return [Table(headers, rows, label="models and sizes")]
