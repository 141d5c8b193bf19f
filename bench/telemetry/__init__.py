"""Telemetry: power, energy, memory, utilisation and throttling, device-neutral.

``open_gpus`` is the factory: NVML-backed GPUs where NVML works, else an empty stand-in that
records why. ``Window`` measures one window (begin/end around the timed rounds) with a
background sampler.
"""

from bench.telemetry.base import GPUReading, HostReading, Measurement
from bench.telemetry.derive import derive
from bench.telemetry.gpus import EmptyGPUs, NvidiaGPUs, open_gpus, open_gpus_by_bus_id
from bench.telemetry.host import HostMonitor
from bench.telemetry.window import Window

__all__ = [
    "EmptyGPUs",
    "GPUReading",
    "HostMonitor",
    "HostReading",
    "Measurement",
    "NvidiaGPUs",
    "Window",
    "derive",
    "open_gpus",
    "open_gpus_by_bus_id",
]
