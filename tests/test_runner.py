"""The parent's side of a run with a stand-in worker: crash recovery, atomic results, resume."""

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from test_capability import machine

from bench import runner, storage, watchdog
from bench.planning import RunOptions


@pytest.fixture(autouse=True)
def fake_worker(monkeypatch):
    """Every runner test starts the stand-in worker instead of TensorFlow's."""
    monkeypatch.setattr(watchdog, "WORKER", [sys.executable, str(Path(__file__).with_name("fake_worker.py"))])


OPTS = RunOptions(
    profile="smoke",
    workloads=("mlp",),
    modes=("train",),
    devices=("cpu",),
    precisions=("fp32", "mixed_bfloat16"),
    virtual_devices=2,
)

# two workloads on one CPU worker: the stand-in worker dies or hangs during the second case
TWO_WORKLOADS = RunOptions(
    profile="smoke", workloads=("mlp", "cnn"), modes=("train",), devices=("cpu",), precisions=("fp32", "mixed_bfloat16")
)


def test_each_device_configuration_runs_in_a_worker_and_every_case_is_recorded(tmp_path, monkeypatch):
    # (a worker killed mid case: test_the_case_in_flight_is_recorded_and_the_rest_run)
    run = runner.Run.new(OPTS, machine(), tmp_path, ["run"])
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
    opts = TWO_WORKLOADS
    path = runner.Run.new(opts, machine(), tmp_path, ["run"]).execute()
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
    logs = {p.name for p in path.with_suffix(".logs").iterdir()}
    assert {"cpu-1.log", "cpu-2.log"} <= logs and all(
        n.startswith("cpu-repeat1-") for n in logs - {"cpu-1.log", "cpu-2.log"}
    )


def test_repeats_measure_every_case_again_in_fresh_workers_and_never_replace_a_record(tmp_path, monkeypatch):
    import dataclasses

    monkeypatch.setenv("FAKE_WORKER", "fail:nothing")  # every case finishes, in every worker
    monkeypatch.setenv("FAKE_WORKER_SPREAD", "1")
    opts = dataclasses.replace(TWO_WORKLOADS, repeats=3)
    path = runner.Run.new(opts, machine(), tmp_path, ["run"]).execute()
    doc = storage.load(path)
    infos = [r["extra_info"] for r in storage.records(doc)]
    assert len(infos) == 4 and all(e["status"] == "ok" for e in infos)  # one record per case, not one per worker
    for e in infos:
        assert [w["status"] for w in e["repeat_workers"]] == ["ok", "ok"], e["case_id"]
        # the first worker looks at the profile's looks; a second one only at the first (its median is its figure)
        assert len(e["ci_looks"]) > 1 and [w["ci_looks"] for w in e["repeat_workers"]] == [e["ci_looks"][:1]] * 2
        assert e["run_ci_low"] < e["samples_per_s"] < e["run_ci_high"]
    sp = doc["run"]["between_worker_spread"]["cpu"]
    assert sp["cases"] == 4 and sp["df"] == 8 and sp["method"].startswith("rerun interval")
    assert {p.name for p in path.with_suffix(".logs").iterdir()} == {
        "cpu-1.log",
        "cpu-repeat1-1.log",
        "cpu-repeat2-1.log",
    }


def test_a_worker_dead_of_out_of_memory_is_recorded_oom_not_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_WORKER", "oom")
    opts = TWO_WORKLOADS
    path = runner.Run.new(opts, machine(), tmp_path, ["run"]).execute()
    status = {storage.case_id_of(r): r["extra_info"] for r in storage.records(storage.load(path))}
    died = status["mlp-train-cpu-mixed_bfloat16-b64"]
    assert died["status"] == "oom" and "CUDA_ERROR_OUT_OF_MEMORY: out of memory" in died["reason"]
    assert status["mlp-train-cpu-fp32-b64"]["status"] == "ok" and status["cnn-train-cpu-fp32-b16"]["status"] == "ok"


def test_resume_keeps_finished_cases_and_runs_the_missing(tmp_path, monkeypatch):
    path = runner.Run.new(OPTS, machine(), tmp_path, ["run"]).execute()
    doc = storage.load(path)
    doc["benchmarks"] = doc["benchmarks"][:1]
    storage.write_atomic(path, doc)
    again = runner.Run.resume(path.stem, RunOptions(), machine(), tmp_path, ["run", "--resume"])
    assert again.opts == OPTS  # the stored options, not the ones given
    again.execute()
    assert len(storage.load(path)["benchmarks"]) == 4


