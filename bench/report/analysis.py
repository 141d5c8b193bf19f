"""What the reports show, computed from results documents: speed-ups, scaling, precision gains.

Ratios are ratios of medians of per-round throughput with a bootstrap 95% CI (``bench.stats``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from scipy import stats as sps

from bench import stats, storage
from bench.cases import Case, parse_id
from bench.report.numbers import human


@dataclass(frozen=True)
class RunData:
    """One results document with its tidy table and per-case throughput samples."""

    label: str
    doc: dict
    table: pd.DataFrame
    samples: dict[str, list[float]]

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.doc["run"]["id"]

    def samples_median(self, case_id: str) -> float:
        """The median of a measured case's per-round throughput (samples/s)."""
        return float(pd.Series(self.samples[case_id]).median())


def load_run(doc: dict, label: str | None = None) -> RunData:
    """Tidy table (one row per case, storage.COLUMNS) and samples of a results document."""
    rows = storage.tidy_rows(doc)
    table = pd.DataFrame(rows, columns=storage.COLUMNS)
    order = {cid: i for i, cid in enumerate(doc.get("run", {}).get("planned") or [])}
    if order:
        table = table.assign(_o=table["case_id"].map(lambda c: order.get(c, len(order)))).sort_values(
            "_o", kind="stable"
        )
        table = table.drop(columns="_o").reset_index(drop=True)
    samples: dict[str, list[float]] = {r.id: r.throughput_samples for r in storage.case_records(doc) if r.ok}
    return RunData(label or doc["run"]["id"], doc, table, samples)


def baseline_id(row: pd.Series | dict) -> str:
    """Id of the CPU fp32 (no XLA) case of the same backend, workload, mode and per-replica batch."""
    return Case.of(row).baseline().id


def ratio(run: RunData, num: str, den: str) -> stats.Ratio | None:
    """median(num)/median(den) with CI, or None unless both were measured."""
    a, b = run.samples.get(num), run.samples.get(den)
    if not a or not b:
        return None
    return _with_spread(run, stats.ratio_of_medians(a, b), num, den)


def _with_spread(run: RunData, r: stats.Ratio, num: str, den: str) -> stats.Ratio:
    """Where the run measured both sides' between-worker spread, the CI is at least its run-level one.

    The rounds' bootstrap describes two workers; a rerun of both moves each median by its
    kind's between-worker sigma (``bench.spread``): log ratio +- t x sqrt(sigma_a^2 + sigma_b^2).
    """
    spread = run.doc.get("run", {}).get("between_worker_spread") or {}
    try:
        sides = [s for s in (spread.get(parse_id(c)["device"][:3]) for c in (num, den)) if s]
    except ValueError:
        return r
    if len(sides) < 2:
        return r
    t = float(sps.t.ppf(0.975, min(int(s["df"]) for s in sides)))
    f = math.exp(t * math.sqrt(sum(float(s["sigma_log"]) ** 2 for s in sides)))
    return stats.Ratio(r.value, min(r.ci_low, r.value / f), max(r.ci_high, r.value * f))


def fmt_ratio(r: stats.Ratio | None, pct: bool = False) -> str:
    """``3.10x [2.95-3.24]``, ``~1.01x [0.97-1.05]`` where the CI spans 1; ``-`` when absent."""
    if not isinstance(r, stats.Ratio):  # None, or NaN where pandas filled a gap
        return "-"
    if pct:
        return f"{100 * r.value:.0f}% [{100 * r.ci_low:.0f}-{100 * r.ci_high:.0f}]"
    mark = "~" if r.spans_one else ""
    return f"{mark}{human(r.value)}x [{human(r.ci_low)}-{human(r.ci_high)}]"


def speedups(run: RunData) -> pd.DataFrame:
    """Each measured case's speed-up over CPU fp32 of its workload, mode and batch."""
    out = []
    for _, row in run.table.iterrows():
        r = ratio(run, row["case_id"], baseline_id(row)) if row["status"] == "ok" else None
        out.append({"case_id": row["case_id"], "speedup": r})
    return pd.DataFrame(out, columns=["case_id", "speedup"])


