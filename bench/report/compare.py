"""Report sections that set one way of running a case against another: JAX vs TensorFlow, model vs data parallel."""

from __future__ import annotations

import pandas as pd

from bench import stats
from bench.report import analysis, charts
from bench.report.analysis import RunData, fmt_ratio
from bench.report.html import Cell, Para, Svg, Table, num

BACKENDS_NOTE = (
    "JAX / TensorFlow = ratio of median throughputs of the same workload, mode, devices, precision and batch, "
    "bootstrap 95% CI (~ where it includes 1). JAX compiles the whole step (forward, backward, optimizer) "
    "with XLA; TensorFlow runs its step as a tf.function graph without XLA, or with XLA on the forward and backward "
    "pass only, so both of its variants are shown where they ran."
)
PARALLELISM_NOTE = (
    "Model parallel keeps one data-parallel replica (the same global batch as one device) and splits the "
    "dense and attention kernels over the devices; data parallel gives every device the whole model and "
    "its own batch. Ratio = model / data parallel samples/s with bootstrap 95% CI. On virtual devices "
    "(one CPU split) it checks the sharding, not the speed."
)


def backends(run: RunData, pool: dict[str, list[float]] | None = None) -> list:
    """JAX vs TensorFlow per case, with a chart of the ratios."""
    df = analysis.backend_comparison(run, pool)
    if df.empty:
        return [
            Para(
                "TensorFlow and JAX did not both measure a case in this run (use --backend all, "
                "or give a TensorFlow and a JAX results file together).",
                cls="na",
            )
        ]
    rows = [
        [
            r["case_id"],
            r["vs"],
            Cell("on" if r["tf_xla"] else "off", cls="num"),
            num(r["samples_per_s"]),
            num(r["vs_samples_per_s"]),
            Cell(fmt_ratio(r["ratio"]), cls="num"),
        ]
        for _, r in df.iterrows()
    ]
    headers = ["JAX case", "TensorFlow case", "TF XLA", "JAX samples/s", "TF samples/s", "JAX / TF [95% CI]"]
    ok = df[df["ratio"].map(lambda r: isinstance(r, stats.Ratio))]
    blocks: list = [Table(headers, rows), Para(BACKENDS_NOTE, small=True)]
    if not ok.empty:
        svg = charts.bars(
            [f"{c} vs TF{' xla' if x else ''}" for c, x in zip(ok["case_id"], ok["tf_xla"])],
            [r.value for r in ok["ratio"]],
            [r.ci_low for r in ok["ratio"]],
            [r.ci_high for r in ok["ratio"]],
            f"JAX / TensorFlow throughput, {run.label}",
            "ratio of median samples/s (1 = equal; 95% CI)",
            groups=["vs TF with XLA" if x else "vs TF without XLA" for x in ok["tf_xla"]],
        )
        blocks.append(Svg(svg))
    return blocks


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
