"""NVIDIA GPUs through NVML: discovery, the TensorFlow <-> NVML mapping, windows, idle power.

NVML is reached only through :mod:`bench.telemetry.nvml`, which resolves every function by
name and translates errors. A metric that is not offered is recorded as None with its reason,
never as 0, and never estimated.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.telemetry import nvml
from bench.telemetry.base import GPUReading
from bench.telemetry.energy_check import trapezoid, window_energy
from bench.telemetry.nvml import GPULost, MetricUnsupported, NVMLUnavailable, call

MAX_TRACE_POINTS = 600
PROCESS_EVERY = 10  # list the GPU's compute processes every 10th sample (~1 s at 10 Hz), and at both ends
__all__ = ["GPULost", "MetricUnsupported", "NVMLUnavailable"]


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` (NVML) and ``0000:3b:00.0`` (CUDA, TensorFlow) -> ``0000:3b:00.0``."""
    try:
        dom, bus, rest = bus_id.strip().lower().split(":")
        dev, fn = rest.split(".")
        return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn, 16)}"
    except ValueError:
        return bus_id.strip().lower()


@dataclass(frozen=True)
class GPUInfo:
    """What NVML says a GPU is. ``nvml_index`` is NVML's own order, which may differ from CUDA's."""

    nvml_index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total_bytes: int | None
    compute_capability: tuple[int, int] | None
    capabilities: dict[str, str] = field(default_factory=dict)
    mig: bool = False
    compute_mode: str | None = None  # default | exclusive_process | prohibited (None: not reported)
    # what the machine lets the GPU reach, for "is this machine configured as published ones are?"
    max_sm_clock_mhz: int | None = None
    power_limit_w: float | None = None  # enforced
    default_power_limit_w: float | None = None
    pcie_max: str | None = None  # the fastest link this GPU and this slot allow, e.g. "gen4 x16"
    pcie_gpu_max_gen: int | None = None  # the GPU's own fastest generation (a slower slot lowers pcie_max)

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {
            "nvml_index": self.nvml_index,
            "name": self.name,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "memory_total_bytes": self.memory_total_bytes,
            "compute_capability": list(self.compute_capability) if self.compute_capability else None,
            "capabilities": dict(self.capabilities),
            "mig": self.mig,
            "compute_mode": self.compute_mode,
            "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "power_limit_w": self.power_limit_w,
            "default_power_limit_w": self.default_power_limit_w,
            "pcie_max": self.pcie_max,
            "pcie_gpu_max_gen": self.pcie_gpu_max_gen,
        }


@dataclass
class Discovery:
    """NVML's view of the machine.

    ``reason`` is set when NVML could not be used at all; ``notes`` lists GPUs NVML would not
    open (e.g. permission denied on one GPU) and a binding problem (an old or shadowing
    ``pynvml``), each with what to do.
    """

    gpus: list[GPUInfo]
    driver_version: str | None
    cuda_driver_version: str | None
    reason: str | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {
            "gpus": [g.to_dict() for g in self.gpus],
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "reason": self.reason,
            "notes": list(self.notes),
            "binding": nvml.binding_version(),
        }


def init() -> None:
    """nvmlInit, translated; raises NVMLUnavailable."""
    try:
        call("nvmlInit")
    except (MetricUnsupported, GPULost) as e:
        raise NVMLUnavailable(f"NVML init failed: {e}") from None


# NVML's compute modes (nvmlComputeMode_t): under exclusive_process a second process on the GPU is
# refused a context, so a probe or telemetry process beside a case can fail (gpu-review-2 finding 13)
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


def _watts(mw: Any) -> float | None:
    return None if mw is None else mw / 1000.0


def _pcie_max(h: Any) -> str | None:
    gen = nvml.optional("nvmlDeviceGetMaxPcieLinkGeneration", h)
    width = nvml.optional("nvmlDeviceGetMaxPcieLinkWidth", h)
    return f"gen{gen} x{width}" if gen and width else None


