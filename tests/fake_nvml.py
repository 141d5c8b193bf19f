"""A fake NVML at the hardware boundary: only the calls accelbench makes, on a scripted timeline.

It uses pynvml's real error classes, constants and ctypes structs, and a fake clock, so expected
joules and watts are exact. Power per GPU is piecewise constant: ``idle_w`` before ``load_at``
seconds, ``load_w`` after; the energy counter is the integral (mJ), exact, or quantised to
``quantum_ms`` steps as real counters are (they move every 10-100 ms).

``binding=`` makes the module look like a real older binding: the names that binding lacks are
absent (AttributeError, as on the real module), not FunctionNotFound. ``MISSING`` lists them
(nvidia-ml-py 12.535.77 / 12.560.30 and the deprecated pynvml 11.5.0 wheels, read by hand).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import pynvml


class Clock:
    """Fake monotonic clock (seconds)."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@dataclass
class FakeGPU:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:3B:00.0"
    cc: tuple[int, int] = (9, 0)
    memory_total: int = 80 * 2**30
    memory_used: int = 2 * 2**30
    reserved: int = 512 * 2**20  # v1 "used" includes it
    idle_w: float = 70.0
    load_w: float = 500.0
    load_at: float = 0.0
    energy0_mj: float = 1_000_000.0
    util: int = 97
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    temp_c: int = 61
    limit_mw: int = 700_000
    reasons: int = 0x4  # sw_power_cap
    unsupported: set[str] = field(
        default_factory=set
    )  # energy, instant, memory_v2, clock_events, temperature_v, power_usage
    lost_at: float | None = None
    quantum_ms: float = 0.0  # energy counter step (0 = exact)
    mig: bool = False
    no_permission: bool = False  # nvmlDeviceGetHandleByIndex refuses this GPU
    pstate_idle: int = 8
    compute_pids: list[int] = field(default_factory=list)  # processes with a CUDA context on this GPU
    mps_pids: list[int] = field(default_factory=list)  # MPS clients (their contexts live in the MPS server)
    pstate_load: int = 0
    compute_mode: int = 0  # NVML_COMPUTEMODE_DEFAULT
    max_sm_mhz: int = 1980
    default_limit_mw: int = 700_000
    pcie_gen: int = 5  # the fastest this GPU in this slot can do
    pcie_width: int = 16
    gpu_pcie_gen: int = 5  # the GPU's own fastest

    def power(self, t: float) -> float:
        return self.load_w if t >= self.load_at else self.idle_w

    def energy_mj(self, t: float) -> float:
        if self.quantum_ms:
            q = self.quantum_ms / 1000.0
            t = (t // q) * q
        if t <= self.load_at:
            return self.energy0_mj + self.idle_w * t * 1000
        return self.energy0_mj + (self.idle_w * self.load_at + self.load_w * (t - self.load_at)) * 1000


MISSING = {
    "12.535": {"nvmlDeviceGetTemperatureV"},
    "12.560": {"nvmlDeviceGetTemperatureV"},
    "pynvml-11.5": {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons", "NVML_FI_DEV_POWER_INSTANT"},
}


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNVML(types.SimpleNamespace):
    """Drop-in for the ``pynvml`` module as ``bench.telemetry.gpus`` uses it."""

    def __init__(self, gpus: list[FakeGPU], clock: Clock, init_error: int | None = None, binding: str | None = None):
        super().__init__()
        self.__dict__["_missing"] = MISSING[binding] if binding else set()
        for name in dir(pynvml):
            if name.startswith(("NVML_", "nvmlMemory_v", "NVMLError", "c_nvml")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus, self.clock, self.init_error = gpus, clock, init_error
        self.calls: list[str] = []
        self.__file__ = "/site-packages/pynvml/__init__.py" if binding == "pynvml-11.5" else "/site-packages/pynvml.py"

    def __getattribute__(self, name):
        if name in object.__getattribute__(self, "__dict__").get("_missing", ()):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return super().__getattribute__(name)

    # -- helpers
    def _gpu(self, h: FakeGPU, feature: str | None = None) -> FakeGPU:
        if h.lost_at is not None and self.clock() >= h.lost_at:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if feature and feature in h.unsupported:
            code = (
                pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
                if feature in ("memory_v2", "clock_events", "temperature_v")
                else pynvml.NVML_ERROR_NOT_SUPPORTED
            )
            raise _err(code)
        return h

    # -- library
    def nvmlInit(self):
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise _err(self.init_error)

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        if self.gpus[i].no_permission:
            raise _err(pynvml.NVML_ERROR_NO_PERMISSION)
        return self.gpus[i]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for g in self.gpus:
            if g.uuid == uuid:
                return g
        raise _err(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlSystemGetDriverVersion(self):
        return "560.35.03"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 12060

    # -- identity
    def nvmlDeviceGetName(self, h):
        return self._gpu(h).name

    def nvmlDeviceGetUUID(self, h):
        return self._gpu(h).uuid

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=self._gpu(h).bus_id.encode())

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._gpu(h).cc

    # -- metrics
    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        g = self._gpu(h, "memory_v2" if version == pynvml.nvmlMemory_v2 else None)
        used = g.memory_used if version == pynvml.nvmlMemory_v2 else g.memory_used + g.reserved
        return types.SimpleNamespace(total=g.memory_total, used=used, free=g.memory_total - used)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        g = self._gpu(h, "energy")
        return int(round(g.energy_mj(self.clock())))

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        g = self._gpu(h)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, fid in enumerate(field_ids):
            values[i].fieldId = fid
            if fid == pynvml.NVML_FI_DEV_POWER_INSTANT and "instant" not in g.unsupported:
                values[i].nvmlReturn = pynvml.NVML_SUCCESS
                values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                values[i].value.uiVal = int(round(g.power(self.clock()) * 1000))
            else:
                values[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values  # the call succeeds when any field could be asked for; each field has its own code

    def nvmlDeviceGetPowerUsage(self, h):
        g = self._gpu(h, "power_usage")
        t = self.clock()
        # a 1-second average (Ampere and newer): mean power over [t-1, t]
        lo = max(0.0, t - 1.0)
        return int(round((g.energy_mj(t) - g.energy_mj(lo)) / max(t - lo, 1e-9)))

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=self._gpu(h).util, memory=40)

    def nvmlDeviceGetClockInfo(self, h, kind):
        g = self._gpu(h)
        return g.sm_mhz if kind == pynvml.NVML_CLOCK_SM else g.mem_mhz

    def nvmlDeviceGetTemperatureV(self, h, sensor):
        return self._gpu(h, "temperature_v").temp_c

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._gpu(h).temp_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._gpu(h, "clock_events").reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        self.calls.append("ThrottleReasons")
        return self._gpu(h).reasons

    def nvmlDeviceGetPerformanceState(self, h):
        g = self._gpu(h)
        return g.pstate_load if g.power(self.clock()) == g.load_w and g.load_w != g.idle_w else g.pstate_idle

    def nvmlDeviceGetComputeMode(self, h):
        return self._gpu(h, "compute_mode").compute_mode

    def nvmlDeviceGetMigMode(self, h):
        g = self._gpu(h)
        return [int(g.mig), int(g.mig)]

    def _processes(self, pids, used):
        out = []
        for pid in pids:
            info = pynvml.c_nvmlProcessInfo_v3_t()
            info.pid, info.usedGpuMemory = pid, used
            out.append(info)
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return self._processes(self._gpu(h, "processes").compute_pids, 2**30)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h):
        return self._processes(self._gpu(h, "processes").mps_pids, 2**29)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._gpu(h).limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._gpu(h).default_limit_mw

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        g = self._gpu(h)
        return g.max_sm_mhz if kind == pynvml.NVML_CLOCK_SM else g.mem_mhz

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._gpu(h, "pcie").pcie_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._gpu(h, "pcie").pcie_width

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return self._gpu(h, "pcie").gpu_pcie_gen
