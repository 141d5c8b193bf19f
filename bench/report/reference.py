"""Measured against published: a one-GPU case beside the published figure for the same GPU and setup.

A case is compared only when the model (the workload at a size publishers use), mode, precision,
XLA and the exact GPU name are those of a published row, on one real GPU (no virtual split, no
cluster), with the batch within 2x (the nearest published batch; ``batch N`` says when unequal).
The verdict speaks only at the extremes: below 0.5x "check this machine", with what the run
recorded of its clocks, caps and link; above 1.2x "check the configurations are equal"; in between
the ratio is shown without a verdict, because framework, data and statistic differ (each row says
how). A GPU without rows gets "no published figure for this GPU", never a neighbour's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from bench.cases import Case
from bench.report.devices_text import gpu_limits
from bench.report.html import Cell, Para, Table, na
from bench.report.mdtext import md
from bench.report.numbers import human
from bench.report.published import Published, for_gpu
from bench.report.resources import first_gpu
from workloads import WORKLOADS

LOW = 0.5  # below: the machine, not the framework, is the likelier cause
HIGH = 1.2  # above: the setups probably differ (batch, precision, what is timed)
BATCH_SPAN = 2.0


@dataclass(frozen=True)
class Comparison:
    """One case against one published row."""

    case_id: str
    measured: float
    ci: tuple[float | None, float | None]
    row: Published
    notes: tuple[str, ...]  # case-specific differences (batch, backend)
    machine: str  # what the run recorded of the GPU (clocks, caps, link), for the low verdict

    @property
    def ratio(self) -> float:
        """Measured / published."""
        return self.measured / self.row.value

    @property
    def verdict(self) -> str:
        """The verdict: check this machine below 0.5x, check the configurations are equal above 1.2x, else none."""
        if self.ratio < LOW:
            return "check this machine"
        if self.ratio > HIGH:
            return "check the configurations are equal"
        return ""

    def sentence(self) -> str:
        """The comparison in words, e.g. "0.62x of the published 909 img/s (NVIDIA/DeepLearningExamples, ...)"."""
        return (
            f"{self.ratio:.2f}x of the published {self.row.value:g} {self.row.unit} at batch {self.row.batch} "
            f"({self.row.source.repo}: {self.row.source.setup})"
        )


def published_model(workload: str, profile: str | None, knobs: tuple[tuple[str, int], ...] = ()) -> str | None:
    """The published model name of ``workload`` at ``profile``'s size, if anyone publishes that size.

    A sweep's point whose knobs change the size is another model: none.
    """
    w = WORKLOADS.get(workload)
    if not w or (knobs and (profile not in w.sizes or not w.anchored(str(profile), knobs))):
        return None
    return w.published_as.get(profile or "")


def one_real_gpu(case: Case) -> bool:
    """A case on exactly one physical GPU of one node: the only kind published single-GPU figures describe."""
    return case.device_kind == "gpu" and case.device_count == 1 and not case.virtual and case.nodes == 1


def match(case: Case, profile: str | None, gpu_name: str | None) -> Published | None:
    """The published row ``case`` is comparable with, or None (nearest batch within 2x; ties: the smaller)."""
    model = published_model(case.workload, profile, case.knobs)
    if model is None or not one_real_gpu(case) or case.mode == "serve":
        return None
    rows = [
        p
        for p in for_gpu(gpu_name)
        if (p.model, p.mode, p.precision, p.xla) == (model, case.mode, case.precision, case.xla)
        and 1 / BATCH_SPAN <= case.per_replica_batch / p.batch <= BATCH_SPAN
    ]
    if not rows:
        return None
    return min(rows, key=lambda p: (abs(math.log(case.per_replica_batch / p.batch)), p.batch))


def machine_state(info: dict, gpu: dict) -> str:
    """What the run saw of the GPU while the case ran, and what the machine allows it."""
    parts = []
    top = gpu.get("max_sm_clock_mhz")
    if info.get("sm_clock_mhz_median"):
        parts.append(f"SM clock {info['sm_clock_mhz_median']:.0f}" + (f" of max {top} MHz" if top else " MHz"))
    parts.append(f"throttle reasons: {info.get('throttle_reasons') or 'none recorded'}")
    if info.get("temp_max_c") is not None:
        parts.append(f"max {info['temp_max_c']:.0f} C")
    if info.get("power_mean_w"):
        parts.append(f"mean {info['power_mean_w']:.0f} W")
    if limits := gpu_limits(gpu, clock=not info.get("sm_clock_mhz_median")):  # a measured clock said the max
        parts.append(limits)
    if info.get("other_gpu_processes"):
        parts.append(f"other processes on the GPU: {info['other_gpu_processes']}")
    return "; ".join(parts)


def comparisons(doc: dict, table: pd.DataFrame) -> list[Comparison]:
    """Every measured one-GPU case that has a published counterpart."""
    profile = doc.get("run", {}).get("profile")
    gpu = first_gpu(doc)
    out = []
    for _, r in table[(table["status"] == "ok") & (table["device_kind"] == "gpu")].iterrows():
        case = Case.of(r)
        row = match(case, profile, gpu.get("name"))
        if row is None or not r["samples_per_s"]:
            continue
        notes = []
        if case.per_replica_batch != row.batch:
            notes.append(f"batch {case.per_replica_batch} (published {row.batch})")
        if case.backend != "tensorflow":
            notes.append(f"accelbench on {case.backend}")
        lo, hi = r.get("samples_per_s_ci_low"), r.get("samples_per_s_ci_high")
        out.append(
            Comparison(
                r["case_id"],
                float(r["samples_per_s"]),
                (None if pd.isna(lo) else float(lo), None if pd.isna(hi) else float(hi)),
                row,
                tuple(notes),
                machine_state(r.to_dict(), gpu),
            )
        )
    return out


def unmatched(doc: dict, found: list[Comparison]) -> list[Published]:
    """The published rows for this GPU no case of the run was compared with (run them: ``devices --check --reference``)."""
    used = {c.row for c in found}
    return [p for p in for_gpu(first_gpu(doc).get("name")) if p not in used]


def config(p: Published) -> str:
    """A published row's configuration in accelbench's words."""
    return f"{p.model} {p.mode} {p.precision}{' + XLA' if p.xla else ''} b{p.batch}"


RUN_THEM = "run them with: accelbench devices --check --reference (one GPU, the standard profile's ResNet-50)"


def section(doc: dict, table: pd.DataFrame) -> list:
    """The report's "Against published figures" (only for a run that measured a GPU case)."""
    name = first_gpu(doc).get("name") or "?"
    rows = for_gpu(name)
    if not rows:
        return [
            Para(
                f"No published figure for this GPU ({name}): rows are kept per exact GPU name, and a "
                "neighbour's figure (another memory size, PCIe instead of SXM) would mislead."
            )
        ]
    found = comparisons(doc, table)
    out: list = [
        Para(
            "Each one-GPU case beside the published figure for the same GPU, model, mode, precision and XLA, "
            f"batch within 2x. Below {LOW}x: check this machine (what the run recorded of it is shown); above "
            f"{HIGH}x: check the configurations are equal; in between no verdict, because the publishers' "
            "framework, data and statistic differ from accelbench's (listed per row)."
        )
    ]
    if found:
        out.append(Table(HEADERS, [_row(c) for c in found], label="measured against published figures"))
    left = unmatched(doc, found)
    if left:
        out.append(
            Para(
                f"Published for the {name} and not compared in this run (no case at its batch): "
                + "; ".join(f"{config(p)}: {p.value:,.0f} {p.unit} ({p.source.heading})" for p in left)
                + f". To compare, {RUN_THEM}."
            )
        )
    return out