def _gpu_info(i: int) -> GPUInfo:
    h = call("nvmlDeviceGetHandleByIndex", i)
    mem = nvml.optional("nvmlDeviceGetMemoryInfo", h)
    cc = nvml.optional("nvmlDeviceGetCudaComputeCapability", h)
    max_sm = nvml.optional("nvmlDeviceGetMaxClockInfo", h, nvml.const("NVML_CLOCK_SM"))
    return GPUInfo(
        nvml_index=i,
        name=nvml.text(call("nvmlDeviceGetName", h)),
        uuid=nvml.text(call("nvmlDeviceGetUUID", h)),
        pci_bus_id=normalize_bus_id(nvml.text(call("nvmlDeviceGetPciInfo", h).busId)),
        memory_total_bytes=int(mem.total) if mem is not None else None,
        compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
        capabilities=nvml.capabilities(h),
        mig=nvml.mig_enabled(h),
        compute_mode=COMPUTE_MODES.get(mode, f"mode {mode}")
        if (mode := nvml.optional("nvmlDeviceGetComputeMode", h)) is not None
        else None,
        max_sm_clock_mhz=int(max_sm) if max_sm else None,
        power_limit_w=_watts(nvml.optional("nvmlDeviceGetEnforcedPowerLimit", h)),
        default_power_limit_w=_watts(nvml.optional("nvmlDeviceGetPowerManagementDefaultLimit", h)),
        pcie_max=_pcie_max(h),
        pcie_gpu_max_gen=nvml.optional("nvmlDeviceGetGpuMaxPcieLinkGeneration", h),
    )


def discover() -> Discovery:
    """Every GPU NVML can open, sorted by PCI bus id (the order CUDA uses with PCI_BUS_ID)."""
    notes = [p for p in [nvml.binding_problem()] if p]
    try:
        init()
        count = call("nvmlDeviceGetCount")
    except (NVMLUnavailable, GPULost, MetricUnsupported) as e:
        return Discovery([], None, None, str(e), notes)
    gpus = []
    for i in range(count):
        try:
            gpus.append(_gpu_info(i))
        except (MetricUnsupported, GPULost) as e:  # one GPU we may not open costs only that GPU
            notes.append(f"NVML GPU {i} skipped: {e}")
    driver = nvml.optional("nvmlSystemGetDriverVersion")
    cuda = nvml.optional("nvmlSystemGetCudaDriverVersion_v2")
    cuda_s = f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}" if cuda else None
    gpus.sort(key=lambda g: g.pci_bus_id)
    return Discovery(gpus, nvml.text(driver) if driver else None, cuda_s, None, notes)


