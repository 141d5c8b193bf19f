"""NVIDIA GPUs through NVML (the ``pynvml`` module of ``nvidia-ml-py``), and the empty stand-in.

NVML errors are translated once, here, into three kinds the rest of the code branches on:
the library is unusable (:class:`NVMLUnavailable`), one metric is not offered
(:class:`MetricUnsupported`), the GPU has gone (:class:`GPULost`). A metric that is not offered
is recorded as None with its reason, never as 0, and never estimated.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from bench.telemetry.base import GPUReading

MAX_TRACE_POINTS = 600


class NVMLUnavailable(Exception):
    """NVML cannot be used at all (no library, no driver)."""


class MetricUnsupported(Exception):
    """One metric is not offered by this GPU or driver."""


class GPULost(Exception):
    """The GPU stopped answering."""


def _translate(e: pynvml.NVMLError) -> Exception:
    code = getattr(e, "value", None)
    if code in (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,):
        return NVMLUnavailable("NVML library not found")
    if code in (pynvml.NVML_ERROR_DRIVER_NOT_LOADED,):
        return NVMLUnavailable("NVIDIA driver not loaded")
    if code in (pynvml.NVML_ERROR_UNINITIALIZED,):
        return NVMLUnavailable("NVML not initialised")
    if code in (pynvml.NVML_ERROR_GPU_IS_LOST,):
        return GPULost("GPU is lost")
    if code in (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,):
        return MetricUnsupported("not in this driver's NVML (function not found)")
    if code in (pynvml.NVML_ERROR_NOT_SUPPORTED,):
        return MetricUnsupported("not supported by this GPU")
    if code in (pynvml.NVML_ERROR_NO_PERMISSION,):
        return MetricUnsupported("permission denied")
    return MetricUnsupported(f"NVML error: {e}")


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call an NVML function, translating its errors."""
    try:
        return fn(*args, **kwargs)
    except pynvml.NVMLError as e:
        raise _translate(e) from None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


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
        }


def _optional(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(fn, *args)
    except MetricUnsupported:
        return None


def instant_power_w(handle: Any) -> float:
    """Instant power (field NVML_FI_DEV_POWER_INSTANT), checking the field's own return code."""
    values = call(pynvml.nvmlDeviceGetFieldValues, handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])
    v = values[0]
    if v.nvmlReturn != pynvml.NVML_SUCCESS:
        raise _translate(pynvml.NVMLError(v.nvmlReturn))
    vt = v.valueType
    raw = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: v.value.dVal,
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: v.value.uiVal,
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: v.value.ulVal,
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: v.value.ullVal,
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: v.value.sllVal,
    }.get(vt, v.value.uiVal)
    return float(raw) / 1000.0  # mW -> W


def memory_used_bytes(handle: Any) -> tuple[int, str]:
    """Device-wide used memory: v2 (excludes driver-reserved memory), v1 where v2 is missing."""
    try:
        return int(call(pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2).used), "v2"
    except MetricUnsupported:
        return int(call(pynvml.nvmlDeviceGetMemoryInfo, handle).used), "v1"


def clock_event_reasons(handle: Any) -> int:
    """Clock-event (throttle) reason bitmask; the deprecated ThrottleReasons call as fallback."""
    try:
        return int(call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle))
    except MetricUnsupported:
        return int(call(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle))


def temperature_c(handle: Any) -> float:
    """GPU temperature; the deprecated call where nvmlDeviceGetTemperatureV is missing."""
    try:
        return float(call(pynvml.nvmlDeviceGetTemperatureV, handle, pynvml.NVML_TEMPERATURE_GPU))
    except MetricUnsupported:
        return float(call(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU))


REASON_NAMES = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_reasons(mask: int) -> tuple[str, ...]:
    """Bitmask -> names (unknown bits as ``0x...``), in bit order."""
    names = [n for bit, n in sorted(REASON_NAMES.items()) if mask & bit]
    unknown = mask & ~sum(REASON_NAMES)
    if unknown:
        names.append(hex(unknown))
    return tuple(names)


