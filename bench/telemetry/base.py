"""Result dataclasses of a measurement window. Units are in the field names; None = not measured."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class GPUReading:
    """One GPU over one window.

    ``energy_source`` is ``counter`` (NVML total-energy counter delta), ``integrated instant
    power`` or ``integrated power usage`` (trapezoid over ``nvmlDeviceGetPowerUsage`` samples: a
    1 s average on Ampere and newer except GA100, instantaneous before), or None.
    ``throttle_reasons`` are the clock-event bits that mean a limit held the clocks down (power,
    thermal, hardware slowdown); ``clock_events_info`` the benign ones (idle, application
    clocks, sync boost, display). ``pstate`` is the performance state at the window's end.
    ``power_trace`` holds (seconds since window start, watts) pairs of instant power.
    ``reasons`` maps a metric left empty to why. ``compute_pids`` are the processes NVML saw
    computing on the GPU during the window (None where NVML would not say).
    """

    uuid: str
    name: str
    pci_bus_id: str
    duration_s: float
    energy_j: float | None
    energy_source: str | None
    power_mean_w: float | None
    power_max_w: float | None
    power_limit_w: float | None
    util_mean_pct: float | None
    sm_clock_mhz_median: float | None
    mem_clock_mhz_median: float | None
    temp_max_c: float | None
    nvml_memory_used_bytes: int | None
    nvml_memory_version: str | None
    throttle_reasons: tuple[str, ...]
    samples: int
    clock_events_info: tuple[str, ...] = ()
    pstate: str | None = None
    power_trace: list[tuple[float, float]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    compute_pids: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        d = asdict(self)
        d["compute_pids"] = None if self.compute_pids is None else list(self.compute_pids)
        d["throttle_reasons"] = list(self.throttle_reasons)
        d["clock_events_info"] = list(self.clock_events_info)
        d["power_trace"] = [list(p) for p in self.power_trace]
        return d


@dataclass(frozen=True)
class HostReading:
    """The host over one window: this process's memory and CPU, the machine's CPU, RAPL energy.

    Percentages are shares of all logical cores: ``host_cpu_util_pct`` everything busy (steal
    included), ``process_cpu_util_pct`` this process, ``other_cpu_pct`` the difference (what
    other processes, or the hypervisor, took from the benchmark).
    """

    duration_s: float
    host_peak_rss_bytes: int | None
    host_rss_samples_max_bytes: int | None
    host_cpu_util_pct: float | None
    process_cpu_util_pct: float | None
    cpu_energy_j: float | None
    cpu_energy_reason: str
    peak_rss_source: str
    other_cpu_pct: float | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class Measurement:
    """Everything one window measured; ``gpu_telemetry`` says ``ok ...`` or ``unavailable: why``."""

    duration_s: float
    gpu_telemetry: str
    gpus: list[GPUReading]
    host: HostReading
    sampler_error: str | None = None
    sampler_cpu_s: float | None = None

    @property
    def energy_j(self) -> float | None:
        """Sum over the GPUs; None unless every GPU's energy was measured."""
        if not self.gpus or any(g.energy_j is None for g in self.gpus):
            return None
        return sum(g.energy_j for g in self.gpus if g.energy_j is not None)

    @property
    def power_mean_w(self) -> float | None:
        """Energy over time (never the mean of samples)."""
        e = self.energy_j
        return None if e is None or self.duration_s <= 0 else e / self.duration_s

    @property
    def power_max_w(self) -> float | None:
        """Highest sampled total over GPUs (sum of the per-GPU maxima, an upper bound)."""
        vals = [g.power_max_w for g in self.gpus]
        return None if not vals or any(v is None for v in vals) else sum(v for v in vals if v is not None)
