"""The rate search and a serve case's driver: the highest request rate whose p99 meets the SLO.

Built on :mod:`bench.serve` (arrivals, the batching loop, the pass rule). Clock and step are
injected here too, so the whole serve case runs on a virtual clock in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.serve import (
    CLOSE_ENOUGH,
    FLOOR_SLOS,
    MAX_DELAY_SLO_SHARE,
    OVER_CAPACITY,
    RealClock,
    Trial,
    VirtualClock,
    arrivals,
    buckets,
    certified_at,
    run_trial,
)


@dataclass
class Search:
    """The rate search's result: the best certified rate, its bracket, and every trial."""

    slo_ms: float
    capacity_rate: float
    max_rate_at_slo: float | None = None
    bracket: tuple[float | None, float | None] = (None, None)  # (last pass, first fail)
    # what bounded the rate: "slo" (a trial under capacity failed), "capacity" (none did: the device's
    # measured capacity is the top, whatever the SLO), or "" where no rate passed
    bound: str = ""
    reason: str = ""  # why there is no rate, or what to know about it
    trials: list[Trial] = field(default_factory=list)
    best: Trial | None = None  # the rerun at the reported rate (its figures are the case's)


def search(
    trial: Callable[[float, int], Trial],
    capacity: float,
    slo_ms: float,
    max_trials: int = 10,
    seed: int = 1,
    low: float | None = None,
) -> Search:
    """The highest offered rate whose p99 is certified under the SLO.

    ``trial(rate, seed)`` runs one trial. First the low end (``low``, by default 5% of the
    capacity bound: if it fails, no rate passes) and one trial over capacity (1.5x), which must
    fail (where it passes, the reason says so, and it is never the answer); then bisection in log
    space between the last pass and the capacity bound (no rate over it is sustainable, though a
    short trial at a generous SLO can hide the growing queue: the answer never exceeds it) until
    they are within 5% or ``max_trials`` (the first two included, reruns not) ran. Server results
    need not be monotone in the rate (LoadGen says so), so the best pass is rerun with a new seed;
    a failed rerun demotes it to the bracket's top.
    """
    out = Search(slo_ms, capacity)
    seeds = iter(range(seed, seed + 10 * max_trials + 10))

    def run(rate: float) -> Trial:
        t = trial(rate, next(seeds))
        out.trials.append(t)
        return t

    lo_t = run(0.05 * capacity if low is None else low)
    if not lo_t.passed:
        share = f"{lo_t.rate / capacity:.0%} of capacity"
        out.reason = f"no rate passes: at {lo_t.rate:.3g} req/s ({share}) {lo_t.outcome}: {lo_t.reason}"
        out.bracket = (None, lo_t.rate)
        return out
    passes = [lo_t]
    hi_t = run(OVER_CAPACITY * capacity)  # a check of the harness and of the bound: it must fail
    if hi_t.passed:  # never reported: no rate over the measured capacity is sustainable
        out.reason = (
            f"{OVER_CAPACITY}x the capacity bound passed its trial: the service times understate the device; "
            "the rate stays capped at the capacity measured"
        )
    # no rate over the bound is sustainable, however long a short trial at a generous SLO hides the
    # growing queue: the bound is the search's upper end, and the answer never passes it
    fail = capacity
    failed_below = False
    while fail / passes[-1].rate > CLOSE_ENOUGH and len(out.trials) < max_trials:
        t = run(math.sqrt(passes[-1].rate * fail))
        if t.passed:
            passes.append(t)
        else:
            fail, failed_below = t.rate, True
    while passes:
        best = passes.pop()
        rerun = run(best.rate)
        if rerun.passed:
            out.max_rate_at_slo, out.best = best.rate, rerun
            out.bracket = (best.rate, fail)
            out.bound = "slo" if failed_below else "capacity"
            return out
        note = f"{best.rate:.3g} req/s passed, then failed its rerun ({rerun.reason})"
        out.reason = f"{out.reason}; {note}" if out.reason else note
        fail, failed_below = best.rate, True
    out.bracket = (None, fail)
    return out


def trial_length(rate: float, shortest_s: float, longest_s: float) -> float:
    """A trial long enough to certify the p99 with one late request (662, with 20% to spare), within bounds."""
    return min(max(shortest_s, 1.2 * certified_at(1) / rate), longest_s)


