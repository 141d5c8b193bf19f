"""A batch sweep stops climbing once its answer is clear (issue 26, cost under control).

The rule (``bench.crossover.settled``), the pairs a plan's lines make (``bench.sweep.climbs``), and a
real CPU worker that leaves a pair's higher points out once the crossing is bracketed and clear
past it, through the runner, where the GPU side was measured earlier in the run (a resumed run's
records; the GPU itself is the faked hardware boundary, never a framework).
"""

import sys

import numpy as np
from conftest import DATA
from test_capability import machine

from bench import crossover, planning, runner, storage, sweep
from bench.cases import Case
from bench.profiles import PROFILES
from bench.protocol import WorkerPlan
from bench.report import analysis, console
from bench.report.render import html_report

sys.path.insert(0, str(DATA))
import make_samples  # noqa: E402

RNG = np.random.default_rng(7)


def rounds(rate: float) -> list[float]:
    return list(rate * (1 + RNG.normal(0, 0.01, 8)))


def test_the_answer_is_clear_once_bracketed_and_two_more_points_lie_above_one():
    xs = [1, 2, 4, 8, 16]
    b = [rounds(100.0) for _ in xs]
    a = [rounds(r) for r in (20.0, 300.0, 400.0, 500.0, 600.0)]  # below 1 at batch 1, above from 2
    assert crossover.settled(xs[:3], a[:3], b[:3]) is None  # one point past the bracket: not yet
    why = crossover.settled(xs[:4], a[:4], b[:4])
    assert why == "bracketed at batch 1-2, and the ratio's CI above 1 at batch 4, 8 too"
    # faster everywhere (no bracket), or back below 1 past it: a higher point may still change the answer
    assert crossover.settled(xs[1:], a[1:], b[1:]) is None
    dip = [*a[:3], rounds(60.0), rounds(500.0)]
    assert crossover.settled(xs, dip, b) is None
    # within noise past the bracket (the CI spans 1): not clear
    assert crossover.settled(xs[:4], [*a[:2], rounds(100.0), rounds(100.5)], b[:4]) is None


def test_a_plan_s_pairs_are_the_report_s_and_a_case_is_left_out_only_when_every_pair_of_its_line_is_answered():
    opts = planning.RunOptions(
        profile="smoke",
        workloads=("mlp",),
        modes=("train",),
        devices=("gpu:1", "cpu"),
        precisions=("fp32", "mixed_bfloat16"),
        sweeps=("batch=1,2,4,8,16",),
    )
    m = machine(tf_gpus=[("NVIDIA A100-SXM4-40GB", (8, 0))], nvml_gpus=1)
    cases = [c for c, s in planning.plan(opts, m) if s.supported]
    found = {c.label: c for c in sweep.climbs(cases)}
    assert set(found) == {
        "gpu1 fp32 over cpu fp32",
        "gpu1 mixed_bfloat16 over cpu mixed_bfloat16",
        "gpu1 mixed_bfloat16 over gpu1 fp32",
        "cpu mixed_bfloat16 over cpu fp32",
    }
    dev = found["gpu1 fp32 over cpu fp32"]
    # the profile's point (batch 64) is a point of every line too
    assert [x for x, _ in dev.a] == [1, 2, 4, 8, 16, 64] and dev.b[-1][1] == "mlp-train-cpu-fp32-b64"
    assert sweep.Climb.from_dict(dev.to_dict()) == dev
    # the GPU's fp32 points: far below the CPU at batch 1, far above from 2
    measured = {i: rounds(1.0 if x == 1 else 1e9) for x, i in dev.a}
    measured |= {i: rounds(1e4) for x, i in dev.b if x <= 8}
    mine = [dev, found["cpu mixed_bfloat16 over cpu fp32"]]
    # the CPU fp32 line is also the fp32 side of the bf16 pair, which nothing answered: measure it
    assert sweep.left_unmeasured("mlp-train-cpu-fp32-b16", mine, measured) is None
    why = sweep.left_unmeasured("mlp-train-cpu-fp32-b16", [dev], measured)
    assert why == "gpu1 fp32 over cpu fp32: bracketed at batch 1-2, and the ratio's CI above 1 at batch 4, 8 too"
    assert sweep.left_unmeasured("mlp-train-cpu-fp32-b8", [dev], measured) is None  # one point past: climb on
    assert sweep.left_unmeasured("mlp-train-cpu-fp32-b16", [], measured) is None  # no pair: every point
    plan = WorkerPlan("r", "smoke", cases[0].device, PROFILES["smoke"], (cases[0],), climb=(dev,), rounds=measured)
    back = WorkerPlan.from_dict(plan.to_dict())
    assert back.climb == (dev,) and back.rounds.keys() == measured.keys()


def test_a_real_cpu_worker_stops_climbing_where_the_gpu_s_answer_is_clear(tmp_path):
    common = dict(profile="smoke", workloads=("mlp",), modes=("train",), devices=("gpu:1", "cpu"), repeats=0)
    opts = planning.RunOptions(**common, precisions=("fp32",), sweeps=("batch=1,2,4,8,16",))
    m = machine(tf_gpus=[("NVIDIA A100-SXM4-40GB", (8, 0))], nvml_gpus=1)
    every = planning.RunOptions.from_dict({**opts.to_dict(), "every_point": True})
    assert runner.Run.new(every, m, tmp_path / "every", ["run"]).climbs == []  # --every-point: no pair stops
    run = runner.Run.new(opts, m, tmp_path, ["run"], run_id="climb")
    assert [c.label for c in run.climbs] == ["gpu1 fp32 over cpu fp32"]
    # the GPU line, measured earlier in this run (a resumed run's records): slow at batch 1, fast from 2
    for b in (1, 2, 4, 8, 16, 64):
        gpu = Case("mlp", "train", "gpu", 1, False, "fp32", False, b)
        storage.add_record(run.doc, make_samples.measured(gpu, 1.0 if b == 1 else 1e9, "climb", ["A100"], 300.0))
    doc = storage.load(run.execute())
    recs = {storage.case_id_of(r): r["extra_info"] for r in storage.records(doc)}
    cpu = {b: recs[f"mlp-train-cpu-fp32-b{b}"] for b in (1, 2, 4, 8, 16, 64)}
    assert all(cpu[b]["status"] == "ok" for b in (1, 2, 4, 8)), {b: e.get("reason") for b, e in cpu.items()}
    for b in (16, 64):  # the two points above: not needed, each saying why
        assert cpu[b]["status"] == "skipped" and cpu[b]["reason"] == (
            "the sweep stopped climbing: gpu1 fp32 over cpu fp32: bracketed at batch 1-2, "
            "and the ratio's CI above 1 at batch 4, 8 too"
        )
    # the report says which points were left out and why, beside the crossover they answered
    html = html_report([doc])
    assert "2 higher batch points not measured: mlp-train-cpu-fp32-b16 (the sweep stopped climbing: gpu1" in html
    assert "2 not needed (a sweep" in html and "--every-point" in html
    text = console.table(analysis.load_run(doc))
    assert "\nnot measured: mlp-train-cpu-fp32-b64: the sweep stopped climbing: gpu1 fp32 over cpu fp32" in text
