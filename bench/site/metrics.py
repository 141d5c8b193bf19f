"""What the site's cards show, from night summaries.

Speed-ups with CIs, scaling, precision gain, samples per joule, cost, and the testbed's noise and
health. Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench import stats
from bench.cases import Case
from bench.report import cost as costs
from bench.report.html import Cell, Table, num


def _ok(c: dict) -> bool:
    return c.get("status") == "ok" and c.get("value") is not None


def _ratio(a: dict | None, b: dict | None) -> stats.Ratio | None:
    if not a or not b or not _ok(a) or not _ok(b):
        return None
    sa, sb = a.get("samples") or [a["value"]], b.get("samples") or [b["value"]]
    return stats.ratio_of_medians(sa, sb, n_boot=1000)


@dataclass
class Headline:
    """One workload x mode on one night."""

    workload: str
    mode: str
    best_case: str
    speedup: stats.Ratio | None
    scaling_case: str | None
    scaling: stats.Ratio | None
    precision_case: str | None
    precision_gain: stats.Ratio | None
    best_samples_per_joule: tuple[str, float] | None
    cheapest: tuple[str, float, bool] | None  # case, cost per million, energy included
    is_baseline: bool = False  # the best configuration is CPU fp32 itself (no ratio against itself)


def headline(night: dict, prices: costs.Prices | None = None) -> list[Headline]:
    """Per workload and mode (at its largest batch): the best configuration and what it gains."""
    cases = night["cases"]
    groups: dict[tuple[str, str], dict[str, dict]] = {}
    for cid, c in cases.items():
        if _ok(c) and int(c.get("tenants") or 1) == 1:  # tenants answer another question (the sharing table)
            groups.setdefault((str(c.get("workload")), str(c.get("mode"))), {})[cid] = c
    gpus = (night.get("fingerprint") or {}).get("gpus") or []
    out = []
    for (w, m), g in groups.items():
        top = max(int(c.get("per_replica_batch") or 0) for c in g.values())
        g = {k: c for k, c in g.items() if int(c.get("per_replica_batch") or 0) == top}
        best = max(g, key=lambda k: g[k]["value"])
        scal: list[tuple[str, stats.Ratio]] = []
        for cid, c in g.items():
            n = int(c.get("device_count") or 1) * int(c.get("nodes") or 1)
            if n > 1 and not c.get("virtual"):
                r = _ratio(c, cases.get(Case.of(c).single_device().id))
                if r:
                    scal.append((cid, r.scaled(1.0 / n)))
        prec: list[tuple[str, stats.Ratio]] = []
        for cid, c in g.items():
            if c.get("precision") not in (None, "fp32"):
                r = _ratio(c, cases.get(Case.of(c).related(precision="fp32").id))
                if r:
                    prec.append((cid, r))
        spj = [(k, float(c["samples_per_joule"])) for k, c in g.items() if c.get("samples_per_joule")]
        cheap = None
        if prices is not None:
            priced = []
            for k, c in g.items():
                cc = costs.per_million(
                    prices,
                    str(c.get("device_kind")),
                    Case.of(c).physical_devices,
                    bool(c.get("virtual")),
                    c["value"],
                    c.get("energy_j_per_sample"),
                    gpus[0] if gpus and c.get("device_kind") == "gpu" else None,
                )
                if cc:
                    priced.append((k, cc.per_million, cc.energy_included))
            cheap = min(priced, key=lambda t: t[1]) if priced else None
        s_best = max(scal, key=lambda t: t[1].value) if scal else (None, None)
        p_best = max(prec, key=lambda t: t[1].value) if prec else (None, None)
        out.append(
            Headline(
                workload=w,
                mode=m,
                best_case=best,
                speedup=_ratio(g[best], cases.get(Case.of(g[best]).baseline().id)),
                scaling_case=s_best[0],
                scaling=s_best[1],
                precision_case=p_best[0],
                precision_gain=p_best[1],
                best_samples_per_joule=max(spj, key=lambda t: t[1]) if spj else None,
                cheapest=cheap,
                is_baseline=best == Case.of(g[best]).baseline().id,
            )
        )
    return out


def speedup_series(nights: list[dict], case_id: str) -> list[float | None]:
    """A case's speed-up over its CPU fp32 baseline, night by night (medians; for sparklines)."""
    out: list[float | None] = []
    for n in nights:
        c = n["cases"].get(case_id)
        b = n["cases"].get(Case.of(c).baseline().id) if c else None
        out.append(c["value"] / b["value"] if c and b and _ok(c) and _ok(b) and b["value"] else None)
    return out


def noise(nights: list[dict]) -> float | None:
    """Night-to-night noise of the testbed: median over cases of 1.4826 x MAD / median of its values."""
    per_case: dict[str, list[float]] = {}
    for n in nights:
        for cid, c in n["cases"].items():
            if _ok(c):
                per_case.setdefault(cid, []).append(float(c["value"]))
    cvs = []
    for v in per_case.values():
        if len(v) >= 5:
            x = np.asarray(v)
            med = float(np.median(x))
            if med > 0:
                cvs.append(1.4826 * float(np.median(np.abs(x - med))) / med)
    return float(np.median(cvs)) if cvs else None


def sharing_table(night: dict, testbed: str) -> Table | None:
    """The night's measured tenant cases (N copies on one device): STP, worst slowdown, fairness; None without any."""
    shared = [(cid, c) for cid, c in night["cases"].items() if int(c.get("tenants") or 1) > 1 and _ok(c)]
    if not shared:
        return None
    rows = [
        [
            Cell(cid),
            Cell(c.get("sharing_mode") or "-"),
            num(c.get("value")),
            num(c.get("stp"), "{:.2f}"),
            num(c.get("worst_slowdown"), "{:.2f}x"),
            num(c.get("fairness"), "{:.2f}"),
            Cell(c.get("sharing_verdict") or ""),
        ]
        for cid, c in shared
    ]
    headers = ["tenant case", "sharing mode", "aggregate samples/s", "STP", "worst slowdown", "fairness", "verdict"]
    return Table(headers, rows, label=f"sharing one device: {testbed}")