def lowest_rate(longest_s: float) -> float:
    """The lowest rate whose p99 a trial of at most ``longest_s`` can certify.

    With none late (459 requests), and 20% to spare for the Poisson count.
    """
    return 1.2 * certified_at(0) / longest_s


def low_end(capacity: float, longest_s: float) -> float:
    """The search's first rate: 5% of the capacity, or the lowest rate a longest trial can certify."""
    return max(0.05 * capacity, lowest_rate(longest_s))


def service_time(
    step: Callable[[int], object],
    n: int,
    clock: RealClock | VirtualClock,
    least: int,
    most: int = 0,
    budget_s: float = 0.0,
) -> float:
    """The median time of ``least`` calls of ``step(n)``, more (up to ``most``) while they fit ``budget_s``."""
    times: list[float] = []
    while len(times) < least or (len(times) < most and sum(times) < budget_s):
        t = clock.now()
        step(n)
        times.append(clock.now() - t)
    return float(np.median(times))


def capacity_at_slo(service_s: dict[int, float], slo_s: float) -> tuple[float, int]:
    """(requests/s, batch): the best batch / service time over the batches that fit the SLO.

    A batch fits where its service time is within the SLO less the batcher's longest wait
    (``MAX_DELAY_SLO_SHARE`` of it); where none fits, one request at a time.
    """
    budget_s = slo_s * (1 - MAX_DELAY_SLO_SHARE)
    fits = {b: s for b, s in service_s.items() if s <= budget_s}
    if not fits:
        return 1.0 / service_s[min(service_s)], min(service_s)
    best = max(fits, key=lambda b: b / fits[b])
    return best / fits[best], best


SERVICE_REPS = (5, 200, 0.2)  # a bucket's service time: the median of 5 to 200 calls, over 0.2 s where they fit


class Unjudgeable(Exception):
    """A serve case whose rate cannot be judged on this machine; ``figures`` says what was measured and why.

    ``status``: ``slo_missed`` where the device cannot meet the SLO (one request alone takes longer),
    ``unsupported`` where no trial could be run to tell (the harness or the trial bound): not tested.
    """

    def __init__(self, figures: dict):
        super().__init__(figures["serve_reason"])
        self.figures = figures
        self.status = figures.get("serve_status") or "unsupported"


ESTIMATE_MARGIN = 1.25  # a capacity estimated from one call may be this much too low


def why_not(
    slo_ms: float, floor_ms: float, one_s: float, capacity: float, longest_s: float, margin: float = 1.0
) -> tuple[str | None, str]:
    """(status, why) where no rate can be judged here, (None, "") where one can.

    ``slo_missed`` where one request alone misses the SLO (the device's answer); ``unsupported``,
    said as "not tested", where the harness cannot resolve the SLO or no certifiable trial fits.
    """
    low = low_end(capacity * margin, longest_s)
    if FLOOR_SLOS * floor_ms > slo_ms:
        return "unsupported", (
            f"not tested: an SLO of {slo_ms:g} ms is not resolvable on this machine: the harness alone has a "
            f"p99 of {floor_ms:.2f} ms (a no-op step), more than 1/{FLOOR_SLOS:.0f} of the SLO"
        )
    if one_s * 1e3 >= slo_ms:
        return "slo_missed", f"one request alone takes {one_s * 1e3:.3g} ms, at or over the SLO of {slo_ms:g} ms"
    if low >= capacity * margin:
        n = certified_at(0)
        allowed = (
            f", or {capacity * margin:.3g} allowing {margin - 1:.0%} for a one-call estimate" if margin > 1 else ""
        )
        return "unsupported", (
            f"not tested: the capacity within the SLO is {capacity:.3g} req/s{allowed}, under the {low:.3g} req/s "
            f"a {longest_s:g} s trial needs to hold {n} requests (with 20% to spare), the fewest that certify "
            "a p99 with none late"
        )
    return None, ""


