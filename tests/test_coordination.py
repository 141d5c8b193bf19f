"""The worker's coordinator: what a lone worker does, and where a cluster's worker differs.

The cluster's collectives (join, agree, gather, barrier) run for real in tests/test_multinode.py
over loopback; here, the decisions that need no TensorFlow.
"""

import math

import pytest

from bench.cases import Case, DeviceConfig
from bench.coordination import CALIBRATION_STEPS, ClusterCoordinator, Solo, coordinator
from bench.profiles import timing
from bench.protocol import WorkerPlan

CLUSTER = {"launcher": "tf_config", "rank": 1, "world": 2, "workers": ["a:1", "b:1"]}


def _plan(cluster=None):
    case = Case("mlp", "train", "cpu", 1, False, "fp32", False, 64, nodes=2 if cluster else 1)
    return WorkerPlan("r", "smoke", DeviceConfig("cpu"), timing("smoke"), (case,), cluster=cluster)


def test_the_plan_picks_the_coordinator():
    assert type(coordinator(_plan())) is Solo
    c = coordinator(_plan(CLUSTER))
    assert isinstance(c, ClusterCoordinator) and c.rank == 1


def test_a_lone_worker_calibrates_on_its_own_steps_and_keeps_going_after_a_failure():
    solo, calls = Solo(), []
    t = timing("smoke")
    step_s = solo.calibrate(lambda: calls.append(1), t)
    assert len(calls) >= 2 and step_s > 0
    assert solo.round_barrier("infer") is None and solo.round_barrier("train") is None
    assert solo.latency_budget_s(t) == t.case_budget_s / 4
    assert solo.gather({"energy_j": 1.0}, 10) == {}
    assert solo.peer_failed(RuntimeError("x")) is False and solo.leave_after_failure() is False
    assert solo.join(None, _plan(), lambda p: None, lambda m: None) == set()
    said = []
    solo.setup_failed("worker setup failed: boom", said.append)
    assert said == []  # alone: every case records the error, the run is not ended


def test_a_cluster_worker_ends_the_run_on_setup_failure_and_leaves_after_a_failed_case():
    c = ClusterCoordinator(CLUSTER)
    said = []
    c.setup_failed("worker setup failed: boom", said.append)
    assert said == ["rank 1: worker setup failed: boom"]
    assert c.leave_after_failure() is True
    assert c.latency_budget_s(timing("smoke")) == float("inf")  # a fixed count: every node leaves together
    assert c.round_barrier("train") is None  # training's all-reduce already joins the nodes each step
    assert callable(c.round_barrier("infer"))
    # not joined (setup failed before the strategy): no peer to blame, no final barrier to wait on
    assert c.peer_failed(RuntimeError("socket closed")) is False
    c.close(lambda p: pytest.fail("a worker that never joined must not wait on a barrier"))
    assert CALIBRATION_STEPS >= 2


def test_calibration_takes_one_step_that_outlasts_a_round_and_warm_up_ends_on_its_time_bound(monkeypatch):
    from bench import loop

    clock = [0.0]
    monkeypatch.setattr(loop.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr("bench.coordination.time.perf_counter", lambda: clock[0])

    def step(seconds):
        calls = []

        def run():
            calls.append(1)
            clock[0] += seconds

        return run, calls

    t = timing("standard")
    slow, calls = step(12.0)  # ResNet-50 training on two CPU cores: K is 1 whatever a second step says
    assert Solo().calibrate(slow, t) == 12.0 and len(calls) == 1
    quick, calls = step(2**-6)  # exact in binary: the clock adds up without rounding
    assert Solo().calibrate(quick, t) == 2**-6 and len(calls) == 13  # 0.2 s of them
    slow, calls = step(12.0)
    assert loop.warm_up(slow, lambda: None, t.warmup_steps, t.warmup_s) == (1, 12.0) and len(calls) == 1
    # a warm-up step that outlasted a round is the calibration: K is 1, no step more
    assert Solo().calibrate(slow, t, warm_step_s=12.0) == 12.0 and len(calls) == 1
    assert Solo().calibrate(slow, t, warm_step_s=0.5) == 12.0 and len(calls) == 2  # shorter than a round: calibrate
    mid, calls = step(1.25)
    assert loop.warm_up(mid, lambda: None, t.warmup_steps, t.warmup_s) == (3, 1.25)  # 2.5 s < 3 s: one more
    quick, calls = step(0.01)
    assert loop.warm_up(quick, lambda: None, t.warmup_steps, t.warmup_s)[0] == t.warmup_steps
    assert loop.warm_up(slow, lambda: None, t.warmup_steps, math.inf)[0] == t.warmup_steps  # a cluster: the count
