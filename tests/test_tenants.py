"""Tenants: real processes through the real barrier and window (a stand-in worker, no TensorFlow); fake NVML for the modes."""

import os
import sys
from pathlib import Path

import pytest
from fake_nvml import FakeGPU
from test_capability import BF16_CPU

from bench import runner, storage, tenants, watchdog
from bench.cases import Case
from bench.devices import CPUInfo, Machine
from bench.errors import UserError
from bench.planning import RunOptions, plan
from bench.telemetry import gpus

FAKE = [sys.executable, str(Path(__file__).with_name("fake_tenant.py"))]
CPU = Machine(CPUInfo("Test CPU", 2, 1, 2, BF16_CPU), gpus.Discovery([], None, None, "NVML library not found"), {})


@pytest.fixture(autouse=True)
def fake_tenant(monkeypatch):
    monkeypatch.setattr(watchdog, "WORKER", FAKE)
    monkeypatch.delenv("FAKE_TENANT", raising=False)


def run(tmp_path, n=3, stall=None, mix=False):
    """One tenant case of the smoke MLP's training on the CPU (``mix``: its batch-1 inference beside it)."""
    opts = RunOptions(
        profile="smoke",
        workloads=("mlp",),
        modes=("train",),
        devices=("cpu",),
        precisions=("fp32",),
        tenants=() if mix else (n,),
        tenant_mix=mix,
        stall_timeout_s=stall,
        keyword="beside" if mix else f"t{n}",
    )
    path = runner.Run.new(opts, CPU, tmp_path, ["run"]).execute()
    (rec,) = storage.case_records(storage.load(path))
    return rec, path


def test_tenants_that_do_not_interfere_reach_stp_n_and_one_record_holds_the_figures(tmp_path):
    rec, path = run(tmp_path, 3)
    e = rec.info
    assert rec.ok and rec.id == "mlp-train-cpu-fp32-b64-t3" and rec.case.tenants == 3
    assert e["sharing_mode"] == "cpu" and "not GPU interference" in e["sharing_note"]
    assert 2.4 < e["stp"] < 3.3 and e["fairness"] > 0.8 and e["worst_slowdown"] < 1.3  # sleeping steps share nothing
    assert len(e["tenant_samples_per_s"]) == 3 and e["samples_per_s"] == pytest.approx(sum(e["tenant_samples_per_s"]))
    assert 0 < e["shared_window_s"] <= e["tenant_case_wall_s"][0] + 10
    # pytest-benchmark's ops is the aggregate too (each tenant round over N)
    ops = storage.load(path)["benchmarks"][0]["stats"]["ops"]
    assert ops == pytest.approx(e["samples_per_s"], rel=0.3)
    row = next(r for r in storage.tidy_rows(storage.load(path)))
    assert row["tenants"] == 3 and row["stp"] == e["stp"] and row["tenant_samples_per_s"].count(";") == 2


