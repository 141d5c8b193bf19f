"""The report's serving section: capacity at the latency SLO, CPU vs GPU, and latency against request rate.

Plain data (tables of cells, paragraphs, charts) for the templates, which escape every value.
"""

from __future__ import annotations

import pandas as pd

from bench import storage
from bench.cases import Case
from bench.report import charts
from bench.report import cost as costs
from bench.report.analysis import RunData
from bench.report.html import Cell, Para, Svg, Table, na, num
from bench.report.numbers import human

# what bounded a serve case's rate (``serve_bound``), as its row says it
BOUND_SAYS = {
    "slo": "bounded by the SLO (a rate under capacity failed)",
    "capacity": "bounded by the capacity (no rate under it failed the SLO)",
}


def _v(x: object) -> float | None:
    return None if x is None or (isinstance(x, float) and pd.isna(x)) else float(x)  # type: ignore[arg-type]


def serve_rows(run: RunData) -> pd.DataFrame:
    """The run's serve cases that were measured: searched, or found unable to serve at the SLO (with why)."""
    t = run.table
    judged = t["serve_reason"].fillna("").astype(str) != ""
    return t[
        (t["mode"] == "serve") & (t["status"].isin(["ok", "slo_missed"]) | ((t["status"] == "unsupported") & judged))
    ]


def _capacity(r: pd.Series) -> Cell:
    """The capacity, from the service time of the batch it comes from (shown), one figure per row."""
    cap, b = _v(r["capacity_rate"]), _v(r.get("capacity_batch"))
    if cap is None:
        return num(None)
    return Cell(human(cap), cls="num", below=f"b{int(b)}: {b / cap * 1e3:.3g} ms a batch" if b else "estimate")


def _tried(run: RunData, case_id: str) -> str:
    """``3 rates tried, 10-20 req/s, trials 4.8-10 s``: what the search ran, or "" where it ran nothing."""
    rec = next((r for r in storage.case_records(run.doc) if r.id == case_id), None)
    trials = (rec.info.get("serve_trials") if rec else None) or []
    if not trials:
        return ""
    rates = [float(t["rate"]) for t in trials]
    secs = [float(t.get("duration_s") or 0) for t in trials]
    return (
        f"{len(trials)} trial(s) at {human(min(rates))}-{human(max(rates))} req/s, "
        f"{min(secs):.3g}-{max(secs):.3g} s each"
    )


def cpu_reference(r: pd.Series) -> str:
    """The case a serve case is compared with: CPU fp32 of the same workload, batch, SLO and backend."""
    return Case.of(r).baseline().id


def cost_per_million_requests(r: pd.Series, prices: costs.Prices, gpu_name: str | None) -> costs.Cost | None:
    """Device-hours (and energy, where measured) per million requests served at the rate found."""
    return costs.per_million(
        prices,
        r["device_kind"],
        Case.of(r).physical_devices,
        bool(r["virtual"]),
        _v(r["max_rate_at_slo"]),
        _v(r["energy_per_request_j"]),
        gpu_name if r["device_kind"] == "gpu" else None,
    )


def capacity(run: RunData, prices: costs.Prices | None = None, gpu_name: str | None = None) -> list:
    """Per serve case: the rate at the SLO, its bracket, capacity, p99 at it, J/request, ratio to the CPU."""
    t = serve_rows(run)
    if t.empty:
        return [Para("No serve case was measured (--modes serve; on by default in the standard and large profiles).")]
    rate = {r["case_id"]: _v(r["max_rate_at_slo"]) for _, r in t.iterrows()}
    rows = []
    for _, r in t.iterrows():
        found = rate[r["case_id"]]
        ref = rate.get(cpu_reference(r))
        common = [
            Cell(r["case_id"]),
            num(r["slo_ms"], "{:g}"),
        ]
        if found is None:
            why = str(r["serve_reason"] or "no rate passed")
            tried = _tried(run, str(r["case_id"]))
            text = why if why.startswith("not tested") else f"SLO missed: {why}" + (f" ({tried})" if tried else "")
            rows.append([*common, na(text, colspan=6), _capacity(r)])
            continue
        bracket = f"[{human(r['rate_bracket_low'])}, {human(r['rate_bracket_high'])}]"
        bound = BOUND_SAYS.get(str(r.get("serve_bound") or ""))
        if bound:
            bracket += f"; {bound}"
        vs = "baseline" if r["case_id"] == cpu_reference(r) else (f"{human(found / ref)}x" if ref else "-")
        cells = [
            Cell(human(found), cls="num", below=bracket, title=r["serve_note"] or None),
            num(r["serve_p99_ms"], "{:.3g}"),
            num(r["mean_batch"], "{:.3g}"),
            num(r["energy_per_request_j"]),
            Cell(vs, cls="num"),
        ]
        if prices is not None:
            c = cost_per_million_requests(r, prices, gpu_name)
            cells.append(Cell(human(c.per_million), cls="num") if c else na("no price"))
        else:
            cells.append(na("--prices"))
        rows.append([*common, *cells, _capacity(r)])
    cur = prices.currency if prices is not None else "cost"
    headers = [
        "case",
        "SLO ms",
        "req/s at the SLO [last pass, first fail]",
        "p99 ms at it",
        "mean batch",
        "J/request",
        "vs CPU fp32 (+-5%, the search's resolution)",
        f"{cur} per million requests",
        "capacity req/s (the batch that fits the SLO)",
    ]
    return [
        Para(
            "The highest Poisson request rate whose p99 latency is certified under the SLO (LoadGen's "
            "early-stopping rule), with a dynamic batcher up to the case's batch; latency runs from each "
            "request's scheduled arrival to its result on the host; a trial must also keep up (at its last "
            "arrival at most 5% of its requests still waiting), so no rate above the capacity passes, whatever "
            "the SLO. Capacity: the best of batch size / service time over the batch sizes whose service time "
            "fits the SLO less the batcher's longest wait (the batch and its service time are shown)."
        ),
        Table(headers, rows, label="capacity at the latency SLO"),
        *charts_by_workload(run),
    ]


def charts_by_workload(run: RunData) -> list:
    """One latency-vs-rate chart per workload and SLO, every serve case's trials on it."""
    by: dict[tuple[str, float], dict] = {}
    for rec in storage.case_records(run.doc):
        if rec.case.mode != "serve" or rec.status not in ("ok", "slo_missed") or rec.case.slo_ms is None:
            continue
        trials = rec.info.get("serve_trials") or []
        g = by.setdefault((rec.case.workload, rec.case.slo_ms), {"series": {}, "found": {}})
        label = rec.id.split("-serve-", 1)[1]
        g["series"][label] = [(t.get("achieved_rate") or 0.0, t.get("p50_ms"), t.get("p99_ms")) for t in trials]
        g["found"][label] = rec.info.get("max_rate_at_slo")
    by = {k: g for k, g in by.items() if any(g["series"].values())}  # no trial ran: no empty chart
    return [
        Svg(charts.latency_vs_rate(g["series"], slo, g["found"], f"{w}: latency vs request rate (SLO {slo:g} ms)"))
        for (w, slo), g in by.items()
    ]
