import math

import numpy as np
import pytest

from bench import stats


def test_median_ci_uses_binomial_order_statistics():
    x = list(range(1, 11))  # n = 10: ranks 2 and 9 cover 97.9%; ranks 3 and 8 only 89%
    assert stats.median_ci(x) == (2, 9)
    assert stats.median_ci([5, 1, 4, 2, 6, 3]) == (1, 6)  # n = 6: the minimum for 95%
    assert stats.median_ci([1, 2, 3, 4, 5]) is None  # n = 5 cannot reach 95%
    assert stats.median_ci(range(1, 31)) == (10, 21)  # n = 30: ranks 10 and 21


def test_cv_and_percentiles_on_known_numbers():
    assert stats.cv([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == pytest.approx(
        np.std([2, 4, 4, 4, 5, 5, 7, 9], ddof=1) / 5
    )
    assert stats.cv([3.0]) == 0.0
    assert stats.percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)


@pytest.mark.parametrize("q", [50, 90, 95, 99, 99.9])
def test_a_percentile_is_resolved_from_the_fewest_samples_whose_expected_maximum_lies_beyond_it(q):
    # the largest of n uniform samples sits at n / (n + 1) on average: below q, no sample reaches the tail
    n = stats.samples_to_resolve(q)
    assert n / (n + 1) > q / 100 >= (n - 1) / n
    values = list(np.linspace(1.0, 2.0, n))
    assert stats.resolved_percentile(values, q) == pytest.approx(stats.percentile(values, q))
    assert stats.resolved_percentile(values[:-1], q) is None


def test_step_percentiles_the_rounds_cannot_resolve_are_none():
    assert (stats.samples_to_resolve(50), stats.samples_to_resolve(90), stats.samples_to_resolve(99)) == (2, 10, 100)
    six = stats.throughput([0.5] * 6, samples_per_round=100, steps_per_round=1)
    assert six.p50_step_s == pytest.approx(0.5) and six.p90_step_s is None and six.p99_step_s is None
    ten = stats.throughput([0.5] * 9 + [1.0], samples_per_round=100, steps_per_round=2)
    assert ten.p90_step_s == pytest.approx(0.275) and ten.p99_step_s is None
    with pytest.raises(ValueError):
        stats.samples_to_resolve(100)


def test_rounds_of_one_step_count_as_latencies_and_the_budget_bounds_what_is_added():
    from bench import loop

    calls = []

    def step():
        calls.append(1)

    rounds = [3.0] * 6  # six one-step rounds of a 3 s step
    lat = loop.latencies(step, lambda: None, 100, 0.0, have=rounds)
    assert lat[:6] == rounds and len(lat) == loop.MIN_LATENCY_SAMPLES and len(calls) == 4  # only up to a p90's 10
    calls.clear()
    assert loop.latencies(step, lambda: None, 100, 0.0, have=[3.0] * 12) == [3.0] * 12 and not calls
    many = loop.latencies(step, lambda: None, 30, 60.0, have=rounds)  # a fast step: up to n within the budget
    assert len(many) == 30 and len(calls) == 24
    assert len(loop.latencies(step, lambda: None, 30, 60.0)) == 30  # no rounds given: n steps as before


def test_throughput_is_global_samples_over_round_time():
    t = stats.throughput([0.5, 0.5, 0.5, 0.5, 1.0, 0.25], samples_per_round=1000, steps_per_round=10)
    assert t.median == pytest.approx(2000.0)
    assert (t.ci_low, t.ci_high) == (1000.0, 4000.0)
    assert t.median_step_s == pytest.approx(0.05)
    assert t.min_step_s == pytest.approx(0.025)
    assert t.unstable
    with pytest.raises(ValueError):
        stats.throughput([], 1, 1)


def test_ratio_of_medians_ci_spans_one_for_same_distribution():
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 2, 12), rng.normal(100, 2, 12)
    r = stats.ratio_of_medians(a, b)
    assert r.spans_one and r.ci_low < r.value < r.ci_high
    fast = stats.ratio_of_medians(a * 3, b)
    assert not fast.spans_one and fast.value == pytest.approx(3 * np.median(a) / np.median(b))
    assert 2.8 < fast.ci_low < fast.ci_high < 3.2


def test_scaling_efficiency_is_thr_n_over_n_thr_1():
    eff = stats.scaling_efficiency([380.0] * 8, [100.0] * 8, n=4)
    assert (eff.value, eff.ci_low, eff.ci_high) == pytest.approx((0.95, 0.95, 0.95))


def test_geomean():
    assert stats.geomean([1, 4, 16]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        stats.geomean([1, 0])


def test_regression_needs_rank_test_and_ci_beyond_threshold():
    rng = np.random.default_rng(0)
    base = rng.normal(1000, 10, 10)
    assert stats.compare(base, rng.normal(1000, 10, 10)).verdict == "same"
    slow = stats.compare(base, rng.normal(800, 10, 10))
    assert slow.verdict == "regressed" and slow.p_value < 0.01 and slow.ratio.ci_high < 0.95
    assert stats.compare(base, rng.normal(1300, 10, 10)).verdict == "improved"
    # 2% slower is significant but inside the 5% threshold
    assert stats.compare(base, base * 0.98).verdict == "same"
    # one point against one point is never a regression
    assert stats.compare([1000.0], [500.0]).verdict == "same"
    assert math.isclose(stats.compare([1000.0], [500.0]).p_value, 1.0)