def test_a_hung_worker_costs_one_timeout_case_not_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_WORKER", "hang")
    opts = dataclasses.replace(TWO_WORKLOADS, stall_timeout_s=2.0)
    t0 = time.monotonic()
    path = runner.Run.new(opts, machine(), tmp_path, ["run"]).execute()
    assert time.monotonic() - t0 < 30
    doc = storage.load(path)
    status = {storage.case_id_of(r): r["extra_info"] for r in storage.records(doc)}
    hung = status["mlp-train-cpu-mixed_bfloat16-b64"]
    assert hung["status"] == "timeout"
    assert hung["reason"].startswith("no progress for 2 s (last: round 1 of 6); worker killed")
    assert "all-reduce started" in hung["reason"]  # the log tail
    # the case before it was kept, the ones after it ran in a fresh worker
    assert [status[c]["status"] for c in ("mlp-train-cpu-fp32-b64", "cnn-train-cpu-fp32-b16")] == ["ok", "ok"]
    assert status["cnn-train-cpu-mixed_bfloat16-b16"]["status"] == "ok"
    assert doc["run"]["status"] == "complete"


def test_one_worker_per_device_tf32_and_xla_group():
    from bench.cases import Case

    def case(p, xla, kind="gpu", n=2):
        return Case("cnn", "train", kind, n, False, p, xla, 64)

    keys = {runner.group_label(runner.group_key(case(p, x))) for p in ("fp32", "tf32", "mixed_float16") for x in (0, 1)}
    assert keys == {"gpu2-tf32off", "gpu2-tf32on", "gpu2-tf32off-xla", "gpu2-tf32on-xla"}
    # fp32 and tf32 convolutions never share a worker (cuDNN's autotune cache has no TF32 key)
    assert runner.group_key(case("fp32", False)) != runner.group_key(case("tf32", False))
    # on the CPU TF32 does not exist: precisions share a worker, XLA does not
    assert runner.group_key(case("fp32", False, "cpu", 1)) == runner.group_key(case("mixed_bfloat16", False, "cpu", 1))
    assert runner.group_label(runner.group_key(case("fp32", True, "cpu", 1))) == "cpu-xla"


def test_fp32_and_tf32_cases_run_in_separate_workers(tmp_path, monkeypatch):
    seen = tmp_path / "plans.txt"
    monkeypatch.setenv("FAKE_WORKER_PLANS", str(seen))
    m = machine(tf_gpus=[("NVIDIA A100-SXM4-40GB", (8, 0))], nvml_gpus=1)
    opts = RunOptions(
        profile="smoke", workloads=("cnn",), modes=("train",), devices=("gpu:1",), precisions=("fp32", "tf32")
    )
    path = runner.Run.new(opts, m, tmp_path, ["run"]).execute()
    plans = [json.loads(line) for line in seen.read_text().splitlines()]
    # then one of the two again in a fresh worker of its own kind (the run-level spread, bench.spread)
    assert [[c["precision"] for c in p["cases"]] for p in plans[:2]] == [["fp32"], ["tf32"]]
    again = plans[2:]  # the rotating share: one case, or both
    assert 1 <= len(again) <= 2 and all(p["cases"] in (plans[0]["cases"], plans[1]["cases"]) for p in again)
    assert plans[0]["gpu"] == {"cuda_ordinals": [0], "pci_bus_ids": ["0000:00:00.0"], "memory_total_bytes": 40 * 2**30}
    logs = {p.name for p in path.with_suffix(".logs").iterdir()}
    assert {"gpu1-tf32off-1.log", "gpu1-tf32on-1.log"} < logs and len(logs) == 2 + len(again)
    assert all(
        n in ("gpu1-tf32off-repeat1-1.log", "gpu1-tf32on-repeat1-1.log")
        for n in logs - {"gpu1-tf32off-1.log", "gpu1-tf32on-1.log"}
    )


