"""The report's sharing section: N tenants of one device against one alone (STP, worst slowdown, fairness).

Plain data for the templates, which escape every value. CPU tenants share cores and caches and
are labelled so: their figures never stand for GPU interference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import pandas as pd

from bench import storage
from bench.cases import Case
from bench.report import analysis, charts
from bench.report.analysis import RunData
from bench.report.html import Cell, Para, Svg, Table, num
from bench.report.mdtext import md
from bench.report.numbers import human
from bench.report.resources import gpu_name
from bench.storage import CaseRecord

HEADERS = [
    "case",
    "N",
    "sharing mode",
    "alone samples/s (same memory cap)",
    "aggregate samples/s",
    "STP",
    "worst slowdown",
    "fairness (min/max)",
    "memory bytes: tenants' peaks (NVML per process)",
    "J/sample (whole device)",
    "verdict",
]


def tenant_records(doc: dict) -> list[CaseRecord]:
    """The run's measured tenant cases (tenants > 1), in run order."""
    return [r for r in storage.case_records(doc) if r.ok and r.case.tenants > 1]


def planned(doc: dict) -> bool:
    """Whether the run had any tenant case (measured or not): the section is shown only then."""
    return any(r.case.tenants > 1 for r in storage.case_records(doc))


def _device(doc: dict, rec: CaseRecord) -> str:
    return (
        "CPU (cores and caches shared: not GPU interference)"
        if rec.case.device_kind == "cpu"
        else (gpu_name(doc) or "GPU")
    )


def _row(rec: CaseRecord) -> list:
    e = rec.info
    nvml = e.get("tenant_gpu_mem_sum_bytes")
    mem = num(e.get("device_peak_mem_bytes"))
    if nvml:
        mem = Cell(human(e.get("device_peak_mem_bytes")), cls="num", below=f"NVML {human(nvml)} B")
    return [
        Cell(rec.id),
        num(rec.case.tenants, "{:d}"),
        Cell(e.get("sharing_mode") or "-", title=e.get("sharing_note") or None),
        num(e.get("alone_samples_per_s")),
        num(e.get("samples_per_s")),
        num(e.get("stp"), "{:.2f}"),
        num(e.get("worst_slowdown"), "{:.2f}x"),
        num(e.get("fairness"), "{:.2f}"),
        mem,
        num(e.get("energy_j_per_sample")),
        Cell(e.get("sharing_verdict") or ""),
    ]


def _family(c: Case) -> str:
    return c.related(tenants=1).id


def section(run: RunData) -> list:
    """Per device: a table of tenant cases with their verdicts, and STP / worst slowdown against N."""
    recs = tenant_records(run.doc)
    intro = Para(
        "N copies of a case at once on one device, each calibrated alone and then started together on one "
        "barrier, over one wall-clock window; against the same case alone with the same memory cap, run "
        "just before. STP (system throughput) is the sum of each tenant's rate over the alone rate: N when "
        "tenants do not interfere, 1 when they take turns, below 1 when sharing loses work. Fairness is the "
        "slowest tenant's progress over the fastest's. Energy is the whole device's (NVML cannot split it "
        "between processes). The mix: a batch-1 inference tenant (one request per round, so each round is "
        "a latency) beside its training case, against the same inference alone. See Method."
    )
    if not recs:
        return [intro, Para("No tenant case was measured: see Unsupported and failed cases.")]
    out: list = [intro]
    by: dict[str, list[CaseRecord]] = {}
    for r in recs:
        by.setdefault(_device(run.doc, r), []).append(r)
    for device, group in by.items():
        out.append(Para(device))
        copies = [r for r in group if not r.case.neighbour]
        if copies:
            out.append(Table(HEADERS, [_row(r) for r in copies], label=f"sharing: {device}"))
            series: dict[str, list[tuple[int, float, float | None]]] = {}
            for r in copies:
                series.setdefault(_family(r.case), []).append(
                    (r.case.tenants, float(r.info["stp"]), r.info.get("worst_slowdown"))
                )
            out.append(Svg(charts.sharing(series, f"Sharing {device}: STP and worst slowdown against N")))
        if not copies:  # STP and fairness come only from N copies: say why there are none
            planned = [p["id"] for p in analysis.planned_parts(run) if p["tenants"].startswith("t")]
            out.append(
                Para(
                    f"No N-copy case was measured ({', '.join(planned)} planned, not run): no STP or fairness."
                    if planned
                    else "No N-copy case in this run (--tenants N): no STP or fairness.",
                    cls="na",
                )
            )
        mixed = [r for r in group if r.case.neighbour]
        if mixed:
            alone = {str(r["case_id"]): r["samples_per_s"] for _, r in run.table.iterrows() if r["status"] == "ok"}
            rows = [_mix_row(r, alone) for r in mixed]
            out.append(Table(MIX_HEADERS, rows, label=f"beside a noisy neighbour: {device}"))
    return out


MIX_HEADERS = [
    "latency case",
    "beside",
    "sharing mode",
    "p50 ms alone",
    "p50 ms beside",
    "p99 ms alone",
    "p99 ms beside",
    "p99 inflation",
    "neighbour samples/s",
    "verdict",
]


def _neighbour_alone(rec: CaseRecord) -> str:
    """The id of the neighbour's own case measured alone (``train-b64`` beside -> that training case)."""
    mode, batch = rec.case.neighbour.split("-b")
    return dataclasses.replace(rec.case, mode=mode, per_replica_batch=int(batch), tenants=1, neighbour="").id


def _neighbour_cell(e: Mapping, alone: float | None) -> Cell:
    """The neighbour's rate beside the latency case, and alone where this run measured it (review finding 9)."""
    beside = e.get("neighbour_samples_per_s")
    if not beside or alone is None or pd.isna(alone) or not alone:
        return num(beside)
    return Cell(human(beside), cls="num", below=f"alone {human(alone)} ({beside / alone:.2f}x)")


def _mix_row(rec: CaseRecord, alone: Mapping[str, float] | None = None) -> list:
    e = rec.info

    def ms(k: str) -> Cell:
        return num(e[k] * 1e3 if e.get(k) is not None else None, "{:.3g}")

    return [
        Cell(rec.id),
        Cell(rec.case.neighbour),
        Cell(e.get("sharing_mode") or "-", title=e.get("sharing_note") or None),
        ms("alone_latency_p50_s"),
        ms("latency_p50_s"),
        ms("alone_latency_p99_s"),
        ms("latency_p99_s"),
        num(e.get("latency_p99_inflation"), "{:.2f}x"),
        _neighbour_cell(e, (alone or {}).get(_neighbour_alone(rec))),
        Cell(e.get("sharing_verdict") or ""),
    ]


def markdown(doc: dict) -> list[str]:
    """The sharing verdicts as Markdown lines (none when the run had no tenant case)."""
    recs: Iterable[CaseRecord] = tenant_records(doc)
    lines = [
        f"- {md(r.id)} ({md(r.info.get('sharing_mode') or '-')}): {md(r.info.get('sharing_verdict') or '')}"
        for r in recs
    ]
    return ["## Sharing one device", "", *lines, ""] if lines else []
