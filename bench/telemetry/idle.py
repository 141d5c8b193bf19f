"""Idle power of the GPUs, once per run before any case: settle (an idle P-state, or a steady power), then >= 5 s."""

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
    mean); both means are kept, with the P-state before and after, the settle wait and what
    ended it (``settled_by``: an idle P-state, a steady power, or the time limit).
    """

    power_w: float | None
    counter_w: float | None
    instant_w: float | None
    pstate_before: str | None
    pstate_after: str | None
    settle_s: float
    seconds: float
    settled_by: str = ""

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
            "settled_by": self.settled_by,
        }


IDLE_PSTATE = 8  # P8 and above: the idle states of parts that have them
MIN_IDLE_S = 5.0  # the shortest idle window: the energy counter's 10-100 ms steps stay <= 2% of it
STEADY = 0.02  # two consecutive 1 s power means this close: the power has stopped falling
STEADY_WINDOW_S = 1.0
MIN_SETTLE_S = 3.0  # a steady power counts only after this: parts with idle P-states reach them by then


def _pstates(src: NvidiaGPUs) -> list:
    return [nvml.optional("nvmlDeviceGetPerformanceState", h) for h in src.handles]


def _power_means(
    src: NvidiaGPUs, seconds: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> list[float | None]:
    """Each GPU's mean power over ``seconds``: of 5 power readings, else from the energy counter.

    Readings first: the counter moves in 10-100 ms steps, up to 10% of a 1 s window, which would
    hide a steady power behind a 2% rule; a power reading's noise at idle is about 1 W.
    """
    t0 = clock()
    e0 = [nvml.optional("nvmlDeviceGetTotalEnergyConsumption", h) for h in src.handles]
    inst: list[list[float]] = [[] for _ in src.handles]
    for _ in range(5):
        sleep(seconds / 5)
        for i, h in enumerate(src.handles):
            if (mw := nvml.optional("nvmlDeviceGetPowerUsage", h)) is not None:
                inst[i].append(mw / 1000.0)
    e1 = [nvml.optional("nvmlDeviceGetTotalEnergyConsumption", h) for h in src.handles]
    dt = max(clock() - t0, 1e-9)
    return [
        statistics.fmean(p) if p else ((b - a) / 1000.0 / dt if a is not None and b is not None else None)
        for a, b, p in zip(e0, e1, inst)
    ]


def _settle(
    src: NvidiaGPUs, max_s: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> tuple[float, str]:
    """Wait, at most ``max_s``, until every GPU is idle; the time waited and what ended the wait.

    Idle is an idle P-state (>= P8) where the part has one, or else a steady power: two
    consecutive 1 s means within 2% on every GPU, after at least 3 s. Data-centre parts (V100:
    P0 only; A100 and H100 often) never leave P0 when idle, so waiting for P8 cost them the whole
    limit and read as "not settled" (gpu-review-2 finding 10). A power still falling after the
    last work is not steady, so the window starts after the decay; the first 3 s leave a part that
    holds its clocks for a moment before dropping to P8 the time to do so. Neither rule can tell
    idle from another process's steady load: ``pstate_before``/``after`` are kept to read.
    """
    t0 = clock()
    prev: list[float | None] | None = None
    while clock() - t0 < max_s:
        states = _pstates(src)
        if all(s is not None and int(s) >= IDLE_PSTATE for s in states):
            return clock() - t0, f"idle P-state (P{min(int(s) for s in states)})"
        now = _power_means(src, min(STEADY_WINDOW_S, max(max_s - (clock() - t0), 0.1)), clock, sleep)
        if all(w is None for w in now):  # no power to watch: a fixed short wait
            sleep(min(2.0, max_s))
            return clock() - t0, "no power reading: a fixed 2 s wait"
        if (
            prev is not None
            and clock() - t0 >= MIN_SETTLE_S
            and all(a is not None and b is not None and abs(a - b) <= STEADY * max(a, b) for a, b in zip(now, prev))
        ):
            return clock() - t0, f"steady power (two 1 s means within {STEADY:.0%})"
        prev = now
    return clock() - t0, f"time limit ({max_s:g} s): the power was still changing"


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
        return {g.uuid: Idle(None, None, None, None, None, 0.0, 0.0, "NVML unavailable") for g in gpus}
    settled, settled_by = _settle(src, settle_max_s, clock, sleep)
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
            settled_by=settled_by,
        )
    return out


def run_idle_power(run: dict, any_gpu: bool) -> dict:
    """Idle power per GPU uuid (W), once per run before any worker starts, into the run block; never raises."""
    if not any_gpu:
        return {}
    from bench.telemetry import gpus as nvml

    try:
        found = nvml.discover()
        if found.reason:
            run["idle_power_reason"] = found.reason
            return {}
        idle = idle_power(found.gpus)
    except Exception as e:  # telemetry must never cost the run
        run["idle_power_reason"] = f"{type(e).__name__}: {e}"
        return {}
    run["idle_power"] = {u: i.to_dict() for u, i in idle.items()}
    run["idle_power_w"] = {u: i.power_w for u, i in idle.items()}
    return run["idle_power_w"]