def visible_gpus(all_gpus: Sequence[GPUInfo], env: Mapping[str, str] | None = None) -> list[GPUInfo] | str:
    """The GPUs CUDA (and so TensorFlow) numbers 0, 1, ..., matched by UUID or PCI bus order.

    ``all_gpus`` must be sorted by PCI bus id (as :func:`discover` returns them): with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, which accelbench sets before TensorFlow starts, CUDA's
    index k is the k-th GPU in bus order. ``CUDA_VISIBLE_DEVICES`` may hold indices, UUIDs
    (``GPU-...``, prefixes allowed) or MIG ids. Returns a reason string when it cannot map.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    spec = environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(all_gpus)
    out: list[GPUInfo] = []
    for tok in [t.strip() for t in spec.split(",") if t.strip()]:
        if tok.startswith("MIG-"):
            return "CUDA_VISIBLE_DEVICES names MIG instances; per-instance power is not offered by NVML"
        if tok.startswith("GPU-"):
            hits = [g for g in all_gpus if g.uuid.startswith(tok)]
            if len(hits) != 1:
                return f"CUDA_VISIBLE_DEVICES entry {tok!r} matches {len(hits)} GPUs"
            out.append(hits[0])
            continue
        try:
            k = int(tok)
        except ValueError:
            return f"cannot read CUDA_VISIBLE_DEVICES entry {tok!r}"
        if k < 0 or k >= len(all_gpus):
            break  # CUDA stops at the first invalid index
        out.append(all_gpus[k])
    return out


class _GPUWindow:
    """Samples and counters of one GPU over one window."""

    def __init__(self, info: GPUInfo, handle: Any):
        self.info, self.h = info, handle
        self.reasons: dict[str, str] = {}
        self.lost = False
        self.t0 = 0.0
        self.e0: float | None = None
        self.power: list[tuple[float, float]] = []
        self.avg_power: list[tuple[float, float]] = []
        self.util: list[float] = []
        self.sm: list[float] = []
        self.mem: list[float] = []
        self.temp: list[float] = []
        self.mask = 0
        self.pstate: str | None = None
        self.last_t: float | None = None
        self.pids: set[int] = set()
        self.n = 0

    def _processes(self) -> None:
        found = self._read("processes", lambda: call("nvmlDeviceGetComputeRunningProcesses", self.h))
        if found is not None:
            self.pids.update(int(p.pid) for p in found)

    def _read(self, metric: str, fn: Callable[[], Any]) -> Any:
        if self.lost or metric in self.reasons:
            return None
        try:
            return fn()
        except MetricUnsupported as e:
            self.reasons[metric] = str(e)
        except GPULost:
            self.lost = True
        return None

    def begin(self, t: float) -> None:
        self.t0 = t
        self.e0 = self._read("energy_counter", lambda: call("nvmlDeviceGetTotalEnergyConsumption", self.h))
        self._processes()
        self.sample(t)

    def sample(self, t: float) -> None:
        self.last_t = t
        self.n += 1
        if self.n % PROCESS_EVERY == 0:
            self._processes()
        p = self._read("instant_power", lambda: nvml.instant_power_w(self.h))
        if p is not None:
            self.power.append((t - self.t0, p))
        else:
            a = self._read("average_power", lambda: call("nvmlDeviceGetPowerUsage", self.h) / 1000.0)
            if a is not None:
                self.avg_power.append((t - self.t0, a))
        for metric, store, fn in (
            ("utilization", self.util, lambda: call("nvmlDeviceGetUtilizationRates", self.h).gpu),
            ("sm_clock", self.sm, lambda: call("nvmlDeviceGetClockInfo", self.h, nvml.const("NVML_CLOCK_SM"))),
            ("mem_clock", self.mem, lambda: call("nvmlDeviceGetClockInfo", self.h, nvml.const("NVML_CLOCK_MEM"))),
            ("temperature", self.temp, lambda: nvml.temperature_c(self.h)),
        ):
            v = self._read(metric, fn)
            if v is not None:
                store.append(float(v))
        m = self._read("clock_event_reasons", lambda: nvml.clock_event_reasons(self.h))
        if m is not None:
            self.mask |= m

    def end(self, t: float) -> GPUReading:
        if self.last_t is None or t > self.last_t:
            self.sample(t)
        duration = t - self.t0
        e1 = self._read("energy_counter", lambda: call("nvmlDeviceGetTotalEnergyConsumption", self.h))
        limit = self._read("power_limit", lambda: call("nvmlDeviceGetEnforcedPowerLimit", self.h) / 1000.0)
        mem = self._read("nvml_memory", lambda: nvml.memory_used_bytes(self.h))
        self.pstate = self._read("pstate", lambda: nvml.pstate(self.h))
        self._processes()
        throttle, info = nvml.decode_reasons(self.mask)
        energy, source = None, None
        counter = (float(e1) - float(self.e0)) / 1000.0 if self.e0 is not None and e1 is not None else None
        if self.lost:
            self.reasons["gpu"] = "GPU lost during the window"
        elif counter is not None or len(self.power) >= 2:
            energy, source, why = window_energy(counter, self.power, duration)
            if why:
                self.reasons.setdefault("energy", why)
        elif len(self.avg_power) >= 2:
            energy, source = trapezoid(self.avg_power), "integrated power usage"
        else:
            self.reasons.setdefault("energy", "no energy counter and too few power samples")
        peaks = [p for _, p in self.power] or [p for _, p in self.avg_power]
        return GPUReading(
            uuid=self.info.uuid,
            name=self.info.name,
            pci_bus_id=self.info.pci_bus_id,
            duration_s=duration,
            energy_j=None if self.lost else energy,
            energy_source=None if self.lost else source,
            power_mean_w=None if self.lost or energy is None or duration <= 0 else energy / duration,
            power_max_w=None if self.lost or not peaks else max(peaks),
            power_limit_w=limit,
            util_mean_pct=statistics.fmean(self.util) if self.util and not self.lost else None,
            sm_clock_mhz_median=statistics.median(self.sm) if self.sm and not self.lost else None,
            mem_clock_mhz_median=statistics.median(self.mem) if self.mem and not self.lost else None,
            temp_max_c=max(self.temp) if self.temp and not self.lost else None,
            nvml_memory_used_bytes=mem[0] if mem else None,
            nvml_memory_version=mem[1] if mem else None,
            throttle_reasons=throttle,
            clock_events_info=info,
            pstate=self.pstate,
            samples=len(self.power) + len(self.avg_power),
            power_trace=_downsample(self.power or self.avg_power, MAX_TRACE_POINTS),
            reasons=dict(self.reasons),
            compute_pids=None if "processes" in self.reasons or self.lost else tuple(sorted(self.pids)),
        )


def _downsample(points: list[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    if len(points) <= n:
        return [(round(t, 4), round(p, 3)) for t, p in points]
    step = len(points) / n
    return [(round(points[int(i * step)][0], 4), round(points[int(i * step)][1], 3)) for i in range(n)]


class NvidiaGPUs:
    """The GPUs one case uses, as a window source (begin / sample / end)."""

    def __init__(self, gpus: Sequence[GPUInfo]):
        self.gpus = list(gpus)
        self.handles = [call("nvmlDeviceGetHandleByUUID", g.uuid) for g in self.gpus]
        self._windows: list[_GPUWindow] = []

    @property
    def status(self) -> str:
        """``ok: N GPU(s) via NVML``."""
        return f"ok: {len(self.gpus)} GPU(s) via NVML"

    def begin(self, t: float) -> None:
        """Open the window: read each GPU's energy counter."""
        self._windows = [_GPUWindow(g, h) for g, h in zip(self.gpus, self.handles)]
        for w in self._windows:
            w.begin(t)

    def sample(self, t: float) -> None:
        """One sample of every GPU."""
        for w in self._windows:
            w.sample(t)

    def end(self, t: float) -> list[GPUReading]:
        """Close the window."""
        return [w.end(t) for w in self._windows]

    def series(self) -> list[tuple[list[float], list[float]]]:
        """Per GPU, the SM clock and temperature samples of the open window so far."""
        return [(list(w.sm), list(w.temp)) for w in self._windows]