def test_cluster_ranks_own_their_files_and_a_fatal_worker_ends_the_run(tmp_path, monkeypatch):
    from bench.cluster import Cluster
    from bench.errors import UserError

    monkeypatch.setenv("FAKE_WORKER", "fail:nothing")  # every case finishes
    opts = RunOptions(
        profile="smoke", workloads=("mlp",), modes=("train",), devices=("cpu",), precisions=("fp32",), nodes=2
    )
    workers = ("127.0.0.1:1", "127.0.0.1:2")
    rank1 = runner.Run.new(
        opts, machine(), tmp_path / "r1", ["run"], cluster=Cluster("tf_config", 1, workers), run_id="c1"
    )
    rank1.execute()
    assert not (tmp_path / "r1" / "c1.json").exists() and (tmp_path / "r1" / "c1.logs" / "rank1.log").exists()
    rank0 = runner.Run.new(
        opts, machine(), tmp_path / "r0", ["run"], cluster=Cluster("tf_config", 0, workers), run_id="c1"
    )
    doc = storage.load(rank0.execute())
    assert doc["run"]["cluster"]["world"] == 2 and [storage.case_id_of(r) for r in doc["benchmarks"]] == [
        "mlp-train-cpux2nodes-fp32-b64"
    ]
    with pytest.raises(UserError, match="exists"):
        runner.Run.new(opts, machine(), tmp_path / "r0", ["run"], cluster=Cluster("tf_config", 0, workers), run_id="c1")

    monkeypatch.setenv("FAKE_WORKER", "fatal:nodes disagree on the plan: rank(s) [1] differ from rank 0")
    run = runner.Run.new(
        opts, machine(), tmp_path / "r2", ["run"], cluster=Cluster("tf_config", 0, workers), run_id="c2"
    )
    with pytest.raises(UserError, match="nodes disagree on the plan"):
        run.execute()
    assert storage.load(tmp_path / "r2" / "c2.json")["run"]["status"] == "failed"


def test_a_hang_that_persists_costs_two_stall_bounds_then_the_rest_of_the_group_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_WORKER", "hang-start")
    opts = dataclasses.replace(TWO_WORKLOADS, stall_timeout_s=2.0)
    path = runner.Run.new(opts, machine(), tmp_path, ["run"]).execute()
    doc = storage.load(path)
    recs = {r.id: r for r in storage.case_records(doc)}
    assert len(recs) == 4 and all(r.status == "timeout" for r in recs.values())
    hung = [r for r in recs.values() if r.reason.startswith("no progress for 2 s (last: building)")]
    given_up = [r for r in recs.values() if r.reason.startswith("not run: 2 workers of this group hung in a row")]
    assert len(hung) == 2 and len(given_up) == 2  # two workers, not four, each hanging a full bound
    assert "each case would cost another 2 s" in given_up[0].reason
    assert sorted(p.name for p in path.with_suffix(".logs").iterdir()) == ["cpu-1.log", "cpu-2.log"]
    assert doc["run"]["status"] == "complete"


def test_a_worker_that_ignores_sigkill_costs_a_bounded_wait_and_the_run_goes_on(tmp_path, monkeypatch):
    """A process stuck in the GPU driver does not die on SIGKILL: here, the kill never reaches the worker."""
    from bench import watchdog

    monkeypatch.setenv("FAKE_WORKER", "hang-start")
    monkeypatch.setattr(watchdog, "KILL_WAIT_S", 1.0)
    monkeypatch.setattr(watchdog.os, "killpg", lambda pid, sig: None)
    monkeypatch.setattr(watchdog.subprocess.Popen, "kill", lambda self: None)
    left: list = []
    real_popen = watchdog.subprocess.Popen

    def popen(*a, **kw):  # remember every process (workers, git), to end the workers for real afterwards
        left.append(real_popen(*a, **kw))
        return left[-1]

    monkeypatch.setattr(watchdog.subprocess, "Popen", popen)
    opts = dataclasses.replace(TWO_WORKLOADS, stall_timeout_s=2.0)
    t0 = time.monotonic()
    try:
        path = runner.Run.new(opts, machine(), tmp_path, ["run"]).execute()
    finally:
        for p in left:  # Popen.kill is patched to do nothing: end them with a signal of our own
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
    assert time.monotonic() - t0 < 60
    recs = storage.case_records(storage.load(path))
    first = [r for r in recs if r.reason.startswith("no progress")][0]
    assert f"did not die within {watchdog.KILL_WAIT_S:.0f} s of SIGKILL" in first.reason and "Xid" in first.reason
    assert len(recs) == 4 and all(r.status == "timeout" for r in recs)