def precheck(
    step: Callable[[int], object],
    max_batch: int,
    slo_ms: float,
    floor_ms: float,
    clock: RealClock | VirtualClock,
    longest_s: float,
) -> dict:
    """Before any timed round: can this case be judged at all? A few calls, not the whole measurement.

    One request's service time (median of 3, after a first call that traces or compiles) and the
    capacity from one call at the max batch (compiled already), given ``ESTIMATE_MARGIN``. Returns
    the figures with ``serve_reason`` set when no rate can be judged (a CPU that takes longer than
    the SLO for one request spends no minutes on rounds and buckets to say so).
    """
    step(1)
    service = {1: service_time(step, 1, clock, 3), max_batch: max(service_time(step, max_batch, clock, 1), 1e-9)}
    estimate, batch = capacity_at_slo(service, slo_ms / 1e3)
    status, reason = why_not(slo_ms, floor_ms, service[1], estimate, longest_s, ESTIMATE_MARGIN)
    return {
        "slo_ms": slo_ms,
        "harness_floor_p99_ms": floor_ms,
        "service_ms": {str(b): s * 1e3 for b, s in service.items()},
        "capacity_rate": estimate,
        "capacity_batch": batch,
        "max_rate_at_slo": None,
        "serve_status": status,
        "serve_reason": reason,
    }


def run_case(
    step: Callable[[int], object],
    max_batch: int,
    slo_ms: float,
    floor_ms: float,
    clock: RealClock | VirtualClock,
    shortest_s: float,
    longest_s: float,
    max_trials: int,
    heartbeat: Callable[[str], None] = lambda phase: None,
    meter: Callable[[Callable[[], Trial]], Trial] | None = None,
    seed: int = 1,
    rounds_rate: float | None = None,
) -> dict:
    """A serve case after its model is built: buckets warmed, service times, the checks, the search.

    ``step(n)`` serves one padded batch of ``n``; ``floor_ms`` is the harness's own p99 on this
    machine (:func:`harness_floor`); ``meter(run)`` runs one trial inside a telemetry window
    and fills its energy per request. The capacity bound is the best of ``b / s(b)`` over the
    buckets and ``rounds_rate`` (the timed rounds at the max batch: many more samples). Returns
    the case's serve figures; ``serve_reason`` says why there is no rate, when there is none.
    """
    sizes = buckets(max_batch)
    heartbeat("serve: compiling the bucket sizes")
    t0 = clock.now()
    for b in sizes:  # every bucket traced or compiled before anything is timed
        step(b)
    warm = clock.now() - t0
    heartbeat("serve: service time per bucket")
    service = {b: service_time(step, b, clock, *SERVICE_REPS) for b in sizes}
    delay_s = MAX_DELAY_SLO_SHARE * slo_ms / 1e3
    capacity, cap_batch = capacity_at_slo(service, slo_ms / 1e3)
    if cap_batch == max_batch and rounds_rate:  # the timed rounds ran at the max batch: many more samples
        capacity = max(capacity, rounds_rate)
    out: dict = {
        "slo_ms": slo_ms,
        "max_delay_ms": delay_s * 1e3,
        "buckets": list(sizes),
        "bucket_warmup_s": warm,
        "service_ms": {str(b): s * 1e3 for b, s in service.items()},
        "capacity_rate": capacity,
        "capacity_batch": cap_batch,
        "harness_floor_p99_ms": floor_ms,
        "max_rate_at_slo": None,
    }
    out["serve_status"], out["serve_reason"] = why_not(slo_ms, floor_ms, service[1], capacity, longest_s)
    if out["serve_reason"]:
        return out

    def trial(rate: float, s: int) -> Trial:
        heartbeat(f"serve: {rate:.4g} req/s")
        d = trial_length(rate, shortest_s, longest_s)

        def run() -> Trial:
            return run_trial(arrivals(rate, d, s), step, clock, max_batch, delay_s, slo_ms / 1e3, sizes, rate, s, d)

        return meter(run) if meter else run()

    res = search(trial, capacity, slo_ms, max_trials, seed, low_end(capacity, longest_s))
    best = res.best
    out.update(
        max_rate_at_slo=res.max_rate_at_slo,
        rate_bracket_low=res.bracket[0],
        rate_bracket_high=res.bracket[1],
        rate_at_slo_over_capacity=res.max_rate_at_slo / capacity if res.max_rate_at_slo else None,
        serve_bound=res.bound or None,
        serve_reason=res.reason,
        serve_trials=[t.to_dict() for t in res.trials],
        serve_seeds=[t.seed for t in res.trials],
    )
    if best is not None:
        out.update(
            serve_p50_ms=best.p50_ms,
            serve_p90_ms=best.p90_ms,
            serve_p99_ms=best.p99_ms,
            serve_achieved_rate=best.achieved_rate,
            mean_batch=best.mean_batch,
            padding_frac=best.padding_frac,
            energy_per_request_j=best.energy_per_request_j,
            serve_note=best.note,
        )
    return out