def _best(run: RunData, g: pd.DataFrame) -> tuple[str | None, stats.Ratio | None]:
    if g.empty:
        return None, None
    best = g.loc[g["samples_per_s"].astype(float).idxmax()]  # type: ignore[call-overload]
    return best["case_id"], ratio(run, best["case_id"], baseline_id(best))


def not_run(run: RunData) -> list[str]:
    """Planned cases with no record: the run stopped part-way, was killed, or is still running."""
    recorded = set(run.table["case_id"])
    return [c for c in run.doc.get("run", {}).get("planned") or [] if c not in recorded]


def _parts(ids: list[str]) -> list[dict[str, str]]:
    """The named parts (``bench.cases.parse_id``) of each id, with its ``id``; ids it cannot read are left out."""
    out = []
    for c in ids:
        try:
            out.append({**parse_id(c), "id": c})
        except ValueError:  # an id of an older or newer accelbench: listed by not_run, not placed
            continue
    return out


def not_run_parts(run: RunData) -> list[dict[str, str]]:
    """The named parts of each planned case with no record."""
    return _parts(not_run(run))


def planned_parts(run: RunData) -> list[dict[str, str]]:
    """The named parts of each planned case (none for a file without a plan)."""
    return _parts(list(run.doc.get("run", {}).get("planned") or []))


def _gpu1_fp32(g: pd.DataFrame) -> pd.DataFrame:
    """One-GPU fp32 cases of every backend.

    TensorFlow's without XLA where it ran, else any (JAX always compiles with XLA; a TensorFlow run with ``--xla on`` has no XLA-off case).
    """
    fp32 = g[(g["device_kind"] == "gpu") & (g["device_count"] == 1) & (g["precision"] == "fp32")]
    plain = fp32[~fp32["xla"].astype(bool)]
    return plain if not plain.empty else fp32


def headline(run: RunData) -> list[dict]:
    """Per workload and mode, the best configuration and its speed-ups over CPU fp32.

    At the largest batch of each; serve cases have their own figure (the rate at the SLO).

    ``gpu1_fp32``: (case, ratio) of one GPU in fp32 (TF32 off); ``gpu1_best``: the best one-GPU case;
    ``multi_best``: the same over several real GPUs; ``speedup``: the best configuration overall;
    ``baseline_measured``: whether CPU fp32 ran (else the ratios are None and the absolute figures stand);
    ``not_run``: the workload and mode's planned cases with no record (``gpu_not_run`` those on GPUs);
    ``planned``: the named parts of all its planned cases (an older file without a plan: none).
    """
    # N tenants' aggregate is not a configuration of one job: the sharing section has them
    t = run.table[(run.table["status"] == "ok") & (run.table["tenants"] == 1) & (run.table["mode"] != "serve")]
    missing = not_run_parts(run)
    planned = planned_parts(run)
    out = []
    for (w, mode), g in t.groupby(["workload", "mode"], sort=False):
        g = g[g["per_replica_batch"] == g["per_replica_batch"].max()]
        best_case, best = _best(run, g)
        gpu1 = g[(g["device_kind"] == "gpu") & (g["device_count"] == 1)]
        multi = g[(g["device_kind"] == "gpu") & (g["device_count"] > 1) & (~g["virtual"].astype(bool))]
        row = g[g["case_id"] == best_case].iloc[0]
        gone = [p for p in missing if (p["workload"], p["mode"]) == (w, mode)]
        ours = [p for p in planned if (p["workload"], p["mode"]) == (w, mode)]
        out.append(
            {
                "workload": w,
                "mode": mode,
                "best_case": best_case,
                "baseline_case": baseline_id(row),
                "baseline_measured": baseline_id(row) in run.samples,
                "samples_per_s": float(row["samples_per_s"]),
                "energy_j_per_sample": row.get("energy_j_per_sample"),
                "best_on_gpu": row["device_kind"] == "gpu",
                "speedup": best,
                "gpu1_fp32": _best(run, _gpu1_fp32(g)),
                "gpu1_best": _best(run, gpu1),
                "multi_best": _best(run, multi),
                "not_run": [p["id"] for p in gone],
                "gpu_not_run": [p for p in gone if p["device"].startswith("gpu")],
                "planned": ours,
            }
        )
    return out


