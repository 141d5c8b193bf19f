"""A worker's probes: the matmul peak and the memory bandwidth, each measured once per run (or given by the plan).

A mix-in of :class:`bench.worker.WorkerSession`: it uses the session's plan, timing, backend and
heartbeat. A probe an earlier worker of the run measured arrives in the plan's ``probes``
(``bench.records.probes_of``), with the case that measured it.
"""

from __future__ import annotations

from typing import Any

from bench.cases import Case
from bench.precision import PrecisionSpec

COPY = "copy"  # the copy probe's key among the plan's probes (the others are precisions)


class ProbeSteps:
    """The reference figures a case's achieved rate is set against."""

    plan: Any
    timing: Any
    device: Any
    be: Any
    loop: Any
    probes: dict[str, Any]

    def heartbeat(self, case_id: str | None, phase: str) -> None:
        """Tell the parent what the worker does now (the session's)."""
        raise NotImplementedError

    def _probe(self, case_id: str, spec: PrecisionSpec) -> tuple[Any, str]:
        """The matmul peak and the case that measured it: once per run, device kind and precision."""
        if spec.name not in self.probes:
            given = self.plan.probes.get(spec.name)
            if given:  # an earlier worker of this run measured it
                probe = self.loop.Probe(float(given["tflops"]), int(given["n"]), str(given["dtype"]))
                self.probes[spec.name] = (probe, str(given["case_id"]))
            else:
                self.heartbeat(case_id, f"measuring the {spec.name} matmul peak")
                probe = self.be.matmul_probe(spec, self.timing.probe_n[self.device.kind], self.timing.probe_budget_s)
                self.probes[spec.name] = (probe, case_id)
        return self.probes[spec.name]

    def _copy(self, case_id: str) -> tuple[Any, str]:
        """The device's memory bandwidth (the copy probe) and the case that measured it: once per run and device kind."""
        if COPY not in self.probes:
            given = self.plan.probes.get(COPY)
            if given:
                self.probes[COPY] = (
                    self.loop.CopyProbe(float(given["gbps"]), int(given["n_bytes"])),
                    str(given["case_id"]),
                )
            else:
                self.heartbeat(case_id, "measuring the memory bandwidth")
                budget = self.timing.probe_budget_s / 2
                self.probes[COPY] = (self.be.copy_probe(self.loop.COPY_BYTES, budget), case_id)
        return self.probes[COPY]

    def _peak(self, case: Case) -> dict:
        """The matmul peak in the case's precision (once per precision and worker), for every chip of the case."""
        probe, by = self._probe(case.id, case.precision_spec)  # the spec: policy, TF32, probe dtype, loss scaling
        copy, copy_by = self._copy(case.id)
        # the peak of every chip of the case, on every node: the throughput it is set against is global
        return {
            "peak_tflops_per_device": probe.tflops,
            "peak_tflops_measured": probe.tflops * case.physical_devices,
            "probe_n": probe.n,
            "probe_dtype": probe.dtype,
            "probe_case": by,
            "mem_bw_gbps_per_device": copy.gbps,
            "copy_probe_bytes": copy.n_bytes,
            "copy_probe_case": copy_by,
        }
