"""When a case's timed rounds stop: a fixed schedule of looks at the median's CI, with exact ranks.

Checking a 95% interval after every round and stopping when it is narrow enough misses the
median far more often than 5% (95% ranks looked at after each round from 6 to 30: 13.4%). The
rule here (``shared/design/time-to-answer.md`` section 1.1, after Jennison & Turnbull's
repeated confidence intervals): the round length is fixed after calibration; the interval
``[x_(j), x_(n+1-j)]`` of the per-round figures is looked at only at the profile's looks ``n``,
with ranks ``j`` chosen so that the chance that *any* look's interval misses the median is at
most 5%. For i.i.d. continuous rounds that chance is exact and distribution-free: the count of
rounds below the median is a fair +-1 walk (:func:`simultaneous_miss`). A case stops at the
first look where the interval's half-width is within the target and the guards pass (no drift
between the halves, rounds not strongly correlated, on GPUs no clock or temperature trend),
else at the last look (the cap) or the last look the case budget reaches. At a look after the
first, a case whose rounds already foresee a cap interval well beyond the target stops early as
``futile``: a non-binding futility stop. The miss bound holds for the interval of *any* look a
case stops at, so stopping for futility costs no coverage, only the narrower interval the cap
would have given.

Pure logic: no I/O, nothing timed here; :class:`Stopper` is fed the rounds as they finish.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

ALPHA = 0.05  # the simultaneous miss chance the ranks keep to
CI_METHOD = "median RCI (sign walk)"
MAX_LAG1 = 0.5  # rounds more autocorrelated than this: the order-statistic CI cannot be trusted
CLOCK_DRIFT = 0.02  # GPU SM clock: halves' medians further apart than 2% is a trend
TEMP_RISE_C = 5.0  # GPU temperature: the second half's median this much above the first's
# futility: stop at a look after the first (from 10 rounds on in `standard`), before the cap, when the
# interval the cap would give, foreseen from the rounds so far, is over this many times the target (a
# noisy shared VM's batch-1 latency case: +-3-5% at the cap of 20 one-second rounds against +-2%).
# Simulated (i.i.d. normal rounds, +-2%, look 10 of (6, 10, 20)): CV 2% stops as futile 0.3% of the
# time, CV 3% 19% (of which 9% would have met the target at the cap), CV 4% 53%; forecast from the
# first look's 6 rounds instead, CV 2.5% would lose 4% of its met targets
FUTILE_FACTOR = 1.5


@dataclass(frozen=True)
class Schedule:
    """Looks (round counts at which the CI is checked) and their ranks; the last look is the cap."""

    looks: tuple[int, ...]
    ranks: tuple[int, ...]

    @property
    def cap(self) -> int:
        """The most rounds a case runs."""
        return self.looks[-1]

    def within(self, rounds: int) -> Schedule:
        """The looks a budget of ``rounds`` reaches (at least the first): dropping looks keeps the miss bound."""
        keep = [i for i, n in enumerate(self.looks) if n <= rounds] or [0]
        return Schedule(tuple(self.looks[i] for i in keep), tuple(self.ranks[i] for i in keep))

    def rank_at(self, n: int) -> int | None:
        """The rank of the look at ``n`` rounds, or None when ``n`` is no look."""
        return dict(zip(self.looks, self.ranks)).get(n)


# per profile: looks and ranks from the exact walk (tests/test_stopping.py checks each against it)
SCHEDULES: dict[str, Schedule] = {
    "smoke": Schedule((6, 10), (1, 2)),
    "standard": Schedule((6, 10, 20), (1, 2, 5)),
    "large": Schedule((6, 12, 24, 48, 60), (1, 2, 6, 15, 20)),
}


def simultaneous_miss(looks: Sequence[int], ranks: Sequence[int]) -> float:
    """P(at least one look's interval [x_(j), x_(n+1-j)] misses the median), i.i.d. continuous rounds.

    The interval at ``n`` rounds misses exactly when S, the number of rounds below the median,
    is <= j-1 or >= n-j+1. S is a fair +-1 walk whatever the distribution, so a dynamic program
    over S's distribution, removing the paths that missed at an earlier look, is exact.
    """
    if list(looks) != sorted(set(looks)) or len(looks) != len(ranks) or not looks:
        raise ValueError("looks must be increasing and have one rank each")
    dist = [1.0]  # dist[s]: P(S = s and no look has missed yet)
    n, missed = 0, 0.0
    for look, j in zip(looks, ranks):
        if not 1 <= j <= look // 2:
            raise ValueError(f"rank {j} at look {look} is outside 1..{look // 2}")
        while n < look:
            nxt = [0.0] * (len(dist) + 1)
            for s, p in enumerate(dist):
                nxt[s] += p / 2
                nxt[s + 1] += p / 2
            dist, n = nxt, n + 1
        for s in range(len(dist)):
            if s <= j - 1 or s >= n - j + 1:
                missed += dist[s]
                dist[s] = 0.0
    return missed


def lag1_autocorrelation(values: Sequence[float]) -> float | None:
    """Lag-1 sample autocorrelation; None for fewer than 4 values or constant ones."""
    if len(values) < 4:
        return None
    m = statistics.fmean(values)
    d = [v - m for v in values]
    den = sum(x * x for x in d)
    if den == 0:
        return None
    return sum(a * b for a, b in zip(d, d[1:])) / den


def halves_medians(values: Sequence[float]) -> tuple[float, float]:
    """(median of the first half, median of the second), the middle value of an odd count left out."""
    h = len(values) // 2
    return statistics.median(values[:h]), statistics.median(values[-h:])


def halves_drift(values: Sequence[float]) -> float:
    """|median(first half) - median(second half)| / median(all): a level that moved in the rounds."""
    mid = statistics.median(values)
    if len(values) < 2 or not mid:
        return 0.0
    first, second = halves_medians(values)
    return abs(first - second) / mid


@dataclass(frozen=True)
class Trend:
    """GPU telemetry over the rounds so far: SM clock drift between halves and temperature rise."""

    clock_drift_rel: float | None = None
    temp_rise_c: float | None = None

    @classmethod
    def of(cls, sm_mhz: Sequence[float], temp_c: Sequence[float]) -> Trend:
        """From the samples of one GPU (at least 4 of a series, else None for it)."""
        drift = rise = None
        if len(sm_mhz) >= 4 and statistics.median(sm_mhz):
            drift = halves_drift(sm_mhz)
        if len(temp_c) >= 4:
            first, second = halves_medians(temp_c)
            rise = second - first
        return cls(drift, rise)

    @classmethod
    def worst(cls, series: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Trend:
        """Over several GPUs (each its SM clock and temperature samples): the largest drift and rise."""
        trends = [cls.of(sm, temp) for sm, temp in series]
        drifts = [t.clock_drift_rel for t in trends if t.clock_drift_rel is not None]
        rises = [t.temp_rise_c for t in trends if t.temp_rise_c is not None]
        return cls(max(drifts) if drifts else None, max(rises) if rises else None)

    def failed(self) -> str | None:
        """``clock`` or ``temperature`` where the trend is beyond its bound, else None."""
        if self.clock_drift_rel is not None and self.clock_drift_rel > CLOCK_DRIFT:
            return "clock"
        if self.temp_rise_c is not None and self.temp_rise_c >= TEMP_RISE_C:
            return "temperature"
        return None


@dataclass(frozen=True)
class Look:
    """One look at ``n`` rounds: the interval at rank ``rank``, its half-width and the guards."""

    n: int
    rank: int
    low: float
    high: float
    median: float
    half_rel: float
    range_rel: float
    drift_rel: float
    lag1_acf: float | None
    trend: Trend
    target_rel: float

    @property
    def guard_failed(self) -> str | None:
        """``drift``, ``correlated``, ``clock`` or ``temperature``, or None when every guard passes."""
        if self.drift_rel > self.target_rel:
            return "drift"
        # dependence matters only where it can move the answer: rounds that all lie within half the
        # target of each other cannot put the median outside the target, however correlated (inference)
        if self.lag1_acf is not None and self.lag1_acf >= MAX_LAG1 and self.range_rel > self.target_rel / 2:
            return "correlated"
        return self.trend.failed()

    @property
    def met(self) -> bool:
        """The half-width is within the target and every guard passes."""
        return self.half_rel <= self.target_rel and self.guard_failed is None


def look(values: Sequence[float], rank: int, target_rel: float, trend: Trend | None = None) -> Look:
    """The look at ``len(values)`` rounds with rank ``rank`` (``values``: per-round throughput)."""
    x = sorted(values)
    n = len(x)
    low, high = x[rank - 1], x[n - rank]
    mid = statistics.median(x)
    return Look(
        n=n,
        rank=rank,
        low=low,
        high=high,
        median=mid,
        half_rel=(high - low) / (2 * mid) if mid else float("inf"),
        range_rel=(x[-1] - x[0]) / (2 * mid) if mid else float("inf"),
        drift_rel=halves_drift(list(values)),
        lag1_acf=lag1_autocorrelation(list(values)),
        trend=trend or Trend(),
        target_rel=target_rel,
    )


def foreseen_half(values: Sequence[float], n_cap: int, rank_cap: int) -> float:
    """The half-width (relative to the median) the interval at ``n_cap`` rounds, rank ``rank_cap``, would have.

    Foreseen from the rounds so far: the cap's interval ends are its order statistics ``rank_cap`` and
    ``n_cap + 1 - rank_cap``, near the quantiles ``p = rank_cap / (n_cap + 1)`` and ``1 - p``; each is
    read off ``values`` at the same plotting position (numpy's ``weibull`` quantile: ``p (n + 1)``,
    linear between order statistics, clamped to the sample's ends). A forecast, used only to stop
    early for futility.
    """
    mid = statistics.median(values) if len(values) >= 2 else 0.0
    if not mid:
        return float("inf")
    p = rank_cap / (n_cap + 1)
    low, high = np.quantile(values, [p, 1 - p], method="weibull")
    return float(high - low) / (2 * mid)


@dataclass
class Stopper:
    """Fed each round's throughput; says when to stop, and why.

    ``schedule`` is already cut to the looks the case's budget reaches (:meth:`Schedule.within`);
    ``full_cap`` is the profile's cap, so a case cut short by its budget says ``budget_spent``.
    """

    schedule: Schedule
    target_rel: float
    full_cap: int
    looks_taken: list[Look] = field(default_factory=list)
    stop_reason: str | None = None
    foreseen_rel: float | None = None

    def after_round(self, values: Sequence[float], trend: Trend | None = None) -> bool:
        """True when the rounds so far are enough (a look met its target, the last look came, or it is futile)."""
        n = len(values)
        rank = self.schedule.rank_at(n)
        if rank is None:
            return n >= self.schedule.cap
        lk = look(values, rank, self.target_rel, trend)
        self.looks_taken.append(lk)
        if lk.met:
            self.stop_reason = "target_met"
        elif n >= self.schedule.cap:
            if lk.half_rel <= self.target_rel:  # narrow enough, but a guard says the interval can't be trusted
                self.stop_reason = f"guard_failed:{lk.guard_failed}"
            else:
                self.stop_reason = "cap_reached" if n >= self.full_cap else "budget_spent"
        elif n > self.schedule.looks[0]:  # the first look's few rounds foresee too loosely (docs/method.md)
            cap = self.schedule.cap
            self.foreseen_rel = foreseen_half(values, cap, self.schedule.ranks[-1])
            if self.foreseen_rel > FUTILE_FACTOR * self.target_rel:
                self.stop_reason = "futile"
        return self.stop_reason is not None

    def record(self) -> dict:
        """The stopping figures of the record (names as in the CSV)."""
        last = self.looks_taken[-1] if self.looks_taken else None
        return {
            "ci_method": CI_METHOD,
            "ci_looks": list(self.schedule.looks),
            "ci_ranks": list(self.schedule.ranks),
            "ci_alpha_simultaneous": simultaneous_miss(self.schedule.looks, self.schedule.ranks),
            "ci_target_rel": self.target_rel,
            "ci_achieved_rel": last.half_rel if last else None,
            "ci_rank": last.rank if last else None,
            "ci_foreseen_cap_rel": self.foreseen_rel if self.stop_reason == "futile" else None,
            "stop_reason": self.stop_reason,
            "guard_drift_rel": last.drift_rel if last else None,
            "guard_lag1_acf": last.lag1_acf if last else None,
            "guard_clock_drift_rel": last.trend.clock_drift_rel if last else None,
            "guard_temp_rise_c": last.trend.temp_rise_c if last else None,
            "target_missed": bool(last) and self.stop_reason != "target_met",
        }


def describe_miss(
    target_rel: float, achieved_rel: float | None, rounds: int, stop_reason: str, foreseen_rel: float | None = None
) -> str:
    """``+-2% target not reached: +-3.4% after 20 rounds (cap)`` for a case that stopped short of its target.

    A futile stop says what the cap was foreseen to give: ``(futile: the cap foreseen at +-3.1%)``.
    """
    why = {"cap_reached": "cap", "budget_spent": "case budget"}.get(stop_reason, stop_reason.replace("_", " "))
    if stop_reason == "futile" and foreseen_rel is not None:
        why = f"futile: the cap foreseen at +-{100 * foreseen_rel:.1f}%"
    got = f"+-{100 * achieved_rel:.1f}%" if achieved_rel is not None else "no interval"
    return f"+-{100 * target_rel:g}% target not reached: {got} after {rounds} rounds ({why})"
