"""The backend-neutral measuring loop: rounds of K steps closed by one sync, latencies, summaries.

Rules from ``shared/design/measurement.md``: a round is K steps closed by one device sync (never
a sync per step inside the timed block); throughput is global samples of a round over its wall
time. ``sync`` is the backend's (TensorFlow's device sync, or blocking on JAX's state).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench import stats
from bench.cases import Case
from bench.profiles import Timing
from bench.stopping import Schedule


class PlacementError(RuntimeError):
    """Variables or compute are not on the devices the case asked for."""


class NumericsError(RuntimeError):
    """The loss was not finite after the timed rounds."""


@dataclass
class Probe:
    """Reachable matmul FLOP/s of one device at one precision."""

    tflops: float
    n: int
    dtype: str


PROBE_REPS = 4  # matmuls per chain in the matmul probe
COPY_BYTES = 256 * 2**20  # the copy probe's array: far beyond any last-level cache (the H200's L2: 50 MB)
COPY_REPS = 4  # y = x + 1 passes per chain in the copy probe


@dataclass(frozen=True)
class CopyProbe:
    """Reachable memory bandwidth of one device: each pass of y = x + 1 over ``n_bytes`` reads and writes them."""

    gbps: float  # best (read + write) bytes per second over 1e9, STREAM's convention
    n_bytes: int


BUDGET_SLACK = 1.1  # the rounds may outlast the case budget by this factor (K rounds up)


def best_matmul_rate(run_chain: Callable[[], Any], n: int, budget_s: float) -> float:
    """Best FLOP/s of ``run_chain``: at least 3 timed runs, then up to ``budget_s`` and 50 runs.

    ``run_chain`` runs a compiled, warmed-up chain of PROBE_REPS n x n matmuls and returns only
    once it has finished on the device.
    """
    return _best_rate(run_chain, 2.0 * n**3 * PROBE_REPS, budget_s)


def best_copy_rate(run_chain: Callable[[], Any], n_bytes: int, budget_s: float) -> float:
    """Best bytes/s of ``run_chain``, a warmed-up chain of COPY_REPS passes of y = x + 1 over ``n_bytes``.

    Each pass reads and writes the array: 2 x n_bytes moved (STREAM's counting, as its Scale and Add
    kernels count). At least 3 timed runs, then up to ``budget_s`` and 50 runs.
    """
    return _best_rate(run_chain, 2.0 * n_bytes * COPY_REPS, budget_s)


def _best_rate(run_chain: Callable[[], Any], work: float, budget_s: float) -> float:
    best, spent, rounds = 0.0, 0.0, 0
    while rounds < 3 or (spent < budget_s and rounds < 50):
        t0 = time.perf_counter()
        run_chain()
        dt = time.perf_counter() - t0
        spent += dt
        rounds += 1
        best = max(best, work / dt)
    return best


def plan_rounds(step_s: float, timing: Timing) -> tuple[int, Schedule]:
    """(steps per round K, the looks the case budget reaches) for a step of ``step_s`` seconds.

    The round length is fixed here, once: ``timing.round_s`` (the budget over the cap, at least
    the profile's shortest round). A step so slow that the cap's rounds outlast the budget keeps
    the looks the budget reaches, and at least the first (fewer looks keep the miss bound).
    """
    k = max(1, math.ceil(timing.round_s / max(step_s, 1e-9)))
    # K rounds up, so K steps last a little longer than round_s: a tenth over the budget still
    # reaches the cap (else a fast step would always lose its last look to the rounding)
    r = int(BUDGET_SLACK * timing.case_budget_s / (k * max(step_s, 1e-9)))
    return k, timing.schedule.within(r)


def warm_up(step: Callable[[], Any], sync: Callable[[], Any], steps: int, bound_s: float) -> tuple[int, float]:
    """Up to ``steps`` warm-up steps, ending once they have lasted ``bound_s`` (at least one): (how many, the last's s).

    Each is synced (untimed), so the bound sees the device's time, not the enqueue's. The last
    step's seconds let a step that outlasts a round skip calibration (``Solo.calibrate``).
    """
    n, t0, last = 0, time.perf_counter(), 0.0
    while n < steps and (n == 0 or time.perf_counter() - t0 < bound_s):
        t1 = time.perf_counter()
        step()
        sync()
        last = time.perf_counter() - t1
        n += 1
    return n, last


class StopRounds(Exception):
    """Raised after a round (outside its timing) when the stopping rule says the rounds are enough."""


def timed_rounds(
    step: Callable[[], Any],
    sync: Callable[[], Any],
    steps_per_round: int,
    rounds: int,
    pedantic: Callable[..., Any],
    setup: Callable[[], None] | None = None,
    barrier: Callable[[], None] | None = None,
    enough: Callable[[], bool] | None = None,
) -> Any:
    """Run up to ``rounds`` rounds of ``steps_per_round`` steps, one sync per round, via ``pedantic``.

    ``setup`` runs before each round, outside the timed part (a progress heartbeat).
    ``barrier`` closes each round inside the timed part (a cluster's inference rounds have no
    collective of their own, so rank 0's round time would not cover the other workers).
    ``enough`` runs after each round, outside the timed part (pytest-benchmark's teardown, after
    the round is in its statistics): True ends the rounds there (the stopping rule's look).
    """
    last: list[Any] = [None]

    def one_round() -> None:
        out = None
        for _ in range(steps_per_round):
            out = step()
        sync()
        if barrier is not None:
            barrier()
        last[0] = out

    def after_round() -> None:
        if enough is not None and enough():
            raise StopRounds

    try:
        pedantic(one_round, setup=setup, teardown=after_round, rounds=rounds, iterations=1, warmup_rounds=0)
    except StopRounds:
        pass
    return last[0]


MIN_LATENCY_SAMPLES = 10  # the fewest that resolve a p90 (stats.samples_to_resolve)


def latencies(
    step: Callable[[], Any], sync: Callable[[], Any], n: int, budget_s: float, have: Sequence[float] = ()
) -> list[float]:
    """Per-batch latency: ``n`` individually synced steps (outside the throughput rounds), counting ``have``.

    ``have``: latencies already measured, the timed rounds where each was one step closed by its
    sync (the same measurement). Steps are added until there are ``n``, or until they have taken
    ``budget_s`` once there are :data:`MIN_LATENCY_SAMPLES`: a 3 s step is not timed 10 more times
    after its rounds gave 6.
    """
    out: list[float] = list(have)
    spent = 0.0
    while len(out) < n and (spent < budget_s or len(out) < MIN_LATENCY_SAMPLES):
        t0 = time.perf_counter()
        step()
        sync()
        dt = time.perf_counter() - t0
        out.append(dt)
        spent += dt
    return out


def summarize(case: Case, round_times: Sequence[float], k: int, rank: int | None = None) -> dict:
    """Throughput and step-time figures of the timed rounds (names as in the CSV).

    ``rank``: the stopping look's rank, whose interval is the CI (else the fixed-n 95% ranks).
    """
    t = stats.throughput(round_times, case.global_batch * k, k, rank=rank)
    return {
        "samples_per_s": t.median,
        "samples_per_s_ci_low": t.ci_low,
        "samples_per_s_ci_high": t.ci_high,
        "step_time_median_s": t.median_step_s,
        "step_time_min_s": t.min_step_s,
        "step_time_p50_s": t.p50_step_s,
        "step_time_p90_s": t.p90_step_s,
        "step_time_p99_s": t.p99_step_s,
        "step_time_cv": t.cv,
        "unstable": t.unstable,
        "rounds": len(round_times),
        "steps_per_round": k,
    }


@dataclass(frozen=True)
class Timed:
    """The timed rounds of one case: K steps per round, round times, the last output, telemetry.

    ``stamps``: a tenant's rounds as (start, end) on the system-wide monotonic clock, so the
    parent can lay the tenants' rounds side by side (empty for a case run alone).
    """

    k: int
    rounds: int
    round_times_s: tuple[float, ...]
    last: Any
    window: Any  # the telemetry window's measurement
    stamps: tuple[tuple[float, float], ...] = ()


TENANT_READY = "tenant: ready at the start barrier"  # the heartbeat the parent counts before it starts all
START_POLL_S = 0.005  # how often a tenant at the start barrier looks for the parent's signal


def wait_for_start(go: str, heartbeat: Callable[[str], None], every_s: float = 1.0) -> None:
    """A tenant waits at the start barrier until the parent creates ``go`` (heartbeating, so it never looks hung)."""
    last = 0.0
    while not os.path.exists(go):
        now = time.monotonic()
        if now - last >= every_s:
            heartbeat(TENANT_READY)
            last = now
        time.sleep(START_POLL_S)


def window_rounds(
    step: Callable[[], Any], sync: Callable[[], Any], steps_per_round: int, window_s: float
) -> tuple[tuple[tuple[float, float], ...], Any]:
    """Rounds of K steps, each closed by one sync, until ``window_s`` of wall time has passed.

    A tenant runs for a fixed time, not a fixed count, so no tenant finishes early and runs
    alone while the others still work. Returns each round's (start, end) on
    ``time.monotonic`` (CLOCK_MONOTONIC: one clock for every process of the machine) and the
    last step's output.
    """
    stamps: list[tuple[float, float]] = []
    out = None
    end = time.monotonic() + window_s
    while not stamps or stamps[-1][1] < end:
        t0 = time.monotonic()
        for _ in range(steps_per_round):
            out = step()
        sync()
        stamps.append((t0, time.monotonic()))
    return tuple(stamps), out
