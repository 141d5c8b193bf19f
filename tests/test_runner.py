"""The parent's side of a run with a stand-in worker: crash recovery, atomic results, resume."""

import sys
from pathlib import Path

from test_capability import machine

from bench import runner, storage
from bench.planning import RunOptions

OPTS = RunOptions(
    profile="smoke",
    workloads=("mlp",),
    modes=("train",),
    devices=("cpu",),
    precisions=("fp32", "mixed_bfloat16"),
    virtual_devices=2,
)


def test_a_worker_killed_mid_case_costs_only_that_case(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "WORKER", [sys.executable, str(Path(__file__).with_name("fake_worker.py"))])
    run = runner.Run(OPTS, machine(), tmp_path, ["run"])
    path = run.execute()
    doc = storage.load(path)
    status = {storage.case_id_of(r): r["extra_info"] for r in storage.records(doc)}
    # cpu config: 2 cases (the fake finishes both); cpu2-virtual: 2 cases, likewise
    assert {k: v["status"] for k, v in status.items()} == {
        "mlp-train-cpu-fp32-b64": "ok",
        "mlp-train-cpu-mixed_bfloat16-b64": "ok",
        "mlp-train-cpu2-virtual-fp32-b64": "ok",
        "mlp-train-cpu2-virtual-mixed_bfloat16-b64": "ok",
    }
    assert doc["run"]["status"] == "complete" and doc["run"]["end"]


def test_the_case_in_flight_is_recorded_and_the_rest_run(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "WORKER", [sys.executable, str(Path(__file__).with_name("fake_worker.py"))])
    opts = RunOptions(
        profile="smoke",
        workloads=("mlp", "cnn"),
        modes=("train",),
        devices=("cpu",),
        precisions=("fp32", "mixed_bfloat16"),
    )
    path = runner.Run(opts, machine(), tmp_path, ["run"]).execute()
    doc = storage.load(path)
    status = {storage.case_id_of(r): r["extra_info"] for r in storage.records(doc)}
    died = status["mlp-train-cpu-mixed_bfloat16-b64"]
    assert died["status"] == "error"
    assert (
        "worker process died (killed by signal 9 (SIGKILL: often the kernel's OOM killer)) during this case"
        in died["reason"]
    )
    assert "allocating a lot" in died["reason"]  # the tail of the worker's log
    assert status["mlp-train-cpu-fp32-b64"]["status"] == "ok"
    # the restarted worker had 2 cases left and finished them
    assert (
        status["cnn-train-cpu-fp32-b16"]["status"] == "ok"
        and status["cnn-train-cpu-mixed_bfloat16-b16"]["status"] == "ok"
    )
    assert sorted(p.name for p in path.with_suffix(".logs").iterdir()) == ["cpu-1.log", "cpu-2.log"]


def test_resume_keeps_finished_cases_and_runs_the_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "WORKER", [sys.executable, str(Path(__file__).with_name("fake_worker.py"))])
    path = runner.Run(OPTS, machine(), tmp_path, ["run"]).execute()
    doc = storage.load(path)
    doc["benchmarks"] = doc["benchmarks"][:1]
    storage.write_atomic(path, doc)
    again = runner.Run(RunOptions(), machine(), tmp_path, ["run", "--resume"], resume=path.stem)
    assert again.opts == OPTS  # the stored options, not the ones given
    again.execute()
    assert len(storage.load(path)["benchmarks"]) == 4