HEADERS = [
    "case",
    "measured samples/s [95% CI]",
    "published",
    "measured / published",
    "verdict",
    "what differs",
    "source",
]


def _row(c: Comparison) -> list:
    lo, hi = c.ci
    low = c.verdict == "check this machine"
    return [
        Cell(c.case_id),
        Cell(human(c.measured), cls="num", below=f"[{human(lo)}, {human(hi)}]" if lo and hi else None),
        Cell(f"{c.row.value:g} {c.row.unit}", cls="num", below=config(c.row)),
        Cell(f"{c.ratio:.2f}x", cls="num"),
        Cell(c.verdict, below=c.machine if low else None) if c.verdict else na("none (0.5x-1.2x)"),
        Cell("; ".join((*c.notes, *c.row.differs))),
        Cell(c.row.source.repo, link=c.row.source.url, below=f'{c.row.source.heading}: "{c.row.quote}"'),
    ]


def markdown(doc: dict, table: pd.DataFrame) -> list[str]:
    """The Markdown report's lines (none for a run without a published row for its GPU)."""
    found = comparisons(doc, table)
    if not found:
        return []
    lines = ["## Against published figures", ""]
    for c in found:
        v = f" **{c.verdict}**" if c.verdict else ""
        v += f" ({md(c.machine)})" if c.verdict == "check this machine" else ""
        lines.append(f"- {md(c.case_id)}: {human(c.measured)} samples/s, {md(c.sentence())}.{v}")
    return [*lines, ""]