def status_counts(run: RunData) -> dict[str, int]:
    """Cases per status."""
    return {str(k): int(v) for k, v in run.table["status"].value_counts().items()}


def _nodes(row: pd.Series | dict) -> int:
    n = row.get("nodes")
    return 1 if n is None or pd.isna(n) else int(n)


def single_device_id(row: pd.Series | dict) -> str:
    """The same case on one device of one node: ``gpu8x2nodes`` -> ``gpu1``, ``cpux2nodes``/``cpu2-virtual`` -> ``cpu``."""
    return Case.of(row).single_device().id


def scaling(run: RunData, pool: dict[str, list[float]] | None = None) -> pd.DataFrame:
    """Multi-device and multi-node cases: throughput vs the same case on one device, efficiency with CI.

    ``pool``: samples of other runs (the single-node results given beside a cluster run's), used
    where this run lacks the one-device case.
    """
    t = run.table[run.table["status"] == "ok"]
    samples = {**(pool or {}), **run.samples}
    out = []
    for _, row in t.iterrows():
        devices = int(row["device_count"]) * _nodes(row)
        if devices < 2:
            continue
        one = single_device_id(row)
        a, b = samples.get(row["case_id"]), samples.get(one)
        eff = stats.scaling_efficiency(a, b, devices) if a and b else None
        out.append(
            {
                "case_id": row["case_id"],
                "single_case": one,
                "devices": devices,
                "nodes": _nodes(row),
                "virtual": bool(row["virtual"]),
                "samples_per_s": float(row["samples_per_s"]),
                "single_samples_per_s": float(pd.Series(b).median()) if b else None,
                "efficiency": eff,
            }
        )
    return pd.DataFrame(
        out,
        columns=[
            "case_id",
            "single_case",
            "devices",
            "nodes",
            "virtual",
            "samples_per_s",
            "single_samples_per_s",
            "efficiency",
        ],
    )


def precision_gains(run: RunData) -> pd.DataFrame:
    """Each non-fp32 measured case against fp32 of the same workload, mode, devices, xla, batch."""
    t = run.table[run.table["status"] == "ok"]
    out = []
    planned = set(run.doc.get("run", {}).get("planned") or []) | set(run.table["case_id"])
    for _, row in t[t["precision"] != "fp32"].iterrows():
        ref = Case.of(row).related(precision="fp32").id
        if ref not in planned:  # never planned (excluded with -k, or not in --precisions): no row
            continue
        out.append({"case_id": row["case_id"], "vs": ref, "gain": ratio(run, row["case_id"], ref)})
    return pd.DataFrame(out, columns=["case_id", "vs", "gain"])


def xla_gains(run: RunData) -> pd.DataFrame:
    """Compiled against not (TensorFlow's XLA, torch's torch.compile), where both ran."""
    t = run.table[(run.table["status"] == "ok") & (run.table["xla"] == True)]  # noqa: E712
    t = t[t["backend"] != "jax"]  # JAX always compiles: no "off" to compare with
    out = []
    for _, row in t.iterrows():
        ref = Case.of(row).related(xla=False).id
        out.append(
            {"case_id": row["case_id"], "vs": ref, "gain": ratio(run, row["case_id"], ref), "scope": row["xla_scope"]}
        )
    return pd.DataFrame(out, columns=["case_id", "vs", "gain", "scope"])


def geomean_headline(run: RunData) -> tuple[float | None, str]:
    """Geometric mean, over workloads and modes, of the best configuration's speed-up, and what it covers.

    The rows whose best is a GPU where there are any, else the CPU's rows; None with the reason where
    no row has a ratio, or where planned cases did not run (a missing case could change it).
    """
    rows = headline(run)
    if any(h["not_run"] for h in rows):
        return None, "not given: planned cases did not run"
    rated = [h for h in rows if isinstance(h["speedup"], stats.Ratio)]
    on_gpu = [h for h in rated if h["best_on_gpu"]]
    if on_gpu:  # never mixed with CPU-only rows
        return stats.geomean([h["speedup"].value for h in on_gpu]), f"over the {len(on_gpu)} rows whose best is a GPU"
    if rated:
        return stats.geomean([h["speedup"].value for h in rated]), f"over {len(rated)} rows, all on the CPU"
    return None, "no speed-up over CPU fp32 in this run (no CPU fp32 case)"


