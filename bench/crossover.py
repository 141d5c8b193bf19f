"""Where one configuration starts to beat another along a swept axis, with its interval.

For a pair A (e.g. a GPU, or bf16) and B (the CPU, or fp32) at points x (batch, or a size knob),
S(x) = median throughput of A / that of B, each with its bootstrap CI (``bench.stats``). From
``../shared/design/sweeps.md`` 6.5:

* the **bracket**, with no model: the last x whose S CI lies wholly below 1 before the first x
  whose S CI lies wholly above 1; points whose CI spans 1 fall inside it;
* the **estimate**: log S interpolated against log x where S first passes 1 inside the bracket,
  and its 95% interval from a bootstrap that resamples every case's rounds on its own and
  applies the same rule; resamples with no crossing inside the tested range (the share is
  recorded) push the interval's end out to "below the first point" or "beyond the last";
* "faster at every tested point", "no crossover up to x_max", or "not resolved" where that is
  the truth, and a flag where S crosses 1 more than once;
* a **model** that explains it: each side's step time fitted as t0 + c x b by least squares
  (t0: the fixed cost per step, c: the cost per sample), and where they cross.

The interval covers round-to-round noise in this run, not a rerun's (``bench.spread``).
Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench import stats

N_BOOT = 2000


@dataclass(frozen=True)
class Fit:
    """A side's median step time against batch: ``t0 + c x batch`` (seconds, seconds per sample)."""

    t0_s: float
    c_s: float


@dataclass(frozen=True)
class Crossover:
    """A pair's crossing along one axis.

    ``verdict``: ``crossover`` (bracketed), ``faster_everywhere`` (A's CI above 1 at every point),
    ``never`` (A's CI below 1 at the last point and nowhere above), ``from`` (above 1 from a point
    on, the points before it unresolved), ``unresolved`` (no point's CI clear of 1 on the side that
    matters). ``low``/``high``: the bracket (None where open). ``ci_low``/``ci_high``: the
    estimate's 95% interval, -inf / inf where resamples crossed before the bracket's low point
    or not up to its high one. ``model_x``: where the fitted step times cross (batch axes only; None where they do not).
    """

    xs: tuple[int, ...]
    ratios: tuple[stats.Ratio, ...]
    verdict: str
    low: int | None
    high: int | None
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    no_crossing_share: float
    non_monotone: bool
    fits: tuple[Fit, Fit] | None
    model_x: float | None

    def sentence(self, a: str, b: str, axis: str) -> str:
        """The answer in words, e.g. "gpu1 faster than cpu from batch 97 [88-108] (bracket 64-128)"."""
        if self.verdict == "faster_everywhere":
            text = f"{a} faster than {b} at every tested {axis} ({self.xs[0]}-{self.xs[-1]})"
        elif self.verdict == "never":
            text = f"no crossover up to {axis} {self.xs[-1]}: {a} slower than {b}"
        elif self.verdict == "from":
            text = f"{a} faster than {b} from {axis} {self.high}; below it the difference is not resolved"
        elif self.verdict == "unresolved":
            text = f"{a} vs {b}: no tested {axis} resolves a difference (every CI spans 1 or none is faster)"
        else:
            lo = f"<{self.low}" if self.ci_low == -math.inf else _fmt(self.ci_low)
            hi = f">{self.high}" if self.ci_high == math.inf else _fmt(self.ci_high)
            text = f"{a} faster than {b} from {axis} {_fmt(self.estimate)} [{lo}-{hi}] (bracket {self.low}-{self.high})"
        if self.non_monotone:
            text += "; the ratio crosses 1 more than once"
        return text


def _fmt(x: float | None) -> str:
    return "?" if x is None else f"{x:.3g}"


def first_crossing(xs: Sequence[float], s: Sequence[float]) -> float:
    """Where S first rises through 1, interpolating log S against log x; -inf if S(x0) >= 1, inf if never."""
    if s[0] >= 1:
        return -math.inf
    for i in range(1, len(xs)):
        if s[i] >= 1:
            l0, l1 = math.log(s[i - 1]), math.log(s[i])
            f = -l0 / (l1 - l0)
            return math.exp(math.log(xs[i - 1]) + f * (math.log(xs[i]) - math.log(xs[i - 1])))
    return math.inf


def fit_step_time(batches: Sequence[float], step_s: Sequence[float]) -> Fit | None:
    """Least-squares ``t0 + c x batch`` of median step times (None below two distinct batches)."""
    if len(set(batches)) < 2:
        return None
    c, t0 = np.polyfit(np.asarray(batches, float), np.asarray(step_s, float), 1)
    return Fit(float(t0), float(c))