CAPABILITY_PROBES: dict[str, Callable[[Any], Any]] = {
    "energy_counter": lambda h: call(pynvml.nvmlDeviceGetTotalEnergyConsumption, h),
    "instant_power": instant_power_w,
    "memory_v2": lambda h: call(pynvml.nvmlDeviceGetMemoryInfo, h, version=pynvml.nvmlMemory_v2),
    "clock_event_reasons": lambda h: call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h),
}


def capabilities(handle: Any) -> dict[str, str]:
    """Metric -> ``yes`` or ``no: why``, by asking the device (never by its model name)."""
    out = {}
    for name, probe in CAPABILITY_PROBES.items():
        try:
            probe(handle)
            out[name] = "yes"
        except (MetricUnsupported, GPULost) as e:
            out[name] = f"no: {e}"
    return out


@dataclass
class Discovery:
    """NVML's view of the machine; ``reason`` is set when NVML could not be used."""

    gpus: list[GPUInfo]
    driver_version: str | None
    cuda_driver_version: str | None
    reason: str | None

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {
            "gpus": [g.to_dict() for g in self.gpus],
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "reason": self.reason,
        }


def init() -> None:
    """nvmlInit, translated; raises NVMLUnavailable."""
    try:
        call(pynvml.nvmlInit)
    except (MetricUnsupported, GPULost) as e:
        raise NVMLUnavailable(f"NVML init failed: {e}") from None


def discover() -> Discovery:
    """Every GPU NVML sees, sorted by PCI bus id (the order CUDA uses with PCI_BUS_ID)."""
    try:
        init()
        count = call(pynvml.nvmlDeviceGetCount)
        gpus = []
        for i in range(count):
            h = call(pynvml.nvmlDeviceGetHandleByIndex, i)
            mem = _optional(pynvml.nvmlDeviceGetMemoryInfo, h)
            cc = _optional(pynvml.nvmlDeviceGetCudaComputeCapability, h)
            gpus.append(
                GPUInfo(
                    nvml_index=i,
                    name=_text(call(pynvml.nvmlDeviceGetName, h)),
                    uuid=_text(call(pynvml.nvmlDeviceGetUUID, h)),
                    pci_bus_id=normalize_bus_id(_text(call(pynvml.nvmlDeviceGetPciInfo, h).busId)),
                    memory_total_bytes=int(mem.total) if mem is not None else None,
                    compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
                    capabilities=capabilities(h),
                )
            )
        driver = _optional(pynvml.nvmlSystemGetDriverVersion)
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        cuda_s = f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}" if cuda else None
        gpus.sort(key=lambda g: g.pci_bus_id)
        return Discovery(gpus, _text(driver) if driver else None, cuda_s, None)
    except (NVMLUnavailable, GPULost, MetricUnsupported) as e:
        return Discovery([], None, None, str(e))


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
        self.last_t: float | None = None

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
        self.e0 = self._read("energy_counter", lambda: call(pynvml.nvmlDeviceGetTotalEnergyConsumption, self.h))
        self.sample(t)

    def sample(self, t: float) -> None:
        self.last_t = t
        p = self._read("instant_power", lambda: instant_power_w(self.h))
        if p is not None:
            self.power.append((t - self.t0, p))
        else:
            a = self._read("average_power", lambda: call(pynvml.nvmlDeviceGetPowerUsage, self.h) / 1000.0)
            if a is not None:
                self.avg_power.append((t - self.t0, a))
        for metric, store, fn in (
            ("utilization", self.util, lambda: call(pynvml.nvmlDeviceGetUtilizationRates, self.h).gpu),
            ("sm_clock", self.sm, lambda: call(pynvml.nvmlDeviceGetClockInfo, self.h, pynvml.NVML_CLOCK_SM)),
            ("mem_clock", self.mem, lambda: call(pynvml.nvmlDeviceGetClockInfo, self.h, pynvml.NVML_CLOCK_MEM)),
            ("temperature", self.temp, lambda: temperature_c(self.h)),
        ):
            v = self._read(metric, fn)
            if v is not None:
                store.append(float(v))
        m = self._read("clock_event_reasons", lambda: clock_event_reasons(self.h))
        if m is not None:
            self.mask |= m

    def end(self, t: float) -> GPUReading:
        if self.last_t is None or t > self.last_t:
            self.sample(t)
        duration = t - self.t0
        e1 = self._read("energy_counter", lambda: call(pynvml.nvmlDeviceGetTotalEnergyConsumption, self.h))
        limit = self._read("power_limit", lambda: call(pynvml.nvmlDeviceGetEnforcedPowerLimit, self.h) / 1000.0)
        mem = self._read("nvml_memory", lambda: memory_used_bytes(self.h))
        energy, source = None, None
        if self.lost:
            self.reasons["gpu"] = "GPU lost during the window"
        elif self.e0 is not None and e1 is not None:
            energy, source = (float(e1) - float(self.e0)) / 1000.0, "counter"
        elif len(self.power) >= 2:
            energy, source = _trapezoid(self.power), "integrated instant power"
        elif len(self.avg_power) >= 2:
            energy, source = _trapezoid(self.avg_power), "integrated 1s-average power"
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
            throttle_reasons=decode_reasons(self.mask),
            samples=len(self.power) + len(self.avg_power),
            power_trace=_downsample(self.power or self.avg_power, MAX_TRACE_POINTS),
            reasons=dict(self.reasons),
        )


