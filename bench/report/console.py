"""The console table printed at the end of a run and by ``accelbench report``."""

from __future__ import annotations

import pandas as pd
from tabulate import tabulate

from bench import stopping
from bench.report import reference, roofline, sharing, sweeps
from bench.report.analysis import RunData, baseline_id, fmt_ratio, speedups
from bench.report.numbers import human
from bench.telemetry.derive import busy_note


def fmt_thr(row) -> str:
    """``1234 [1200-1260]`` samples/s, ``-`` when not measured."""
    v = row["samples_per_s"]
    if v is None or v != v:
        return "-"
    lo, hi = row["samples_per_s_ci_low"], row["samples_per_s_ci_high"]
    ci = f" [{human(lo)}-{human(hi)}]" if lo is not None and lo == lo else ""
    rlo, rhi = row.get("run_ci_low"), row.get("run_ci_high")
    rerun = f" rerun {human(rlo)}-{human(rhi)}" if rlo is not None and rlo == rlo else ""
    return f"{human(v)}{ci}{rerun}"


def serve_note(row) -> str:
    """``12,800 req/s at p99 <= 10 ms (p99 6.9 ms; capacity 57,900)`` for a serve case, or why there is no rate."""
    if row.get("mode") != "serve":
        return ""
    rate = row.get("max_rate_at_slo")
    if rate is None or rate != rate:
        return f"no rate at p99 <= {row['slo_ms']:g} ms: {row.get('serve_reason') or 'none passed'}"
    return (
        f"{human(rate)} req/s at p99 <= {row['slo_ms']:g} ms (p99 {human(row['serve_p99_ms'])} ms; "
        f"capacity {human(row['capacity_rate'])})"
    )


def target_note(row) -> str:
    """``+-2% target not reached: +-3.4% after 20 rounds (cap)`` where the stopping rule's target was missed."""
    if not row.get("target_missed") or pd.isna(row.get("target_missed")) or not row.get("stop_reason"):
        return ""
    achieved, foreseen = row.get("ci_achieved_rel"), row.get("ci_foreseen_cap_rel")
    return stopping.describe_miss(
        float(row["ci_target_rel"]),
        None if achieved is None or pd.isna(achieved) else float(achieved),
        int(row["rounds"]),
        str(row["stop_reason"]),
        None if foreseen is None or pd.isna(foreseen) else float(foreseen),
    )


def case_note(row) -> str:
    """``unstable (CV > 10%); busy: other processes used 33% of the CPU`` for a measured case."""
    notes = [
        serve_note(row),
        "unstable (CV > 10%)" if row["unstable"] else "",
        target_note(row),
        busy_note(row.get("other_cpu_pct"), row.get("other_gpu_processes")),
    ]
    return "; ".join(n for n in notes if n)


def table(run: RunData, tablefmt: str = "simple") -> str:
    """case, status, samples/s with CI, speed-up vs CPU fp32 (reason for the failed ones).

    Unsupported cases (on a CPU-only machine, most of the GPU matrix) are summed up below the
    table in one line per reason instead of a row each.
    """
    sp = speedups(run).set_index("case_id")["speedup"]
    rows = []
    unsupported: dict[str, list[str]] = {}
    for _, r in run.table.iterrows():
        if r["status"] == "unsupported":
            unsupported.setdefault(str(r["reason"]), []).append(str(r["case_id"]))
            continue
        note = case_note(r) if r["status"] in ("ok", "slo_missed") else r["reason"]  # a serve outcome says itself
        rows.append(
            [
                r["case_id"],
                r["status"],
                fmt_thr(r),
                "baseline"
                if r["case_id"] == baseline_id(r) and r["status"] == "ok"
                else fmt_ratio(sp.get(r["case_id"])),
                (note or "")[:120],
            ]
        )
    text = tabulate(rows, headers=["case", "status", "samples/s [95% CI]", "vs CPU fp32", "note"], tablefmt=tablefmt)
    for reason, ids in unsupported.items():
        example = ", ".join(ids[:2]) + (", ..." if len(ids) > 2 else "")
        text += f"\nunsupported: {len(ids)} case{'s' if len(ids) > 1 else ''} ({example}): {reason}"
    for c in reference.comparisons(run.doc, run.table):  # one-GPU ResNet-50 cases with a published figure
        text += f"\npublished: {c.case_id} is {c.sentence()}" + (f": {c.verdict.upper()}" if c.verdict else "")
    for t in sharing.tenant_records(run.doc):  # N tenants of one device against one alone
        text += f"\nsharing: {t.id} ({t.info.get('sharing_mode')}): {t.info.get('sharing_verdict')}"
    for line in sweeps.console(run) + roofline.console(run):  # a sweep: crossovers, largest batches, share of peak
        text += f"\n{line}"
    return text
