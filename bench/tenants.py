"""N tenants of one device: which cases can share, the memory cap, and one record from N workers' rounds.

A case with ``tenants`` N > 1 runs as N copies of itself at once on its one device (CPU, or one
physical GPU), each in its own worker (``bench.tenant_run``), after an alone baseline with the
same memory cap. This module is the pure part: support rules, the cap, and :func:`combine`,
which lays the tenants' round stamps side by side, keeps the window all of them ran in, and
derives the multiprogram figures of :mod:`bench.sharing`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import loop, records, stats
from bench.capability import OK, Support
from bench.cases import Case
from bench.devices import Machine
from bench.sharing import Sharing, common_window, rate_in_window, sharing_mode
from bench.telemetry import gpus, nvml
from bench.telemetry.gpus import GPUInfo

MEMORY_SHARE = 0.9  # of the GPU's memory the tenants split evenly (the rest: contexts, workspaces, driver)
MAX_TENANTS = 16
# NVML power and energy are the whole device's: they cannot be split between tenants
ENERGY_NOTE = "device energy over the shared window per sample of all tenants (NVML measures the whole GPU)"


def parse(text: str) -> tuple[tuple[int, ...], bool]:
    """``--tenants 2,4,mix`` -> ((2, 4), True): counts from 2 to MAX_TENANTS (1 is every ordinary case), and the mix."""
    words = [t.strip() for t in text.split(",") if t.strip()]
    mix = "mix" in words
    try:
        counts = tuple(sorted({int(t) for t in words if t != "mix"}))
    except ValueError:
        counts = (0,)
    if not words or any(not 2 <= n <= MAX_TENANTS for n in counts):
        raise ValueError(
            f"--tenants takes counts from 2 to {MAX_TENANTS} and/or mix, comma-separated (e.g. 2,4,mix); got {text!r}"
        )
    return counts, mix


def memory_limit_mb(total_bytes: int | None, tenants: int) -> int | None:
    """Each tenant's GPU memory cap: MEMORY_SHARE of the total over N (None where NVML gave no total)."""
    return int(total_bytes * MEMORY_SHARE / tenants) // 2**20 if total_bytes else None