class EmptyGPUs:
    """Stand-in where no GPU telemetry exists; records why."""

    def __init__(self, reason: str):
        self.reason = reason
        self.gpus: list[GPUInfo] = []

    @property
    def status(self) -> str:
        """``unavailable: why``."""
        return f"unavailable: {self.reason}"

    def begin(self, t: float) -> None:
        """Nothing to open."""

    def sample(self, t: float) -> None:
        """Nothing to sample."""

    def end(self, t: float) -> list[GPUReading]:
        """No readings."""
        return []


def _mig_reason(gpus: Sequence[GPUInfo]) -> str | None:
    mig = [g for g in gpus if g.mig]
    if not mig:
        return None
    return (
        f"MIG mode is on for {', '.join(g.pci_bus_id for g in mig)}: NVML's power and energy are the whole "
        "GPU's (other instances included) and utilisation is not offered, so GPU telemetry is off"
    )


def _open(chosen: Sequence[GPUInfo]) -> NvidiaGPUs | EmptyGPUs:
    why = _mig_reason(chosen)
    if why:
        return EmptyGPUs(why)
    try:
        return NvidiaGPUs(chosen)
    except (NVMLUnavailable, MetricUnsupported, GPULost) as e:
        return EmptyGPUs(str(e))


def open_gpus(tf_positions: Sequence[int], env: Mapping[str, str] | None = None) -> NvidiaGPUs | EmptyGPUs:
    """Telemetry for the GPUs CUDA numbers ``tf_positions`` (bus order); never raises.

    Prefer :func:`open_gpus_by_bus_id` with the bus ids TensorFlow reports: TensorFlow skips
    GPUs it cannot use (too few SMs, too old), so its numbering can differ from CUDA's.
    An empty ``tf_positions`` (a CPU case) gives EmptyGPUs with "case uses no GPU".
    """
    if not tf_positions:
        return EmptyGPUs("case uses no GPU")
    found = discover()
    if found.reason:
        return EmptyGPUs(found.reason)
    if any(n.startswith("NVML GPU") for n in found.notes):
        return EmptyGPUs(f"cannot map GPUs by position: {'; '.join(found.notes)}")
    visible = visible_gpus(found.gpus, env)
    if isinstance(visible, str):
        return EmptyGPUs(visible)
    if max(tf_positions) >= len(visible):
        return EmptyGPUs(f"TensorFlow GPU {max(tf_positions)} has no NVML match ({len(visible)} visible)")
    return _open([visible[i] for i in tf_positions])


def open_gpus_by_bus_id(bus_ids: Sequence[str]) -> NvidiaGPUs | EmptyGPUs:
    """Telemetry for the GPUs with these PCI bus ids (as TensorFlow reports them); never raises."""
    if not bus_ids:
        return EmptyGPUs("case uses no GPU")
    found = discover()
    if found.reason:
        return EmptyGPUs(found.reason)
    by_bus = {g.pci_bus_id: g for g in found.gpus}
    wanted = [normalize_bus_id(b) for b in bus_ids]
    missing = [b for b in wanted if b not in by_bus]
    if missing:
        return EmptyGPUs(f"no NVML GPU at PCI bus id {', '.join(missing)} ({'; '.join(found.notes) or 'not listed'})")
    return _open([by_bus[b] for b in wanted])