def test_a_device_that_serialises_the_tenants_gives_stp_1_and_each_n_times_slower(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TENANT", "serial")
    rec, _ = run(tmp_path, 3)
    e = rec.info
    assert rec.ok and 0.6 < e["stp"] < 1.8, (
        e
    )  # far from the 3 of tenants that share nothing (a loaded machine adds a little)
    # taking turns: together they did one job's work, so the slowest went at most a third of its pace
    # (file locks are not fair: how the turns split is the kernel's affair, not a figure to assert)
    assert e["worst_slowdown"] > 2.5 and e["fairness"] <= 1.0
    assert e["sharing_verdict"].startswith("sharing does not pay") or e["stp"] >= 1.05


def test_a_tenant_that_starts_late_shrinks_the_shared_window(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TENANT", "late:2")
    rec, _ = run(tmp_path, 2)
    from bench.profiles import PROFILES

    # on time, the window is the tenants' whole window (their last round ends past it); 0.4 s late, 0.4 s less
    assert rec.ok and rec.info["shared_window_s"] < PROFILES["smoke"].case_budget_s - 0.2


def test_a_dying_tenant_costs_its_case_only_and_leaves_no_process(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_TENANT", "die:2")
    monkeypatch.setenv("FAKE_TENANT_PIDS", str(pids))
    opts = RunOptions(
        profile="smoke",
        workloads=("mlp", "cnn"),
        modes=("train",),
        devices=("cpu",),
        precisions=("fp32",),
        tenants=(2,),
        keyword="t2",  # the tenant cases only
    )
    path = runner.Run.new(opts, CPU, tmp_path, ["run"]).execute()
    got = {r.case.workload: r for r in storage.case_records(storage.load(path)) if r.case.tenants > 1}
    assert set(got) == {"mlp", "cnn"}  # the run went on to the next tenant case
    for dead in got.values():  # the same fake tenant dies in each: each costs its own case
        assert dead.status == "error" and "tenant 2 of 2 died (killed by signal 9)" in dead.reason
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # every tenant of every group is gone


def test_an_out_of_memory_tenant_is_an_oom_case(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TENANT", "oom:1")
    rec, _ = run(tmp_path, 2)
    assert rec.status == "oom" and rec.reason.startswith("tenant 1 of 2: RESOURCE_EXHAUSTED")


def test_a_tenant_that_hangs_before_the_barrier_times_the_case_out(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TENANT", "hang:2")
    rec, _ = run(tmp_path, 2, stall=10)  # (room for a loaded machine to start the others' Python)
    assert rec.status == "timeout" and "tenant 2 of 2: no progress for 10 s (last: building)" in rec.reason


def _rec(rounds, k=2, batch=8):
    return {"extra_info": {"global_batch": batch, "steps_per_round": k, "tenant_rounds": rounds, "run_id": "r"}}


def test_combine_counts_only_rounds_inside_the_window_all_tenants_ran_in():
    case = Case("mlp", "train", "cpu", 1, False, "fp32", False, 8, tenants=2)
    alone = _rec([[0.0, 1.0], [1.0, 2.0]])  # 16 samples a second
    a = _rec([[10.0, 12.0], [12.0, 14.0], [14.0, 16.0]])  # 8/s
    b = _rec([[11.0, 13.0], [13.0, 15.0], [15.0, 17.0]])  # 8/s; the window is [11, 16]
    rec = tenants.combine(case, alone, [a, b], {"sharing_mode": "cpu"})
    e = rec["extra_info"]
    assert e["tenant_samples_per_s"] == [8.0, 8.0] and e["alone_samples_per_s"] == 16.0
    assert e["stp"] == 1.0 and e["worst_slowdown"] == 2.0 and e["shared_window_s"] == 5.0
    assert e["rounds"] == 4  # [12,14], [14,16] of a; [11,13], [13,15] of b
    with pytest.raises(ValueError, match="never ran at the same time"):
        tenants.combine(case, alone, [a, _rec([[20.0, 22.0]])], {})


def _gpu_machine(fake_nvml, **gpu):
    fake_nvml([FakeGPU(**gpu)])
    found = gpus.discover()
    tf = {
        "gpus": [
            {"cuda_ordinal": 0, "pci_bus_id": found.gpus[0].pci_bus_id, "name": "H100", "compute_capability": [9, 0]}
        ]
    }
    return Machine(CPUInfo("Test CPU", 2, 1, 2, BF16_CPU), found, {**tf, "built_with_cuda": True})


def _tenant_verdict(m):
    opts = RunOptions(
        profile="smoke",
        workloads=("mlp",),
        modes=("train", "serve"),
        devices=("gpu:1",),
        precisions=("fp32",),
        tenants=(2,),
    )
    return {c.id: s for c, s in plan(opts, m)}


@pytest.mark.parametrize(
    ("gpu", "mps", "why"),
    [
        ({}, False, None),  # the default compute mode: time-slicing
        ({"compute_mode": 3}, False, "exclusive_process without MPS"),
        ({"compute_mode": 3}, True, None),  # MPS serves the tenants
        ({"compute_mode": 2}, False, "prohibited"),
        ({"mig": True}, False, None),  # MIG GPUs are never a gpu:1 case: the device rule says so first
    ],
)
def test_which_gpus_tenants_may_share(fake_nvml, tmp_path, monkeypatch, gpu, mps, why):
    pipe = tmp_path / "mps"
    pipe.mkdir()
    if mps:
        (pipe / "control").write_text("")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))
    v = _tenant_verdict(_gpu_machine(fake_nvml, **gpu))
    t2, serve = v["mlp-train-gpu1-fp32-b64-t2"], v["mlp-serve-gpu1-fp32-b64-slo10ms-t2"]
    assert not serve.supported and "serve cases run alone" in serve.reason
    if why:
        assert not t2.supported and why in t2.reason
    else:
        assert t2.supported == (not gpu.get("mig"))


def test_a_mig_gpu_refuses_tenants_with_the_reason(fake_nvml, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    m = _gpu_machine(fake_nvml, mig=True)
    case = Case("mlp", "train", "gpu", 1, False, "fp32", False, 64, tenants=2)
    s = tenants.support(case, m)
    assert not s.supported and "MIG" in s.reason


@pytest.mark.parametrize(("mps", "mode"), [(False, "time-slicing"), (True, "mps")])
def test_nvml_says_whether_the_tenants_are_mps_clients_and_what_each_holds(fake_nvml, monkeypatch, tmp_path, mps, mode):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    pids = [4101, 4102]
    fake_nvml([FakeGPU(compute_pids=[] if mps else pids, mps_pids=pids if mps else [])])
    bus = gpus.discover().gpus[0].pci_bus_id
    case = Case("mlp", "train", "gpu", 1, False, "fp32", False, 64, tenants=2)
    seen = tenants.observe(case, bus, pids)
    assert seen["sharing_mode"] == mode
    each = 2**29 if mps else 2**30
    assert seen["tenant_gpu_mem_bytes"] == [each, each] and seen["tenant_gpu_mem_sum_bytes"] == 2 * each
    assert seen["tenant_memory_cap_bytes"] == (80 * 2**30 * 9 // 20) // 2**20 * 2**20
    assert tenants.observe(case, None, pids)["sharing_note"].startswith("not read from NVML")


def test_the_memory_cap_reaches_the_worker_plan_and_the_jax_environment(monkeypatch):
    from bench.profiles import PROFILES
    from bench.protocol import WorkerPlan
    from bench.tenant_run import tenant_plan

    for v in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
        monkeypatch.delenv(v, raising=False)
    case = Case("mlp", "train", "gpu", 1, False, "fp32", False, 64, tenants=4)
    wp = WorkerPlan("r", "smoke", case.device, PROFILES["smoke"], (case,), gpu={"memory_total_bytes": 80 * 2**30})
    capped, _ = tenant_plan(wp, case, {})
    assert capped.gpu["memory_limit_mb"] == int(80 * 2**30 * 0.9 / 4) // 2**20
    jax = Case("mlp", "train", "gpu", 1, False, "fp32", True, 64, backend="jax", tenants=4)
    _, env = tenant_plan(wp, jax, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95"})
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.2250"


@pytest.mark.parametrize(("mode", "low", "high"), [("", 0.5, 2.0), ("serial", 1.3, 100.0)])
def test_the_mix_measures_a_latency_tenant_alone_and_beside_its_training_neighbour(
    tmp_path, monkeypatch, mode, low, high
):
    monkeypatch.setenv("FAKE_TENANT", mode)
    rec, _ = run(tmp_path, mix=True)
    e = rec.info
    assert rec.ok and rec.id == "mlp-infer-cpu-fp32-b1-beside-train-b64", rec.reason
    assert rec.case.neighbour_case().id == "mlp-train-cpu-fp32-b64"
    # one request per round: each round a latency of one 5 ms step, alone
    assert 0.004 < e["alone_latency_p50_s"] < 0.05 and e["latency_samples"] == e["rounds"] > 10
    # a device taking turns makes the request wait: its median latency (one slot's wait, 1.98x when the machine is
    # quiet) rises; the p99s, which a loaded CI machine's sleep overshoots move (1.23x seen), are recorded as read
    assert low < e["latency_p50_s"] / e["alone_latency_p50_s"] < high
    if e["latency_samples"] >= 100 and e["alone_latency_samples"] >= 100:
        assert e["latency_p99_inflation"] == pytest.approx(e["latency_p99_s"] / e["alone_latency_p99_s"])
    else:  # a p99 of fewer than 100 requests is their largest: not recorded, nor its inflation
        assert e["latency_p99_inflation"] is None
        assert None in (e["latency_p99_s"], e["alone_latency_p99_s"])
    assert e["neighbour_samples_per_s"] > 0 and "beside train at batch 64" in e["sharing_verdict"]


def test_the_mix_needs_training_cases_and_follows_each_one():
    with pytest.raises(UserError, match="add train to --modes"):
        plan(RunOptions(profile="smoke", workloads=("mlp",), modes=("infer",), devices=("cpu",), tenant_mix=True), CPU)
    p = plan(
        RunOptions(
            profile="smoke",
            workloads=("mlp",),
            modes=("train", "infer"),
            devices=("cpu",),
            precisions=("fp32",),
            tenant_mix=True,
        ),
        CPU,
    )
    ids = [c.id for c, _ in p]
    assert ids.index("mlp-infer-cpu-fp32-b1-beside-train-b64") == ids.index("mlp-train-cpu-fp32-b64") + 1
    assert all(s.supported for _, s in p)
    assert tenants.parse("2,mix,4") == ((2, 4), True) and tenants.parse("mix") == ((), True)
    with pytest.raises(ValueError, match="counts from 2"):
        tenants.parse("1,mix")


def test_the_sharing_section_escapes_the_gpu_name_and_shows_both_tables(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent / "data"))
    import make_samples

    from bench.report.render import render

    doc = make_samples.hostile()
    gpu = doc["machine_info"]["accelbench"]["gpus"][0]["name"]
    t2 = Case("mlp", "train", "gpu", 1, False, "tf32", False, 1024, tenants=2)
    storage.add_record(doc, make_samples.tenant_record(t2, 150000.0, [0.6, 0.5], gpu, "hostile-run"))
    storage.add_record(
        doc, make_samples.tenant_record(t2.related(tenants=1).mix(), 500.0, [0.5, 0.9], gpu, "hostile-run")
    )
    html = (render([doc], tmp_path / "r") / "index.html").read_text()
    section = html.split("<h2>Sharing one device</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<script>" not in section and "&lt;script&gt;" in section
    assert "STP 1.10, each up to 2x slower" in section and "beside train at batch 1024 (2x)" in section
    assert section.count("<table") == 2 and section.count("<svg") == 1  # the mix has no STP to chart
