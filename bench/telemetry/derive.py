"""Per-case figures derived from a window's Measurement (names as in the CSV)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable

from bench.telemetry.base import GPUReading, Measurement

# Busy-machine witness (README "A busy machine"): a case is flagged busy when other processes
# used more than this share of all cores during its timed rounds, or computed on its GPUs.
BUSY_OTHER_CPU_PCT = 10.0


def other_gpu_processes(gpus: list[GPUReading], own_pid: int) -> tuple[int | None, str]:
    """(processes other than ``own_pid`` computing on these GPUs, a note); None where unknown.

    In a container without the host's PID namespace NVML lists host PIDs, so the worker's own
    PID is not among them: then one listed process is taken to be the worker.
    """
    if not gpus or any(g.compute_pids is None for g in gpus):
        return None, ""
    pids = {p for g in gpus for p in g.compute_pids or ()}
    if own_pid in pids:
        return len(pids - {own_pid}), ""
    if not pids:
        return 0, ""
    return len(
        pids
    ) - 1, "the worker's PID is not among NVML's (another PID namespace): one listed process taken as the worker"


def busy_note(other_cpu_pct: float | None, other_gpu: int | None) -> str:
    """``busy: other processes used 33% of the CPU; 1 other process computed on the GPU`` or ``""``."""
    parts = []
    if other_cpu_pct is not None and other_cpu_pct > BUSY_OTHER_CPU_PCT:  # NaN (a table's empty cell) is not
        parts.append(f"other processes used {other_cpu_pct:.0f}% of the CPU")
    if other_gpu is not None and other_gpu > 0:
        other_gpu = int(other_gpu)
        parts.append(f"{other_gpu} other process{'es' if other_gpu > 1 else ''} computed on the GPU")
    return "busy: " + "; ".join(parts) if parts else ""


def power_limit_w(limits: Iterable[float | None]) -> float | None:
    """The GPUs' enforced power limits summed; None unless every GPU's is known."""
    known = list(limits)
    return float(sum(known)) if known and None not in known else None  # type: ignore[arg-type]


def derive(m: Measurement, samples: int, idle_power_w: float | None, own_pid: int | None = None) -> dict:
    """Energy per sample, samples per joule, energy above idle, GPU and host summaries.

    ``samples`` are the global samples processed in the window; ``idle_power_w`` the summed
    idle power of the GPUs used (None where unknown). Missing inputs give None, never 0.
    ``own_pid`` is the measuring process (default: this one), not counted as another GPU process.
    """
    e = m.energy_j
    gpus = m.gpus
    reasons = sorted({f"{g.name}: {k}: {v}" for g in gpus for k, v in g.reasons.items()})
    status = m.gpu_telemetry
    if status.startswith("ok") and reasons:
        status = f"partial: {'; '.join(reasons)}"
    util = [g.util_mean_pct for g in gpus if g.util_mean_pct is not None]
    sm = [g.sm_clock_mhz_median for g in gpus if g.sm_clock_mhz_median is not None]
    temps = [g.temp_max_c for g in gpus if g.temp_max_c is not None]
    mem = [g.nvml_memory_used_bytes for g in gpus]
    throttle = sorted({r for g in gpus for r in g.throttle_reasons})
    info = sorted({r for g in gpus for r in g.clock_events_info})
    sources = sorted({g.energy_source for g in gpus if g.energy_source})
    h = m.host
    other_gpu, gpu_note = other_gpu_processes(gpus, os.getpid() if own_pid is None else own_pid)
    note = busy_note(h.other_cpu_pct, other_gpu)
    return {
        "energy_j": e,
        "energy_j_per_sample": e / samples if e is not None and samples else None,
        "samples_per_joule": samples / e if e else None,
        "energy_above_idle_j": e - idle_power_w * m.duration_s if e is not None and idle_power_w is not None else None,
        "power_mean_w": m.power_mean_w,
        "power_max_w": m.power_max_w,
        "idle_power_w": idle_power_w,
        "gpu_util_mean_pct": statistics.fmean(util) if util and len(util) == len(gpus) else None,
        "sm_clock_mhz_median": statistics.median(sm) if sm and len(sm) == len(gpus) else None,
        "temp_max_c": max(temps) if temps else None,
        "throttle_reasons": ",".join(throttle) if gpus else None,
        "clock_events_info": ",".join(info) if gpus else None,
        "gpu_telemetry": status,
        "nvml_memory_used_bytes": sum(x for x in mem if x is not None) if mem and None not in mem else None,
        "host_cpu_util_pct": h.host_cpu_util_pct,
        "process_cpu_util_pct": h.process_cpu_util_pct,
        "other_cpu_pct": h.other_cpu_pct,
        "other_gpu_processes": other_gpu,
        "other_gpu_processes_note": gpu_note or None,
        "busy": bool(note),
        "busy_note": note or None,
        "host_peak_rss_bytes": h.host_peak_rss_bytes,
        "cpu_energy_j": h.cpu_energy_j,
        "cpu_energy_reason": h.cpu_energy_reason,
        "energy_source": ",".join(sources) if sources else None,
        "energy_reason": "; ".join(sorted({g.reasons["energy"] for g in gpus if "energy" in g.reasons})) or None,
        "power_limit_w": power_limit_w(g.power_limit_w for g in gpus),
        "telemetry_window_s": m.duration_s,
        "telemetry": {
            "window_s": m.duration_s,
            "gpu_telemetry": m.gpu_telemetry,
            "sampler_error": m.sampler_error,
            "sampler_cpu_s": m.sampler_cpu_s,
            "gpus": [g.to_dict() for g in gpus],
            "host": h.to_dict(),
        },
    }
