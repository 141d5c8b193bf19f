"""The stopping rule: exact look schedules, and where a case's rounds end (bench.stopping)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench import stopping
from bench.profiles import PROFILES
from bench.stopping import SCHEDULES, Stopper, Trend, simultaneous_miss


def brute_force_miss(looks: tuple[int, ...], ranks: tuple[int, ...]) -> float:
    """Every sign sequence of the cap's length, equally likely: the share whose walk leaves a look's band."""
    cap = looks[-1]
    signs = np.array(list(itertools.product((0, 1), repeat=cap)), dtype=np.int8)  # 1: a round below the median
    below = np.cumsum(signs, axis=1)
    miss = np.zeros(len(signs), dtype=bool)
    for n, j in zip(looks, ranks):
        s = below[:, n - 1]
        miss |= (s <= j - 1) | (s >= n - j + 1)
    return float(miss.mean())


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_every_profiles_ranks_keep_the_miss_within_5_percent_and_are_the_narrowest(name):
    s = SCHEDULES[name]
    assert simultaneous_miss(s.looks, s.ranks) <= stopping.ALPHA
    for i in range(len(s.ranks)):  # any narrower interval (a larger rank) at any look breaks the bound
        wider = list(s.ranks)
        wider[i] += 1
        if wider[i] <= s.looks[i] // 2:
            assert simultaneous_miss(s.looks, wider) > stopping.ALPHA
    assert PROFILES[name].schedule == s  # the profile runs this schedule


def test_the_walk_is_exact_against_every_sign_sequence():
    for looks, ranks in [((6, 10), (1, 2)), ((6, 10, 20), (1, 2, 5)), ((6, 12), (1, 2))]:
        assert simultaneous_miss(looks, ranks) == pytest.approx(brute_force_miss(looks, ranks), abs=1e-12)
    # the design note's figures: one look at 6 is [min, max] (96.9% alone); three looks cost one rank at 20
    assert simultaneous_miss((6,), (1,)) == pytest.approx(2 / 64)
    assert simultaneous_miss((6, 10, 20), (1, 2, 5)) == pytest.approx(0.04997, abs=5e-5)
    assert simultaneous_miss((6, 10, 20), (1, 2, 6)) == pytest.approx(0.0733, abs=5e-4)
    # peeking after every round from 6 to 30 with each n's own 95% ranks misses far more than 5%
    from scipy import stats as sps

    looks = tuple(range(6, 31))
    ranks = tuple(
        max(j for j in range(1, n // 2 + 1) if sps.binom.cdf(n - j, n, 0.5) - sps.binom.cdf(j - 1, n, 0.5) >= 0.95)
        for n in looks
    )
    assert simultaneous_miss(looks, ranks) == pytest.approx(0.134, abs=0.002)


def test_a_bad_schedule_is_refused():
    with pytest.raises(ValueError, match="increasing"):
        simultaneous_miss((10, 6), (1, 1))
    with pytest.raises(ValueError, match="outside"):
        simultaneous_miss((6,), (4,))


def rounds(cv: float, n: int, seed: int = 0, level: float = 1000.0) -> list[float]:
    return list(level * (1 + cv * np.random.default_rng(seed).standard_normal(n)))


def run(stopper: Stopper, values: list[float], trend: Trend | None = None) -> int:
    """Feed rounds one by one as the worker does; the number of rounds run."""
    for n in range(1, len(values) + 1):
        if stopper.after_round(values[:n], trend):
            return n
    return len(values)


def test_a_gpu_shaped_case_stops_at_the_first_look():
    s = Stopper(SCHEDULES["standard"], 0.01, 20)
    assert run(s, rounds(0.0003, 20)) == 6  # step CV 0.03%, as on the H200
    rec = s.record()
    assert rec["stop_reason"] == "target_met" and not rec["target_missed"]
    assert rec["ci_achieved_rel"] < 0.002 and rec["ci_rank"] == 1 and rec["ci_looks"] == [6, 10, 20]
    assert rec["ci_alpha_simultaneous"] == pytest.approx(0.04997, abs=5e-5)


def test_a_noisy_case_runs_to_the_cap_and_says_so():
    # CV 3% against +-2%: the cap's interval is foreseen near the target, so the rounds go on to it
    s = Stopper(SCHEDULES["standard"], 0.02, 20)
    assert run(s, rounds(0.03, 30, seed=4)) == 20
    rec = s.record()
    assert rec["stop_reason"] == "cap_reached" and rec["target_missed"] and rec["ci_rank"] == 5
    assert rec["ci_achieved_rel"] > 0.02 and rec["ci_foreseen_cap_rel"] is None  # foreseen at 10: +-2.1%
    text = stopping.describe_miss(0.02, rec["ci_achieved_rel"], 20, rec["stop_reason"])
    assert text.startswith("+-2% target not reached: +-") and text.endswith("after 20 rounds (cap)")


def test_a_case_far_from_its_target_stops_early_as_futile():
    # CV 12% against +-2%: 20 rounds would give about +-8%, so the second look (10 rounds) stops it, flagged;
    # the first look's 6 rounds foresee too loosely to stop on
    s = Stopper(SCHEDULES["standard"], 0.02, 20)
    assert run(s, rounds(0.12, 30, seed=3)) == 10
    rec = s.record()
    assert rec["stop_reason"] == "futile" and rec["target_missed"] and rec["ci_rank"] == 2
    assert rec["ci_foreseen_cap_rel"] > stopping.FUTILE_FACTOR * 0.02
    # the forecast: the cap's rank-5-of-20 ends read off the rounds at the same plotting positions
    x = sorted(rounds(0.12, 10, seed=3))
    p = 5 / 21 * 11 - 1  # 0-based position of the low end among 10 rounds
    low = x[int(p)] + (p - int(p)) * (x[int(p) + 1] - x[int(p)])
    q = 16 / 21 * 11 - 1
    high = x[int(q)] + (q - int(q)) * (x[int(q) + 1] - x[int(q)])
    assert rec["ci_foreseen_cap_rel"] == pytest.approx((high - low) / (2 * float(np.median(x))))
    text = stopping.describe_miss(0.02, rec["ci_achieved_rel"], 10, "futile", rec["ci_foreseen_cap_rel"])
    assert text.endswith(f"after 10 rounds (futile: the cap foreseen at +-{100 * rec['ci_foreseen_cap_rel']:.1f}%)")
    # the report's and console's note on the case reads the same from its record
    from bench.report.console import target_note

    assert target_note({**rec, "rounds": 10}) == text
    # the forecast is for the last look the budget reaches: a schedule cut to (6, 10) has none before its cap
    cut = Stopper(SCHEDULES["standard"].within(13), 0.02, 20)
    assert run(cut, rounds(0.12, 30, seed=3)) == 10 and cut.stop_reason == "budget_spent" and cut.foreseen_rel is None
    big = Stopper(SCHEDULES["large"], 0.02, 60)  # looks 6, 12, 24, 48, 60: the forecast at 12 is for rank 20 of 60
    assert run(big, rounds(0.12, 60, seed=3)) == 12 and big.stop_reason == "futile"
    assert big.foreseen_rel == pytest.approx(stopping.foreseen_half(rounds(0.12, 12, seed=3), 60, 20))
    assert stopping.foreseen_half([1.0, 1.0, 1.0], 20, 5) == 0.0


def test_a_case_the_budget_cuts_short_says_budget_spent():
    sched = SCHEDULES["standard"].within(13)  # a slow step: 13 rounds fit the budget
    assert sched.looks == (6, 10) and sched.ranks == (1, 2)
    s = Stopper(sched, 0.02, 20)
    assert run(s, rounds(0.12, 20, seed=4)) == 10 and s.stop_reason == "budget_spent"
    assert SCHEDULES["standard"].within(2).looks == (6,)  # never fewer than the first look


def test_guards_keep_a_narrow_but_untrustworthy_interval_from_stopping():
    # a level that moved at round 4: the interval at 6 is narrow enough, but its halves disagree
    step = [1000.0] * 3 + [1025.0] * 17
    s = Stopper(SCHEDULES["standard"], 0.02, 20)
    # and a level that moved is autocorrelated: no look trusts it; at the cap it says which guard
    assert run(s, step) == 20 and s.stop_reason == "guard_failed:correlated"
    first = s.looks_taken[0]
    assert first.n == 6 and first.half_rel <= 0.02 and first.guard_failed == "drift"
    assert run(Stopper(SCHEDULES["standard"], 0.05, 20), step) == 6  # within a 5% target the step is noise
    assert [lk.guard_failed for lk in s.looks_taken] == ["drift", "drift", "correlated"]
    # strongly correlated rounds (a slow wander) fail the lag-1 guard
    wander = [1000.0 + 2 * i for i in range(5)] + [1008.0 - 2 * i for i in range(5)]
    lk = stopping.look(wander, 2, 0.005)
    assert lk.lag1_acf is not None and lk.lag1_acf >= stopping.MAX_LAG1 and lk.guard_failed == "correlated"
    # the same wander inside half a 1% target cannot move the answer past it: no guard
    assert stopping.look(wander, 2, 0.01).guard_failed is None
    # a GPU whose clock sagged in the rounds: the trend guard
    sagging = Trend.of([1980.0] * 5 + [1900.0] * 5, [50.0] * 10)
    assert sagging.failed() == "clock"
    s3 = Stopper(SCHEDULES["standard"], 0.01, 20)
    assert run(s3, rounds(0.0003, 20), sagging) == 20 and s3.stop_reason == "guard_failed:clock"
    assert Trend.of([1980.0] * 10, [40.0] * 5 + [46.0] * 5).failed() == "temperature"
    assert Trend.worst([([1980.0] * 10, [50.0] * 10), ([1980.0] * 5 + [1900.0] * 5, [])]).failed() == "clock"


def test_stopping_on_the_schedule_keeps_95_percent_coverage_where_peeking_does_not():
    """I.i.d. rounds with CV 1%, stop when the half-width <= 1%: the RCI covers, each-round peeking does not as well."""
    rng = np.random.default_rng(7)
    reps, hits = 4000, 0
    sched = SCHEDULES["standard"]
    data = 1 + 0.012 * rng.standard_normal((reps, 20))
    for row in data:
        s = Stopper(sched, 0.01, 20)
        n = run(s, list(row))
        lk = s.looks_taken[-1]
        hits += lk.low <= 1.0 <= lk.high
        assert n in sched.looks
    assert hits / reps >= 0.95


def test_futile_stops_keep_the_coverage():
    """CV 3% against a 1% target: most cases stop as futile at 10 rounds; their intervals still cover."""
    rng = np.random.default_rng(11)
    reps, hits, futile = 4000, 0, 0
    sched = SCHEDULES["standard"]
    for row in 1 + 0.03 * rng.standard_normal((reps, 20)):
        s = Stopper(sched, 0.01, 20)
        run(s, list(row))
        lk = s.looks_taken[-1]
        hits += lk.low <= 1.0 <= lk.high
        futile += s.stop_reason == "futile"
    assert futile / reps > 0.5 and hits / reps >= 0.95
