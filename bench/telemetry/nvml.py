"""The NVML boundary: the ``pynvml`` module (package ``nvidia-ml-py``), resolved defensively.

Every NVML function and constant is looked up by name at the time of use. A binding that lacks
one (nvidia-ml-py < 12.570 has no ``nvmlDeviceGetTemperatureV``; the deprecated ``pynvml`` 11.x
package lacks more) makes that one metric unsupported, with the reason, never an
AttributeError. NVML errors are translated once, here, into the three kinds the rest of the
code branches on: the library is unusable (:class:`NVMLUnavailable`), one metric is not
offered (:class:`MetricUnsupported`), the GPU has gone (:class:`GPULost`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

PIN = "nvidia-ml-py>=12.570"
# Names the code needs that a current binding has; an older or shadowing binding may lack them.
NEWER_NAMES = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons", "NVML_FI_DEV_POWER_INSTANT")


class NVMLUnavailable(Exception):
    """NVML cannot be used at all (no library, no driver)."""


class MetricUnsupported(Exception):
    """One metric is not offered by this GPU, driver or binding."""


class GPULost(Exception):
    """The GPU stopped answering."""


def binding_version() -> str:
    """The installed binding's version, or ``unknown``."""
    for name in ("nvidia-ml-py", "pynvml"):
        try:
            from importlib.metadata import version

            return f"{name} {version(name)}"
        except Exception:  # not installed under that name
            continue
    return "unknown"


def binding_problem() -> str | None:
    """Why the ``pynvml`` module is not the one accelbench needs, with the fix; None if fine.

    The deprecated ``pynvml`` package (11.x) installs a ``pynvml/`` package, which on the same
    path entry shadows the ``pynvml.py`` module of nvidia-ml-py.
    """
    path = str(getattr(pynvml, "__file__", "") or "").replace("\\", "/")
    missing = [n for n in NEWER_NAMES if getattr(pynvml, n, None) is None]
    if path.endswith("pynvml/__init__.py"):
        return (
            f"the deprecated 'pynvml' package ({path}) shadows nvidia-ml-py"
            + (f" and lacks {', '.join(missing)}" if missing else "")
            + f"; fix: pip uninstall -y pynvml && pip install -U '{PIN}'"
        )
    if missing:
        return f"this NVML binding lacks {', '.join(missing)}; fix: pip install -U '{PIN}'"
    return None


def const(name: str) -> Any:
    """An NVML constant, or MetricUnsupported when the binding does not define it."""
    v = getattr(pynvml, name, None)
    if v is None:
        raise MetricUnsupported(f"{name} not in this nvidia-ml-py ({PIN} has it)")
    return v


def _code(name: str) -> Any:
    return getattr(pynvml, name, object())  # an absent code matches nothing


def _translate(e: Exception) -> Exception:
    code = getattr(e, "value", None)
    if code == _code("NVML_ERROR_LIBRARY_NOT_FOUND"):
        return NVMLUnavailable("NVML library not found")
    if code == _code("NVML_ERROR_DRIVER_NOT_LOADED"):
        return NVMLUnavailable("NVIDIA driver not loaded")
    if code == _code("NVML_ERROR_UNINITIALIZED"):
        return NVMLUnavailable("NVML not initialised")
    if code == _code("NVML_ERROR_GPU_IS_LOST"):
        return GPULost("GPU is lost")
    if code == _code("NVML_ERROR_FUNCTION_NOT_FOUND"):
        return MetricUnsupported("not in this driver's NVML (function not found)")
    if code == _code("NVML_ERROR_NOT_SUPPORTED"):
        return MetricUnsupported("not supported by this GPU")
    if code == _code("NVML_ERROR_NO_PERMISSION"):
        return MetricUnsupported("permission denied")
    return MetricUnsupported(f"NVML error: {e}")


def call(name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the NVML function ``name``, translating its errors and its absence from the binding."""
    fn = getattr(pynvml, name, None)
    if fn is None:
        raise MetricUnsupported(f"{name} not in this nvidia-ml-py ({PIN} has it)")
    try:
        return fn(*args, **kwargs)
    except pynvml.NVMLError as e:
        raise _translate(e) from None


def optional(name: str, *args: Any) -> Any:
    """:func:`call`, with None where the metric is not offered."""
    try:
        return call(name, *args)
    except MetricUnsupported:
        return None


def text(v: Any) -> str:
    """NVML strings may come as bytes from older bindings."""
    return v.decode() if isinstance(v, bytes) else str(v)


def instant_power_w(handle: Any) -> float:
    """Instant power (field NVML_FI_DEV_POWER_INSTANT), checking the field's own return code."""
    values = call("nvmlDeviceGetFieldValues", handle, [const("NVML_FI_DEV_POWER_INSTANT")])
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
        return int(call("nvmlDeviceGetMemoryInfo", handle, version=const("nvmlMemory_v2")).used), "v2"
    except MetricUnsupported:
        return int(call("nvmlDeviceGetMemoryInfo", handle).used), "v1"


def clock_event_reasons(handle: Any) -> int:
    """Clock-event (throttle) reason bitmask; the deprecated ThrottleReasons call as fallback."""
    try:
        return int(call("nvmlDeviceGetCurrentClocksEventReasons", handle))
    except MetricUnsupported:
        return int(call("nvmlDeviceGetCurrentClocksThrottleReasons", handle))


def temperature_c(handle: Any) -> float:
    """GPU temperature; the deprecated call where nvmlDeviceGetTemperatureV is missing."""
    sensor = getattr(pynvml, "NVML_TEMPERATURE_GPU", 0)
    try:
        return float(call("nvmlDeviceGetTemperatureV", handle, sensor))
    except MetricUnsupported:
        return float(call("nvmlDeviceGetTemperature", handle, sensor))


def pstate(handle: Any) -> str:
    """Performance state, ``P0`` (fastest) ... ``P15``; ``P8`` and above are idle states."""
    return f"P{int(call('nvmlDeviceGetPerformanceState', handle))}"


def mig_enabled(handle: Any) -> bool:
    """True when MIG mode is on (NVML's handle is then the parent of several instances)."""
    try:
        current = call("nvmlDeviceGetMigMode", handle)[0]
    except MetricUnsupported:  # no MIG on this GPU, driver or binding
        return False
    return int(current) == int(getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1))


# Clock-event bits (nvml.h). Only some mean the clocks were held down by a limit.
THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
INFO_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x10: "sync_boost",
    0x100: "display_clock_setting",
}


def decode_reasons(mask: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Bitmask -> (throttling names, informational names), in bit order; unknown bits as ``0x...`` info."""
    throttle = tuple(n for bit, n in sorted(THROTTLE_BITS.items()) if mask & bit)
    info = [n for bit, n in sorted(INFO_BITS.items()) if mask & bit]
    unknown = mask & ~(sum(THROTTLE_BITS) | sum(INFO_BITS))
    if unknown:
        info.append(hex(unknown))
    return throttle, tuple(info)


CAPABILITY_PROBES: dict[str, Callable[[Any], Any]] = {
    "energy_counter": lambda h: call("nvmlDeviceGetTotalEnergyConsumption", h),
    "instant_power": instant_power_w,
    "memory_v2": lambda h: call("nvmlDeviceGetMemoryInfo", h, version=const("nvmlMemory_v2")),
    "clock_event_reasons": clock_event_reasons,
    "pstate": pstate,
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
