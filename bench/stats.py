"""Pure statistics on numbers: no I/O, nothing of the project imported.

Conventions: ``values`` are per-round figures (seconds or samples/s). CIs are 95% unless told.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

UNSTABLE_CV = 0.10  # a case whose per-round CV exceeds 10% is flagged unstable


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free CI of the median from order statistics (binomial ranks).

    Returns the narrowest symmetric pair (x_(j), x_(n+1-j)) whose coverage P(j <= B <= n-j),
    B ~ Binomial(n, 1/2), is at least ``confidence``; None when n is too small (n < 6 at 95%).
    """
    n = len(values)
    best = None
    for j in range(1, n // 2 + 1):
        coverage = sps.binom.cdf(n - j, n, 0.5) - sps.binom.cdf(j - 1, n, 0.5)
        if coverage >= confidence:
            best = j
        else:
            break
    return order_interval(values, best) if best else None


def order_interval(values: Sequence[float], rank: int) -> tuple[float, float] | None:
    """``(x_(rank), x_(n+1-rank))`` of the sorted values; None where the rank does not fit n."""
    x = sorted(values)
    n = len(x)
    return (x[rank - 1], x[n - rank]) if 1 <= rank <= n // 2 else None


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (sample stdev / mean); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    m = float(np.mean(values))
    return float(np.std(values, ddof=1) / m) if m else math.inf


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile (0-100), linear interpolation."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def samples_to_resolve(q: float) -> int:
    """The fewest samples whose q-th percentile (0-100) reaches the tail it names: ``1 / (1 - q/100)``.

    With fewer, no sample is expected beyond the percentile, and the estimate interpolates toward
    the sample's largest value: a "p99" of 10 samples is their maximum, which estimates about the
    p91. So p50 needs 2 samples, p90 10, p99 100.
    """
    if not 0 <= q < 100:
        raise ValueError(f"a percentile from 0 to below 100; got {q}")
    return max(1, math.ceil(100 / (100 - q) - 1e-9))


def resolved_percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """:func:`percentile` where the values resolve it (:func:`samples_to_resolve`), else None."""
    return percentile(values, q) if len(values) >= samples_to_resolve(q) else None


@dataclass(frozen=True)
class Throughput:
    """Per-round throughput summary (samples/s) and step time (s)."""

    median: float
    ci_low: float | None
    ci_high: float | None
    cv: float
    min_step_s: float
    median_step_s: float
    p50_step_s: float
    p90_step_s: float | None  # None where the rounds are too few to resolve it (samples_to_resolve)
    p99_step_s: float | None
    unstable: bool


def throughput(
    round_times_s: Sequence[float], samples_per_round: int, steps_per_round: int, rank: int | None = None
) -> Throughput:
    """Global throughput of each round = samples of the round / wall time of the round.

    The CI is ``[x_(rank), x_(n+1-rank)]`` where a stopping rule chose the rank (its look's), else
    the fixed-n 95% interval of :func:`median_ci`.
    """
    t = np.asarray(round_times_s, dtype=float)
    if t.size == 0 or np.any(t <= 0):
        raise ValueError("round times must be positive and non-empty")
    thr = samples_per_round / t
    ci = median_ci(list(thr)) if rank is None else order_interval(list(thr), rank)
    step = t / steps_per_round
    c = cv(list(thr))
    return Throughput(
        median=float(np.median(thr)),
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        cv=c,
        min_step_s=float(step.min()),
        median_step_s=float(np.median(step)),
        p50_step_s=percentile(step, 50),
        p90_step_s=resolved_percentile(step, 90),
        p99_step_s=resolved_percentile(step, 99),
        unstable=c > UNSTABLE_CV,
    )


@dataclass(frozen=True)
class Ratio:
    """A ratio of medians with a bootstrap CI; ``spans_one`` when the CI includes 1."""

    value: float
    ci_low: float
    ci_high: float

    @property
    def spans_one(self) -> bool:
        """True when the CI includes 1 (no demonstrated difference)."""
        return self.ci_low <= 1.0 <= self.ci_high

    def scaled(self, factor: float) -> Ratio:
        """The same ratio multiplied by ``factor`` (e.g. 1/N for scaling efficiency)."""
        return Ratio(self.value * factor, self.ci_low * factor, self.ci_high * factor)


def ratio_of_medians(
    a: Sequence[float], b: Sequence[float], n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> Ratio:
    """median(a) / median(b) with a percentile-bootstrap CI (each sample resampled on its own)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        raise ValueError("both samples must be non-empty")
    value = float(np.median(xa) / np.median(xb))
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, xa.size, size=(n_boot, xa.size))
    ib = rng.integers(0, xb.size, size=(n_boot, xb.size))
    boots = np.median(xa[ia], axis=1) / np.median(xb[ib], axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(boots, [alpha, 1 - alpha])
    return Ratio(value, float(min(lo, value)), float(max(hi, value)))


def scaling_efficiency(thr_n: Sequence[float], thr_1: Sequence[float], n: int, **kw) -> Ratio:
    """thr_N / (N x thr_1) with its bootstrap CI."""
    return ratio_of_medians(thr_n, thr_1, **kw).scaled(1.0 / n)


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values."""
    x = np.asarray(values, dtype=float)
    if x.size == 0 or np.any(x <= 0):
        raise ValueError("geometric mean needs positive values")
    return float(np.exp(np.mean(np.log(x))))


@dataclass(frozen=True)
class Change:
    """A new run against a baseline: ratio new/base, rank-test p, and the verdict."""

    ratio: Ratio
    p_value: float
    verdict: str  # "regressed", "improved" or "same"


def compare(
    base: Sequence[float],
    new: Sequence[float],
    threshold: float = 0.05,
    alpha: float = 0.01,
    higher_is_better: bool = True,
    seed: int = 0,
) -> Change:
    """Flag a change only when the rank test (Mann-Whitney, p < alpha) and the ratio's CI agree.

    A regression of a higher-is-better figure: p < alpha and the CI's upper end below
    1 - threshold. An improvement: p < alpha and the CI's lower end above 1 + threshold.
    """
    r = ratio_of_medians(new, base, seed=seed)
    p = 1.0 if len(base) < 2 or len(new) < 2 else float(sps.mannwhitneyu(new, base, alternative="two-sided").pvalue)
    worse = r.ci_high < 1 - threshold if higher_is_better else r.ci_low > 1 + threshold
    better = r.ci_low > 1 + threshold if higher_is_better else r.ci_high < 1 - threshold
    verdict = "same"
    if p < alpha and worse:
        verdict = "regressed"
    elif p < alpha and better:
        verdict = "improved"
    return Change(r, p, verdict)
