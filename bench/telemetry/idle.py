"""Idle power of the GPUs, once per run before any case: settle to an idle P-state, then >= 5 s."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.telemetry import nvml
from bench.telemetry.gpus import GPUInfo, NvidiaGPUs
from bench.telemetry.nvml import GPULost, MetricUnsupported, NVMLUnavailable


@dataclass(frozen=True)
class Idle:
    """Idle power of one GPU: what the run subtracts, and how it was measured.

    ``power_w`` is the counter mean where the energy counter works (else the instant-power
    mean); both means are kept, with the P-state before and after and the settle wait.
    """

    power_w: float | None
    counter_w: float | None
    instant_w: float | None
    pstate_before: str | None
    pstate_after: str | None
    settle_s: float
    seconds: float

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {
            "power_w": self.power_w,
            "counter_w": self.counter_w,
            "instant_w": self.instant_w,
            "pstate_before": self.pstate_before,
            "pstate_after": self.pstate_after,
            "settle_s": self.settle_s,
            "seconds": self.seconds,
        }


IDLE_PSTATE = 8  # P8 and above: the idle states
MIN_IDLE_S = 5.0  # the shortest idle window: the energy counter's 10-100 ms steps stay <= 2% of it


def _settle(src: NvidiaGPUs, max_s: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> float:
    """Wait until every GPU reports an idle P-state (>= P8), at most ``max_s``; the time waited."""
    t0 = clock()
    while clock() - t0 < max_s:
        states = [nvml.optional("nvmlDeviceGetPerformanceState", h) for h in src.handles]
        if all(s is not None and int(s) >= IDLE_PSTATE for s in states):
            break
        if all(s is None for s in states):  # no P-state to watch: a fixed short wait
            sleep(min(2.0, max_s))
            break
        sleep(0.5)
    return clock() - t0


def idle_power(
    gpus: Sequence[GPUInfo],
    seconds: float = 5.0,
    settle_max_s: float = 10.0,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> dict[str, Idle]:
    """Idle power per GPU uuid, before any case runs, over ``seconds`` (>= 5 s) after a settle wait.

    The energy counter moves in steps of 10-100 ms, so a 1 s window can be off by up to 10%;
    over 5 s the step error is <= 2%. Idle here means no process of ours holds a CUDA context:
    a GPU inside a case sits at a higher floor, so energy above idle is an upper bound.
    """
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    seconds = max(MIN_IDLE_S, seconds)
    try:
        src = NvidiaGPUs(gpus)
    except (NVMLUnavailable, MetricUnsupported, GPULost):
        return {g.uuid: Idle(None, None, None, None, None, 0.0, 0.0) for g in gpus}
    settled = _settle(src, settle_max_s, clock, sleep)
    before = [nvml.optional("nvmlDeviceGetPerformanceState", h) for h in src.handles]
    t0 = clock()
    src.begin(t0)
    n = max(2, int(seconds / 0.1))
    for _ in range(n):
        sleep(seconds / n)
        src.sample(clock())
    readings = src.end(clock())
    out = {}
    for r, b in zip(readings, before):
        counter = r.power_mean_w if r.energy_source == "counter" else None
        instant = statistics.fmean(p for _, p in r.power_trace) if r.power_trace else None
        out[r.uuid] = Idle(
            power_w=counter if counter is not None else instant,
            counter_w=counter,
            instant_w=instant,
            pstate_before=None if b is None else f"P{int(b)}",
            pstate_after=r.pstate,
            settle_s=settled,
            seconds=r.duration_s,
        )
    return out