def analyse(
    xs: Sequence[int],
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    batch_axis: bool = True,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> Crossover:
    """The crossing of A over B: ``a[i]``, ``b[i]`` the per-round throughputs at ``xs[i]`` (increasing).

    ``batch_axis``: the x values are the batch (each side's step time is x / throughput), so
    the t0 + c x b fit applies.
    """
    ratios = tuple(stats.ratio_of_medians(ai, bi, n_boot=n_boot, seed=seed + i) for i, (ai, bi) in enumerate(zip(a, b)))
    above, below = _clear(ratios)
    values = [r.value for r in ratios]
    signs = [v >= 1 for v in values]
    non_monotone = sum(1 for p, q in zip(signs, signs[1:]) if p != q) > 1
    low = high = None
    estimate = ci_lo = ci_hi = None
    share = 0.0
    if above and len(above) == len(xs):
        verdict, high = "faster_everywhere", xs[0]
    elif above and any(i < above[0] for i in below):
        verdict = "crossover"
        lo_i = max(i for i in below if i < above[0])
        low, high = xs[lo_i], xs[above[0]]
        seg = slice(lo_i, above[0] + 1)
        estimate = first_crossing(xs[seg], values[seg])
        boots = _boot_crossings(xs[seg], a[seg], b[seg], n_boot, seed)
        share = float(np.mean(~np.isfinite(boots)))
        ci_lo, ci_hi = (float(v) for v in np.quantile(boots, [0.025, 0.975], method="inverted_cdf"))
    elif above:
        verdict, high = "from", xs[above[0]]
    elif below and below[-1] == len(xs) - 1:
        verdict, low = "never", xs[-1]
    else:
        verdict = "unresolved"
    fits = model_x = None
    if batch_axis:
        fa = fit_step_time(xs, [x / float(np.median(s)) for x, s in zip(xs, a)])
        fb = fit_step_time(xs, [x / float(np.median(s)) for x, s in zip(xs, b)])
        if fa and fb:
            fits = (fa, fb)
            if fa.c_s != fb.c_s:
                x = (fa.t0_s - fb.t0_s) / (fb.c_s - fa.c_s)
                model_x = x if x > 0 else None
    return Crossover(tuple(xs), ratios, verdict, low, high, estimate, ci_lo, ci_hi, share, non_monotone, fits, model_x)


def _clear(ratios: Sequence[stats.Ratio]) -> tuple[list[int], list[int]]:
    """The points whose ratio CI lies wholly above 1, and those wholly below (the bracket's ends come from them)."""
    return [i for i, r in enumerate(ratios) if r.ci_low > 1], [i for i, r in enumerate(ratios) if r.ci_high < 1]


def _boot_crossings(
    xs: Sequence[int], a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], n_boot: int, seed: int
) -> np.ndarray:
    """``first_crossing`` of each resample (every case's rounds resampled on its own)."""
    rng = np.random.default_rng(seed)

    def medians(side: Sequence[Sequence[float]]) -> np.ndarray:
        cols = []
        for s in side:
            x = np.asarray(s, float)
            cols.append(np.median(x[rng.integers(0, x.size, size=(n_boot, x.size))], axis=1))
        return np.stack(cols, axis=1)  # (n_boot, points)

    s = medians(a) / medians(b)
    return np.array([first_crossing(xs, row) for row in s])


CLEAR_POINTS = 2  # points beyond the bracket whose ratio CI lies above 1 before a sweep stops climbing


def settled(xs: Sequence[int], a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], seed: int = 0) -> str | None:
    """Whether the crossing of A over B along batch is answered, and no higher point is needed for it.

    Answered (issue 26, cost under control): bracketed (a point whose ratio CI lies below 1 before
    one whose CI lies above 1) and the CI above 1 at CLEAR_POINTS more points past the bracket,
    with none below 1 after it. Returns the answer in words, or None where a higher point may still change it.
    """
    ratios = [stats.ratio_of_medians(ai, bi, seed=seed + i) for i, (ai, bi) in enumerate(zip(a, b))]
    above, below = _clear(ratios)
    if not above or not any(i < above[0] for i in below):
        return None
    lo = max(i for i in below if i < above[0])
    past = list(range(above[0] + 1, len(xs)))
    if len(past) < CLEAR_POINTS or any(ratios[i].ci_low <= 1 for i in past):
        return None
    return (
        f"bracketed at batch {xs[lo]}-{xs[above[0]]}, and the ratio's CI above 1 at batch "
        + ", ".join(str(xs[i]) for i in past)
        + " too"
    )
