"""The crossover along a swept axis (bench.crossover), on GPU-shaped step times t0 + c x b."""

import math

import numpy as np
import pytest

from bench import crossover

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
GPU = (2e-3, 0.5e-6)  # launch-bound: 2 ms a step whatever the batch, 0.5 us a sample
CPU = (1e-4, 20e-6)  # 0.1 ms a step, 20 us a sample
TRUE_X = (GPU[0] - CPU[0]) / (CPU[1] - GPU[1])  # 97.4: where the step times meet


def rounds(t0_c, rng, n=20, noise=0.03):
    """Per-round throughput at each batch: b / (t0 + c b), each round off by a lognormal 3%."""
    t0, c = t0_c
    return [list(b / (t0 + c * b) * np.exp(noise * rng.standard_normal(n))) for b in BATCHES]


def test_the_interval_covers_the_true_crossing_in_at_least_90_percent_of_seeded_runs():
    hits, trials = 0, 200
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        x = crossover.analyse(BATCHES, rounds(GPU, rng), rounds(CPU, rng), n_boot=600, seed=seed)
        assert x.verdict == "crossover" and x.low == 64 and x.high == 128, (seed, x.verdict, x.low, x.high)
        hits += x.ci_low <= TRUE_X <= x.ci_high
    assert hits / trials >= 0.90
    # the fitted step times explain it: t0 and c of each side, and where they cross
    (fa, fb) = x.fits
    assert fa.t0_s == pytest.approx(GPU[0], rel=0.1) and fb.c_s == pytest.approx(CPU[1], rel=0.1)
    assert x.model_x == pytest.approx(TRUE_X, rel=0.15)
    assert x.sentence("gpu1", "cpu", "batch").startswith("gpu1 faster than cpu from batch 9")


def test_always_faster_never_faster_and_unresolved_say_so():
    rng = np.random.default_rng(1)
    fast = crossover.analyse(BATCHES, rounds((1e-5, 0.1e-6), rng), rounds(CPU, rng), n_boot=500)
    assert fast.verdict == "faster_everywhere" and fast.estimate is None
    assert fast.sentence("gpu1", "cpu", "batch") == "gpu1 faster than cpu at every tested batch (1-1024)"
    slow = crossover.analyse(BATCHES, rounds((5e-2, 0.5e-6), rng), rounds(CPU, rng), n_boot=500)
    assert slow.verdict == "never" and slow.low == 1024
    assert slow.sentence("gpu1", "cpu", "batch") == "no crossover up to batch 1024: gpu1 slower than cpu"
    flat = [[100.0, 101.0, 99.0, 100.5, 99.5, 100.2]] * 3
    assert crossover.analyse([1, 2, 4], flat, flat, n_boot=200).verdict == "unresolved"  # the same rounds: nothing


def test_a_ratio_that_crosses_twice_is_flagged_and_the_interval_is_censored_where_resamples_do_not_cross():
    below, above = [[90.0, 91, 89, 90.5, 89.5, 90.2]], [[110.0, 111, 109, 110.5, 109.5, 110.2]]
    base = [[100.0, 100.4, 99.6, 100.2, 99.8, 100.1]]
    x = crossover.analyse([1, 2, 4, 8], below + above + below + above, base * 4, batch_axis=False, n_boot=300)
    assert x.verdict == "crossover" and x.non_monotone and (x.low, x.high) == (1, 2)
    assert x.fits is None and "crosses 1 more than once" in x.sentence("a", "b", "width")
    wide = [[80.0, 130, 85, 125, 90, 120]]  # the middle point's CI spans 1 and its resamples fall either side
    y = crossover.analyse([1, 2, 4], below + wide + above, base * 3, n_boot=500)
    assert (y.low, y.high) == (1, 4) and 1 < y.estimate < 4 and 0 <= y.no_crossing_share < 0.5
    assert crossover.first_crossing([1, 2], [1.2, 1.5]) == -math.inf
    assert crossover.first_crossing([1, 2], [0.5, 0.8]) == math.inf
    assert crossover.first_crossing([1, 4], [0.5, 2.0]) == pytest.approx(2.0)