BACKEND_LABEL = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "Keras on torch", "torch-native": "native PyTorch"}
COMPILED_LABEL = {"tensorflow": "XLA", "torch": "torch.compile", "torch-native": "torch.compile"}


def variant(case: Case) -> str:
    """A backend as the reports name it, with its compile switch: ``TensorFlow XLA``, ``native PyTorch torch.compile``."""
    label = BACKEND_LABEL.get(case.backend, case.backend)
    return f"{label} {COMPILED_LABEL[case.backend]}" if case.xla and case.backend in COMPILED_LABEL else label


def backend_comparison(run: RunData, pool: dict[str, list[float]] | None = None) -> pd.DataFrame:
    """Each backend against TensorFlow, and native PyTorch against Keras on torch: ratio with CI.

    Same workload, mode, devices, precision and batch. Each data-parallel JAX or torch case is paired
    with TensorFlow's case without XLA and with it (JAX compiles the whole step with XLA, TensorFlow's
    XLA forward and backward); a native PyTorch case also with Keras on torch compiled as it is (what
    Keras costs on torch). ``pool``: samples of other results files given beside.
    """
    samples = {**(pool or {}), **run.samples}
    t = run.table[(run.table["status"] == "ok") & (run.table["backend"] != "tensorflow")]
    out = []
    for _, row in t[t["parallelism"] == "data"].iterrows():
        case = Case.of(row)
        tf = case.related(backend="tensorflow")
        others = [tf.related(xla=False), tf.related(xla=True)]
        if case.backend == "torch-native":
            others.append(case.related(backend="torch"))
        for other in others:
            a, b = samples.get(case.id), samples.get(other.id)
            if not a or not b:
                continue
            out.append(
                {
                    "case_id": case.id,
                    "vs": other.id,
                    "tf_xla": other.xla,
                    "pair": f"{variant(case)} / {variant(other)}",
                    "samples_per_s": float(row["samples_per_s"]),
                    "vs_samples_per_s": float(pd.Series(b).median()),
                    "ratio": stats.ratio_of_medians(a, b),
                }
            )
    cols = ["case_id", "vs", "tf_xla", "pair", "samples_per_s", "vs_samples_per_s", "ratio"]
    return pd.DataFrame(out, columns=cols)


def backends_side_by_side(run: RunData) -> tuple[list[str], list[tuple[str, dict[str, pd.Series]]]]:
    """The run's backend variants (in the suite's order) and, per case without its backend, each variant's row.

    Only where two or more variants measured the same case; rows of the results table (median and
    within-worker CI), ``(key, {variant: row})``.
    """
    ok = run.table[(run.table["status"] == "ok") & (run.table["parallelism"] == "data")]
    by_key: dict[str, dict[str, pd.Series]] = {}
    order: dict[str, tuple[int, bool]] = {}
    rank = {b: i for i, b in enumerate(BACKEND_LABEL)}
    for _, row in ok.iterrows():
        case = Case.of(row)
        v = variant(case)
        by_key.setdefault(case.id_without("backend", "xla"), {})[v] = row
        order[v] = (rank.get(case.backend, 99), bool(case.xla))
    rows = [(k, vs) for k, vs in by_key.items() if len(vs) > 1]
    present = sorted({v for _, vs in rows for v in vs}, key=lambda v: order[v])
    return present, rows


def parallelism_comparison(run: RunData) -> pd.DataFrame:
    """Model parallel against data parallel on the same devices, where both ran: ratio of samples/s with CI."""
    t = run.table[(run.table["status"] == "ok") & (run.table["parallelism"] == "model")]
    out = []
    for _, row in t.iterrows():
        data_id = Case.of(row).related(parallelism="data").id
        r = ratio(run, row["case_id"], data_id)
        if r is not None:
            out.append({"case_id": row["case_id"], "vs": data_id, "gain": r})
    return pd.DataFrame(out, columns=["case_id", "vs", "gain"])
