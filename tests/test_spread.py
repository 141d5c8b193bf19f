"""The run-level interval from second workers (bench.spread)."""

import math

import numpy as np
import pytest

from bench import profiles, spread


def test_the_pooled_spread_is_the_within_case_variance_of_log_medians():
    s = spread.pooled([[100.0, 110.0], [50.0, 50.0, 55.0], [7.0]])  # the single-worker case adds nothing
    logs = [[math.log(100), math.log(110)], [math.log(50), math.log(50), math.log(55)]]
    ss = sum(sum((x - np.mean(g)) ** 2 for x in g) for g in logs)
    assert s is not None and s.df == 3 and s.cases == 2
    assert s.sigma_log == pytest.approx(math.sqrt(ss / 3))
    assert spread.pooled([[1.0], [2.0]]) is None


def test_the_rerun_interval_covers_95_percent_of_reruns():
    """Workers whose log medians scatter with sigma 3%: a fresh worker's median lands inside 95% of the time."""
    rng = np.random.default_rng(5)
    sigma, hits, trials = 0.03, 0, 4000
    for _ in range(trials):
        pairs = np.exp(sigma * rng.standard_normal((6, 2)))  # six cases of the run ran twice
        s = spread.pooled(pairs.tolist())
        assert s is not None
        mine, rerun = np.exp(sigma * rng.standard_normal(2))
        f = s.half_factor()
        hits += mine / f <= rerun <= mine * f
    assert hits / trials == pytest.approx(0.95, abs=0.015)


def test_a_rotating_share_of_cases_runs_again_and_repeats_take_all():
    ids = [f"mlp-train-cpu-fp32-b{b}" for b in range(1, 41)]
    a, b = spread.chosen("run-a", ids, 1), spread.chosen("run-b", ids, 1)
    assert 0 < len(a) < len(ids) and a != b  # each run picks others
    assert spread.chosen("run-a", ids, 1) == a  # and the same run (a resume) the same ones
    assert spread.chosen("run-a", ids, 3) == ids
    assert spread.chosen("x", ids[:2], 1) == ids[:2] and spread.chosen("x", [], 1) == []
    few = spread.chosen("x", ids[:8], 1)
    assert len(few) >= spread.MIN_CASES and few == [c for c in ids[:8] if c in few]


def test_the_share_passes_over_cases_that_would_take_it_past_its_time_and_fills_with_the_cheapest():
    ids = [f"case-{i}" for i in range(18)]
    costs = {c: (120.0 if i < 3 else 25.0) for i, c in enumerate(ids)}  # three slow CNN steps, fifteen quick
    budget = sum(costs.values()) / spread.SPREAD_SHARE
    for run in (f"run-{n}" for n in range(40)):
        picks = spread.chosen(run, ids, 1, costs)
        assert len(picks) == math.ceil(len(ids) / spread.SPREAD_SHARE)
        assert sum(costs[c] for c in picks) <= budget and picks == [c for c in ids if c in picks]
    # where the share's time holds fewer than the minimum, the cheapest make it up
    dear = dict(zip(ids[:4], (400.0, 300.0, 200.0, 100.0)))  # the share's time: 250 s
    assert all(spread.chosen(f"run-{n}", ids[:4], 1, dear) == ids[1:4] for n in range(20))
    assert spread.chosen("run-a", ids, 1, costs) != spread.chosen("run-b", ids, 1, costs)  # still rotating


def test_a_second_worker_keeps_the_round_length_looks_once_and_times_no_latencies():
    for name, t in profiles.PROFILES.items():
        r = spread.repeat_timing(t)
        assert r.round_s == pytest.approx(t.round_s), name
        assert r.looks == t.looks[:1] and r.schedule.cap == t.min_rounds and r.latency_steps == 0
        assert r.schedule.ranks == t.schedule.ranks[:1] and r.warmup_steps == t.warmup_steps


def test_every_measured_case_of_a_kind_gets_the_interval_and_other_kinds_none():
    infos = [
        {
            "status": "ok",
            "mode": "train",
            "device_kind": "cpu",
            "samples_per_s": 100.0,
            "repeat_workers": [{"samples_per_s": 104.0}],
        },
        {"status": "ok", "mode": "infer", "device_kind": "cpu", "samples_per_s": 300.0},
        {"status": "ok", "mode": "train", "device_kind": "gpu", "samples_per_s": 9000.0},
        {"status": "error", "mode": "train", "device_kind": "cpu", "samples_per_s": None},
    ]
    out = spread.annotate(infos)
    assert set(out) == {"cpu"} and out["cpu"]["df"] == 1 and out["cpu"]["cases"] == 1
    f = out["cpu"]["factor"]
    assert infos[1]["run_ci_low"] == pytest.approx(300 / f) and infos[1]["run_ci_high"] == pytest.approx(300 * f)
    assert "run_ci_low" not in infos[2] and "run_ci_low" not in infos[3]


def test_the_default_repeats_come_from_the_environment_and_a_bad_one_is_one_line(monkeypatch):
    from bench.errors import UserError
    from bench.planning import default_repeats

    monkeypatch.delenv("ACCELBENCH_REPEATS", raising=False)
    assert default_repeats() == 1
    monkeypatch.setenv("ACCELBENCH_REPEATS", "3")
    assert default_repeats() == 3
    monkeypatch.setenv("ACCELBENCH_REPEATS", "many")
    with pytest.raises(UserError, match="ACCELBENCH_REPEATS must be a whole number; got 'many'"):
        default_repeats()