def mps_running(env: Mapping[str, str] | None = None) -> bool:
    """Whether an MPS control daemon serves this user: its pipe, where CUDA clients look for it."""
    env = os.environ if env is None else env
    return (Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps") / "control").exists()


def case_gpu(case: Case, machine: Machine) -> GPUInfo | None:
    """NVML's record of the one GPU a tenant case runs on (None: not known)."""
    if case.backend != "tensorflow":
        buses = machine.jax_gpu_plan("gpu", 1)["pci_bus_ids"]
    else:
        buses = machine.gpu_plan("gpu", 1, False)["pci_bus_ids"]
    return next((g for g in machine.nvml.gpus if buses and g.pci_bus_id == buses[0]), None)


def support(case: Case, machine: Machine) -> Support:
    """Whether N tenants of this (otherwise supported) case can share its device, and why not."""
    if case.tenants == 1:
        return OK
    if case.device_count > 1 or case.virtual or case.nodes > 1:
        return Support(False, "tenants share one physical device: run them on cpu or gpu:1 (no virtual split)")
    if case.mode == "serve":
        return Support(False, "serve cases run alone: a rate search beside other tenants is not measured yet")
    if case.device_kind == "cpu":
        return OK
    gpu = case_gpu(case, machine)
    if gpu is None:
        return Support(False, "NVML does not know this case's GPU: its memory cannot be split between tenants")
    mode, why = sharing_mode("gpu", gpu.mig, gpu.compute_mode, 1 if mps_running() else 0)
    if mode is None:
        return Support(False, why)
    if mode == "mig":
        return Support(
            False,
            "MIG is on: each tenant would need its own MIG instance, and accelbench does not place tenants "
            "on instances (run one accelbench per instance, CUDA_VISIBLE_DEVICES=MIG-<uuid>; docs/method.md)",
        )
    if not memory_limit_mb(gpu.memory_total_bytes, case.tenants):
        return Support(False, "NVML gave no total memory for this GPU: each tenant's memory cap cannot be sized")
    return OK


def _rounds(rec: Mapping[str, Any]) -> list[tuple[float, float, int]]:
    e = rec["extra_info"]
    n = int(e["global_batch"]) * int(e["steps_per_round"])
    return [(float(s), float(t), n) for s, t in e.get("tenant_rounds") or []]


def _span(rounds: Sequence[tuple[float, float, int]]) -> tuple[float, float]:
    return rounds[0][0], rounds[-1][1]


def combine(
    case: Case, alone: Mapping[str, Any], tenants: Sequence[Mapping[str, Any]], observed: Mapping[str, Any]
) -> dict:
    """One record for the case from the alone baseline's record and each tenant's (all measured).

    The window is the time every tenant was in its rounds ([latest first start, earliest last
    end]); each tenant's rate counts only its rounds wholly inside it. ``samples_per_s`` is the
    aggregate; the pytest-benchmark ``stats`` are one sample's time of the whole device (each
    tenant round's time over the samples all N make in it: exact when the tenants keep pace).
    ``observed``: what NVML saw mid-window (sharing mode, per-process memory), or a CPU's mode.
    Raises ValueError when the tenants never overlapped or one finished no round inside.
    """
    n = case.tenants
    per = [_rounds(t) for t in tenants]
    base = _rounds(alone)
    window = common_window([_span(r) for r in per if r])
    if window is None or len(per) != n or not all(per) or not base:
        raise ValueError("the tenants never ran at the same time (one started after another had finished)")
    if case.neighbour:
        return _mix(case, base, per, window, tenants[0]["extra_info"], observed)
    rates = [rate_in_window(r, window) for r in per]
    if any(r is None for r in rates):
        late = [i for i, r in enumerate(rates) if r is None]
        raise ValueError(f"tenant(s) {late} finished no round inside the {window[1] - window[0]:.2f} s shared window")
    alone_rate = rate_in_window(base, _span(base))
    assert alone_rate is not None  # a measured baseline has rounds
    sh = Sharing(alone_rate, tuple(float(r) for r in rates if r is not None))
    first = tenants[0]["extra_info"]
    k = int(first["steps_per_round"])
    inside = [t - s for r in per for s, t, _ in r if s >= window[0] and t <= window[1]]
    # each tenant's rounds as one case's: step times under sharing, the rounds' spread (scaled to the aggregate)
    figures = loop.summarize(case, inside, k)
    scale = sh.aggregate / figures["samples_per_s"]
    lo, hi = figures["samples_per_s_ci_low"], figures["samples_per_s_ci_high"]
    info = records.base_info(case, first["run_id"], first.get("flops_per_sample"), first.get("model_flops_per_sample"))
    keep = (
        *("math_mode", "all_reduce", "framework", "devices", "pci_bus_ids", "params", "xla_scope", "compile_s"),
        *("peak_tflops_per_device", "peak_tflops_measured", "probe_n", "probe_dtype", "mem_bw_gbps_per_device"),
        *("intra_op_threads", "inter_op_threads"),
    )
    info.update({key: first[key] for key in keep if key in first})
    power = first.get("power_mean_w")
    peaks = [t["extra_info"].get("device_peak_mem_bytes") for t in tenants]
    info.update(figures)
    info.update(
        status="ok",
        tenants=n,
        samples_per_s=sh.aggregate,
        samples_per_s_ci_low=lo * scale if lo is not None else None,
        samples_per_s_ci_high=hi * scale if hi is not None else None,
        shared_window_s=window[1] - window[0],
        tenant_samples_per_s=list(sh.shared),
        tenant_slowdown=[alone_rate / r if r else None for r in sh.shared],
        alone_samples_per_s=alone_rate,
        alone_step_time_median_s=alone["extra_info"].get("step_time_median_s"),
        # the reference every ratio here divides by: measured while other processes used the machine?
        alone_busy=bool(alone["extra_info"].get("busy")),
        stp=sh.stp,
        antt=sh.antt,
        worst_slowdown=sh.worst_slowdown,
        fairness=sh.fairness,
        jain=sh.jain,
        sharing_verdict=sh.verdict(),
        tenant_device_peak_mem_bytes=peaks,
        device_peak_mem_bytes=sum(p for p in peaks if p) if any(peaks) else None,
        power_mean_w=power,
        energy_j_per_sample=power / sh.aggregate if power and sh.aggregate else None,
        energy_note=ENERGY_NOTE if power else "",
        achieved_tflops=(first.get("flops_per_sample") or 0) * sh.aggregate / 1e12 or None,
        tenant_case_wall_s=[t["extra_info"].get("case_wall_s") for t in tenants],
        **observed,
    )
    peak = info.get("peak_tflops_measured")
    info["mfu_measured"] = info["achieved_tflops"] / peak if peak and info["achieved_tflops"] else None
    # as pytest-benchmark's rounds: each tenant round's time over N (a round of the whole device's samples)
    return records.measured(case, records.unmeasured(case, info), info, [t / n for t in inside])


def observe(case: Case, bus_id: str | None, pids: Sequence[int]) -> dict:
    """What the machine does with the tenants, read mid-window: the sharing mode and each one's GPU memory.

    A tenant NVML lists as an MPS client means MPS; otherwise the GPU time-slices. Per-process
    memory is NVML's ``usedGpuMemory`` (None where the driver does not say, as under MPS on
    some drivers). Never raises: without NVML the mode comes from the MPS pipe, and says so.
    """
    if case.device_kind == "cpu":
        return {"sharing_mode": "cpu", "sharing_note": sharing_mode("cpu", False, None, None)[1]}
    guess = "mps" if mps_running() else "time-slicing"
    try:
        found = gpus.discover()
        gpu = next(g for g in found.gpus if bus_id and g.pci_bus_id == gpus.normalize_bus_id(bus_id))
        h = nvml.call("nvmlDeviceGetHandleByUUID", gpu.uuid)
        plain = {int(p.pid): p.usedGpuMemory for p in nvml.call("nvmlDeviceGetComputeRunningProcesses", h)}
        mps = {int(p.pid): p.usedGpuMemory for p in nvml.optional("nvmlDeviceGetMPSComputeRunningProcesses", h) or []}
    except (StopIteration, nvml.NVMLUnavailable, nvml.MetricUnsupported, nvml.GPULost) as e:
        why = "the GPU is not listed" if isinstance(e, StopIteration) else f"{type(e).__name__}: {e}"
        return {"sharing_mode": guess, "sharing_note": f"not read from NVML ({why}); from the MPS pipe"}
    mode = "mps" if set(pids) & set(mps) else "time-slicing"
    mem = [x if isinstance(x, int) and 0 <= x < 2**63 else None for x in ({**plain, **mps}.get(p) for p in pids)]
    known = [x for x in mem if x is not None]
    return {
        "sharing_mode": mode,
        "sharing_note": sharing_mode("gpu", False, None, 1 if mode == "mps" else 0)[1],
        "tenant_gpu_mem_bytes": mem,
        "tenant_gpu_mem_sum_bytes": sum(known) if len(known) == len(mem) else None,
        "gpu_memory_total_bytes": gpu.memory_total_bytes,
        "tenant_memory_cap_bytes": (memory_limit_mb(gpu.memory_total_bytes, case.tenants) or 0) * 2**20 or None,
    }


def _mix(
    case: Case,
    base: list[tuple[float, float, int]],
    per: list[list[tuple[float, float, int]]],
    window: tuple[float, float],
    first: Mapping[str, Any],
    observed: Mapping[str, Any],
) -> dict:
    """A mix case: the latency tenant's requests (one per round) alone and beside its neighbour, in the window."""
    lat = [t - s for s, t, _ in per[0] if s >= window[0] and t <= window[1]]
    solo = [t - s for s, t, _ in base]
    neighbour = rate_in_window(per[1], window)
    if len(lat) < 2 or neighbour is None:
        raise ValueError(
            f"the latency tenant or its neighbour finished no round inside the {window[1] - window[0]:.2f} s window"
        )
    # a p99 of fewer than 100 requests is their largest: None, and no inflation of it (stats.samples_to_resolve)
    p50, p99 = stats.percentile(lat, 50), stats.resolved_percentile(lat, 99)
    a50, a99 = stats.percentile(solo, 50), stats.resolved_percentile(solo, 99)
    info = records.base_info(case, first["run_id"], first.get("flops_per_sample"), first.get("model_flops_per_sample"))
    info.update(
        {k: first[k] for k in ("math_mode", "framework", "devices", "pci_bus_ids", "params", "compile_s") if k in first}
    )
    # each request is a round: the median rate with its CI, as every other case's (not 1 / mean latency)
    info.update(loop.summarize(case, lat, 1))
    info.update(
        status="ok",
        tenants=2,
        neighbour=case.neighbour,
        shared_window_s=window[1] - window[0],
        latency_p50_s=p50,
        latency_p90_s=stats.resolved_percentile(lat, 90),
        latency_p99_s=p99,
        latency_samples=len(lat),
        alone_latency_p50_s=a50,
        alone_latency_samples=len(solo),
        alone_latency_p99_s=a99,
        latency_p99_inflation=p99 / a99 if p99 and a99 else None,
        neighbour_samples_per_s=neighbour,
        alone_samples_per_s=case.global_batch / stats.percentile(solo, 50),
        sharing_verdict=_verdict(case, (a50, a99, len(solo)), (p50, p99, len(lat))),
        **observed,
    )
    return records.measured(case, records.unmeasured(case, info), info, lat)


def _verdict(case: Case, alone: tuple[float, float | None, int], beside: tuple[float, float | None, int]) -> str:
    """The p99 alone and beside the neighbour; the p50s where either has too few requests to resolve a p99."""
    where = f"beside {case.neighbour_case().mode} at batch {case.neighbour_case().per_replica_batch}"
    (a50, a99, na), (p50, p99, n) = alone, beside
    if a99 and p99:
        return f"p99 {a99 * 1e3:.3g} ms alone, {p99 * 1e3:.3g} ms {where} ({p99 / a99:.2g}x)"
    return (
        f"p50 {a50 * 1e3:.3g} ms alone, {p50 * 1e3:.3g} ms {where} ({p50 / a50:.2g}x); no p99: {na} and {n} "
        f"requests, a p99 needs {stats.samples_to_resolve(99)}"
    )
