"""Report sections that set one way of running a case against another: the backends side by side, model vs data parallel."""

from __future__ import annotations

import pandas as pd

from bench import stats
from bench.report import analysis, charts
from bench.report.analysis import RunData, fmt_ratio
from bench.report.html import Cell, Para, Svg, Table, num
from bench.report.numbers import human

BACKENDS_NOTE = (
    "Side by side: median samples/s of the same workload, mode, devices, precision and batch on each backend, "
    "[95% CI within its worker]. Ratios: of median throughputs, bootstrap 95% CI (~ where it includes 1). JAX "
    "compiles the whole step (forward, backward, optimizer) with XLA; TensorFlow runs its step as a tf.function "
    "graph without XLA, or with XLA on the forward and backward pass; Keras on torch runs eagerly, or with "
    "torch.compile over forward and loss (the optimizer eager); native PyTorch is the same model written in "
    "plain torch (autocast, torch.optim), compiled over model and loss where it says torch.compile. Native "
    "PyTorch / Keras on torch is what Keras costs on torch."
)
PARALLELISM_NOTE = (
    "Model parallel keeps one data-parallel replica (the same global batch as one device) and splits the "
    "dense and attention kernels over the devices; data parallel gives every device the whole model and "
    "its own batch. Ratio = model / data parallel samples/s with bootstrap 95% CI. On virtual devices "
    "(one CPU split) it checks the sharding, not the speed."
)


def backends(run: RunData, pool: dict[str, list[float]] | None = None) -> list:
    """Every backend's figure for the same case side by side, then the ratios with their CIs and a chart."""
    present, side = analysis.backends_side_by_side(run)
    df = analysis.backend_comparison(run, pool)
    if not side and df.empty:
        return [
            Para(
                "No case was measured on two backends in this run (use --backend all, a comma list such as "
                "--backend jax,torch, or give results files of two backends together).",
                cls="na",
            )
        ]
    blocks: list = []
    if side:
        rows = [[key] + [_rate(vs.get(v)) for v in present] for key, vs in side]
        blocks.append(Table(["case", *(f"{v} samples/s" for v in present)], rows, label="table: backends side by side"))
    rows = [
        [
            r["case_id"],
            r["vs"],
            r["pair"],
            num(r["samples_per_s"]),
            num(r["vs_samples_per_s"]),
            Cell(fmt_ratio(r["ratio"]), cls="num"),
        ]
        for _, r in df.iterrows()
    ]
    if rows:
        heads = ["case", "against", "ratio of", "samples/s", "its samples/s", "ratio [95% CI]"]
        blocks.append(Table(heads, rows, label="table: backend throughput ratios"))
    blocks.append(Para(BACKENDS_NOTE, small=True))
    ok = df[df["ratio"].map(lambda r: isinstance(r, stats.Ratio))]
    if not ok.empty:
        svg = charts.bars(
            [f"{c} vs {v}" for c, v in zip(ok["case_id"], ok["vs"])],
            [r.value for r in ok["ratio"]],
            [r.ci_low for r in ok["ratio"]],
            [r.ci_high for r in ok["ratio"]],
            f"Backend throughput ratios, {run.label}",
            "ratio of median samples/s (1 = equal; 95% CI)",
            groups=list(ok["pair"]),
        )
        blocks.append(Svg(svg))
    return blocks


def _rate(row: pd.Series | None) -> Cell:
    """A case's median samples/s with its within-worker CI, or ``-`` where that backend did not measure it."""
    if row is None:
        return num(None)
    lo, hi = row.get("samples_per_s_ci_low"), row.get("samples_per_s_ci_high")
    ci = f" [{human(lo)}-{human(hi)}]" if lo is not None and hi is not None and not (pd.isna(lo) or pd.isna(hi)) else ""
    return Cell(f"{human(row['samples_per_s'])}{ci}", cls="num")


def parallelism(run: RunData) -> list:
    """Model vs data parallel per case, with what the model split covered."""
    df = analysis.parallelism_comparison(run)
    if df.empty:
        return [Para("Model and data parallelism did not both run (use --backend jax --parallelism both).", cls="na")]
    split = (
        run.table.set_index("case_id")["model_parallel_split_fraction"]
        if "model_parallel_split_fraction" in run.table
        else None
    )
    rows = []
    for _, r in df.iterrows():
        frac = split.get(r["case_id"]) if split is not None else None
        rows.append(
            [
                r["case_id"],
                r["vs"],
                num(None if frac is None or pd.isna(frac) else 100 * float(frac), "{:.0f}"),
                Cell(fmt_ratio(r["gain"]), cls="num"),
            ]
        )
    headers = ["model parallel case", "data parallel case", "% of weights split", "model / data [95% CI]"]
    return [Table(headers, rows), Para(PARALLELISM_NOTE, small=True)]
