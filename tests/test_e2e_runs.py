"""Real runs in a subprocess that need no shared smoke run: kill -9, Ctrl-C, a busy machine, CPU branches.

Apart from tests/test_e2e.py (which shares one smoke run), so pytest-xdist can run the two files side by side.
"""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bench import devices, runner, storage
from bench.planning import RunOptions

pytestmark = pytest.mark.slow

RUN_4 = [
    "run",
    "--profile",
    "smoke",
    "--workloads",
    "mlp,cnn",
    "--devices",
    "cpu",
    "--precisions",
    "fp32",
    "--no-report",
]


def start_and_wait_for_a_case(res, **popen):
    """Start a 4-case run in its own process group; return it once the file holds a finished case."""
    p = subprocess.Popen(
        [sys.executable, "-m", "bench", *RUN_4, "--results-dir", str(res)],
        start_new_session=True,
        # Ctrl-C must reach it even where the suite itself runs with SIGINT ignored (a background
        # job, a pytest-xdist worker)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **popen,
    )
    deadline = time.time() + 300
    while time.time() < deadline:
        files = list(res.glob("*.json"))
        if files and json.loads(files[0].read_text())["benchmarks"]:
            return p, files[0]
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    raise AssertionError("no case finished within 300 s")


def test_kill_9_leaves_a_valid_file_with_finished_cases(tmp_path):
    p, f = start_and_wait_for_a_case(tmp_path / "results", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    doc = storage.load(f)
    assert doc["benchmarks"] and doc["run"]["status"] == "running"
    assert len(doc["run"]["planned"]) == 4


def _spin(seconds: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        pass


def test_a_case_run_beside_two_busy_loops_says_the_machine_was_busy(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    loops = [ctx.Process(target=_spin, args=(240.0,), daemon=True) for _ in range(2)]
    for lp in loops:
        lp.start()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--profile", "smoke", "--workloads", "mlp", "--modes", "train"]
            # JAX: the busy check is the harness's, whatever the backend, and JAX starts in a third of
            # TensorFlow's time under the two loops (which slow the tests beside this one while they spin)
            + ["--backend", "jax", "--devices", "cpu", "--precisions", "fp32"]
            + ["--results-dir", str(tmp_path), "--no-report"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for lp in loops:
            lp.terminate()
            lp.join(10)
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = tmp_path.glob("*.json")
    (rec,) = storage.load(path)["benchmarks"]
    e = rec["extra_info"]
    assert e["other_cpu_pct"] >= 20 and e["busy"] is True, e["other_cpu_pct"]
    assert f"busy: other processes used {e['other_cpu_pct']:.0f}% of the CPU" in r.stdout


def test_devices_command_answers_is_tensorflow_using_my_gpu():
    r = subprocess.run([sys.executable, "-m", "bench", "devices"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "CPU: " in r.stdout and "TensorFlow GPUs: 0" in r.stdout and "why none: " in r.stdout
    assert "tiny matmul on /CPU:0: ran on /job:localhost/replica:0/task:0/device:CPU:0 -> ok" in r.stdout
    assert "Precision support:" in r.stdout and "CPU energy (RAPL): " in r.stdout
    # a user's CUDA_DEVICE_ORDER must not make the probe describe other GPUs than the workers use
    env = dict(os.environ, CUDA_DEVICE_ORDER="FASTEST_FIRST")
    j = subprocess.run(
        [sys.executable, "-m", "bench", "devices", "--json"], capture_output=True, text=True, timeout=300, env=env
    )
    info = json.loads(j.stdout)
    assert info["cpu"]["logical_cores"] >= 1 and info["placement"][0]["ok"] is True
    assert info["cuda_device_order"] == "PCI_BUS_ID"


def test_ctrl_c_keeps_finished_cases_and_marks_the_run_interrupted(tmp_path):
    p, f = start_and_wait_for_a_case(tmp_path / "results", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground process group
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130
    assert err.strip().splitlines()[-1] == "accelbench: interrupted; finished cases are saved"
    doc = storage.load(f)
    assert doc["run"]["status"] == "interrupted" and doc["run"]["end"] and doc["benchmarks"]


@pytest.mark.parametrize(
    "flags, bf16",
    [(("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"), "ok"), (("avx2", "fma"), "unsupported")],
    ids=["bf16-units", "avx2-only"],
)
def test_both_cpu_capability_branches_with_faked_cpu_flags(tmp_path, flags, bf16):
    # whatever CPU runs the suite, each branch of the bf16 rule is exercised: the flags are the
    # hardware boundary, faked; the worker and TensorFlow are real (emulated bf16 still computes)
    cpu = dataclasses.replace(devices.cpu_info(), flags=flags)
    machine = devices.Machine(cpu=cpu, nvml=devices.nvml.discover(), tf={})
    # without bf16 units nothing needs measuring: the verdict is recorded and no worker starts
    precisions = ("fp32", "mixed_bfloat16") if bf16 == "ok" else ("mixed_bfloat16",)
    opts = RunOptions(profile="smoke", workloads=("mlp",), modes=("train",), devices=("cpu",), precisions=precisions)
    path = runner.Run.new(opts, machine, tmp_path, ["run"]).execute()
    recs = {storage.case_id_of(r): r["extra_info"] for r in storage.records(storage.load(path))}
    assert len(recs) == len(precisions)
    assert recs["mlp-train-cpu-mixed_bfloat16-b64"]["status"] == bf16
    if bf16 == "unsupported":
        assert "no avx512_bf16 or amx_bf16 in the CPU flags" in recs["mlp-train-cpu-mixed_bfloat16-b64"]["reason"]
    else:
        assert recs["mlp-train-cpu-fp32-b64"]["status"] == "ok"
        assert recs["mlp-train-cpu-mixed_bfloat16-b64"]["math_mode"] == "bf16 compute, float32 variables"


def test_a_worker_that_cannot_set_up_records_every_case_with_the_reason(tmp_path):
    # a virtual GPU split without NVML's memory total cannot be sized: the worker's setup fails,
    # and each of its cases is recorded as an error with that reason (none is lost or retried)
    from bench.cases import Case
    from bench.profiles import PROFILES

    cases = [Case("mlp", m, "gpu", 2, True, "fp32", False, 64) for m in ("train", "infer")]
    plan = {
        "run_id": "r",
        "profile": "smoke",
        "device": {"kind": "gpu", "count": 2, "virtual": True},
        "gpu": {"cuda_ordinals": [0], "pci_bus_ids": [], "memory_total_bytes": None},
        "timing": PROFILES["smoke"].to_dict(),
        "cases": [{"case_id": c.id, **c.to_dict()} for c in cases],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    spool = tmp_path / "spool.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "bench.worker", str(tmp_path / "plan.json"), str(spool)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1  # pytest: tests failed
    lines = [json.loads(x) for x in spool.read_text().splitlines()]
    assert lines[0]["heartbeat"]["phase"] == "starting TensorFlow"
    recs = [x["extra_info"] for x in lines if "extra_info" in x]
    assert [e["case_id"] for e in recs] == [c.id for c in cases]
    for e in recs:
        assert e["status"] == "error"
        assert e["reason"].startswith("worker setup failed: ValueError: cannot size virtual GPUs")