def _trapezoid(points: list[tuple[float, float]]) -> float:
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))


def _downsample(points: list[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    if len(points) <= n:
        return [(round(t, 4), round(p, 3)) for t, p in points]
    step = len(points) / n
    return [(round(points[int(i * step)][0], 4), round(points[int(i * step)][1], 3)) for i in range(n)]


class NvidiaGPUs:
    """The GPUs one case uses, as a window source (begin / sample / end)."""

    def __init__(self, gpus: Sequence[GPUInfo]):
        self.gpus = list(gpus)
        self.handles = [call(pynvml.nvmlDeviceGetHandleByUUID, g.uuid) for g in self.gpus]
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


def open_gpus(tf_positions: Sequence[int], env: Mapping[str, str] | None = None) -> NvidiaGPUs | EmptyGPUs:
    """Telemetry for the GPUs TensorFlow numbers ``tf_positions`` (CUDA order); never raises.

    An empty ``tf_positions`` (a CPU case) gives EmptyGPUs with "case uses no GPU".
    """
    if not tf_positions:
        return EmptyGPUs("case uses no GPU")
    found = discover()
    if found.reason:
        return EmptyGPUs(found.reason)
    visible = visible_gpus(found.gpus, env)
    if isinstance(visible, str):
        return EmptyGPUs(visible)
    if max(tf_positions) >= len(visible):
        return EmptyGPUs(f"TensorFlow GPU {max(tf_positions)} has no NVML match ({len(visible)} visible)")
    try:
        return NvidiaGPUs([visible[i] for i in tf_positions])
    except (NVMLUnavailable, MetricUnsupported, GPULost) as e:
        return EmptyGPUs(str(e))


def idle_power_w(
    gpus: Sequence[GPUInfo],
    seconds: float = 1.0,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> dict[str, float | None]:
    """Idle power per GPU uuid, measured over ``seconds`` before any case runs."""
    import time

    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    try:
        src = NvidiaGPUs(gpus)
    except (NVMLUnavailable, MetricUnsupported, GPULost):
        return {g.uuid: None for g in gpus}
    t0 = clock()
    src.begin(t0)
    n = max(2, int(seconds / 0.1))
    for _ in range(n):
        sleep(seconds / n)
        src.sample(clock())
    readings = src.end(clock())
    return {r.uuid: r.power_mean_w for r in readings}
