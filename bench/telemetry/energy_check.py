"""Whether a GPU's energy counter agrees with its integrated instant power (pure numbers)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.telemetry.base import GPUReading, Measurement

AGREEMENT = 0.2  # counter vs integrated instant power may differ by this fraction
# NVML's energy counter moves in steps of ~100 ms (measured on an H200: step_ms_median 99.99); over a
# window of fewer than ten steps one step is more than 10% of the energy: too coarse to print
COUNTER_STEP_S = 0.1
MIN_COUNTER_WINDOW_S = 10 * COUNTER_STEP_S
SHORT_WINDOW_SOURCE = "integrated instant power (window too short for the counter)"


def trapezoid(points: Sequence[Sequence[float]]) -> float:
    """Integral of (seconds, watts) points, joules."""
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))


def window_energy(
    counter_j: float | None, instant: Sequence[Sequence[float]], duration_s: float
) -> tuple[float | None, str | None, str | None]:
    """(joules, source, why none) of one GPU over one window.

    The counter where the window spans at least ``MIN_COUNTER_WINDOW_S``; in a shorter one the
    integral of the instant-power samples (at least two), else none with the reason.
    """
    if counter_j is not None and duration_s >= MIN_COUNTER_WINDOW_S:
        return counter_j, "counter", None
    if len(instant) >= 2:
        source = SHORT_WINDOW_SOURCE if counter_j is not None else "integrated instant power"
        return trapezoid(instant), source, None
    if counter_j is not None:
        return None, None, f"window too short for the counter ({duration_s:.2f} s < {MIN_COUNTER_WINDOW_S:.0f} s)"
    return None, None, None


@dataclass(frozen=True)
class Agreement:
    """Counter energy against integrated instant power over the same window, summed over GPUs."""

    counter_j: float | None
    integrated_j: float | None
    duration_s: float
    samples: int
    detail: str

    @property
    def difference(self) -> float | None:
        """(integrated - counter) / counter; None unless both were measured."""
        if not self.counter_j or self.integrated_j is None:
            return None
        return (self.integrated_j - self.counter_j) / self.counter_j

    def ok(self, tolerance: float) -> bool:
        """Both measured and within ``tolerance`` (a fraction) of each other."""
        d = self.difference
        return d is not None and abs(d) <= tolerance

    def describe(self) -> str:
        """One line for the check's table."""
        if self.counter_j is None or self.integrated_j is None:
            return f"cannot compare: {self.detail}"
        return (
            f"counter {self.counter_j:.1f} J vs integrated instant power {self.integrated_j:.1f} J "
            f"({(self.difference or 0) * 100:+.1f}%) over {self.duration_s:.1f} s, {self.samples} samples; {self.detail}; "
            "one sensor read two ways: this checks consistency, not accuracy"
        )


def agreement(readings: Sequence[GPUReading]) -> Agreement:
    """Compare the counter delta with the trapezoid of the instant-power trace, per window."""
    if not readings:
        return Agreement(None, None, 0.0, 0, "no GPU reading")
    counter = [r.energy_j if r.energy_source == "counter" else None for r in readings]
    integrated = [trapezoid(r.power_trace) if len(r.power_trace) >= 2 else None for r in readings]
    why = sorted({f"{k}: {v}" for r in readings for k, v in r.reasons.items()})
    states = ",".join(sorted({r.pstate for r in readings if r.pstate})) or "P-state unknown"
    throttle = ",".join(sorted({t for r in readings for t in r.throttle_reasons})) or "none"
    detail = f"{states}, throttling: {throttle}" + (f"; {'; '.join(why)}" if why else "")
    return Agreement(
        counter_j=None if None in counter else sum(c for c in counter if c is not None),
        integrated_j=None if None in integrated else sum(i for i in integrated if i is not None),
        duration_s=max(r.duration_s for r in readings),
        samples=min(r.samples for r in readings),
        detail=detail,
    )


def load_env(uuid: str) -> dict[str, str]:
    """The load child's environment: it sees only the GPU the window samples (named by UUID, bus order)."""
    return {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": uuid}


def sampled_window(
    source: Any,
    seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    host: Any = None,
) -> Measurement:
    """One window of ``seconds`` over ``source`` (NvidiaGPUs), sampled at 10 Hz (NVML's update rate) from here.

    ``host``: the host source (default :class:`HostMonitor`, which needs psutil; a GPU box with
    only nvidia-ml-py passes a stand-in).
    """
    from bench.telemetry.host import HostMonitor
    from bench.telemetry.window import Window

    w = Window(source, host if host is not None else HostMonitor(), clock=clock, threaded=False)
    w.begin()
    for _ in range(round(seconds / 0.1)):
        sleep(0.1)
        w.sample_now()
    return w.end()
