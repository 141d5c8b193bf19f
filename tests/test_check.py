"""``accelbench devices --check`` with the hardware faked at its boundary: a machine with GPUs
(discovery), the fake NVML, and a stand-in worker where a GPU would run the case."""

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_nvml import FakeGPU
from test_capability import machine

from bench import check, cli, devices, watchdog
from bench.telemetry import gpus, idle
from bench.telemetry.idle import idle_power

A100 = ("NVIDIA A100-SXM4-40GB", (8, 0))
BUS0 = "00000000:00:00.0"  # the bus id test_capability.machine gives TF GPU 0


@pytest.fixture
def two_gpu_box(monkeypatch, fake_nvml, clock):
    monkeypatch.setattr(watchdog, "WORKER", [sys.executable, str(Path(__file__).with_name("fake_worker.py"))])
    fake_nvml([FakeGPU(uuid=f"GPU-{i}", bus_id=f"00000000:{i:02X}:00.0", idle_w=60.0, load_w=400.0) for i in range(2)])
    m = machine(tf_gpus=[A100, A100], nvml_gpus=2)
    m.loaded = []  # the GPU each load ran on
    monkeypatch.setattr(check, "gpu_load", lambda seconds, uuid: (m.loaded.append(uuid), contextlib.nullcontext())[1])
    monkeypatch.setattr(check, "nvml_row", _fake_clock_nvml_row(check.nvml_row, clock))
    monkeypatch.setattr(idle, "idle_power", lambda g: idle_power(g, clock=clock, sleep=clock.advance))
    return m


def _fake_clock_nvml_row(real, clock):
    def row(source, load, seconds=check.WINDOW_S):
        return real(source, load, seconds, clock=clock, sleep=clock.advance)

    return row


def test_every_path_of_a_two_gpu_machine_passes(two_gpu_box, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_WORKER", "fail:nothing")
    rows = {r.path: r for r in check.check(two_gpu_box, tmp_path)}
    assert {p: r.result for p, r in rows.items() if r.result != "pass"} == {}
    for path in ("gpu1 tf32", "gpu1 XLA mixed_float16", "gpu2 all GPUs, XLA + loss scaling", "gpu2-virtual split"):
        assert rows[path].result == "pass"
    nv = rows["NVML 10 s window under load"]
    assert nv.detail.startswith("counter 4000.0 J vs integrated instant power 4000.0 J (+0.0%) over 10.0 s")
    assert two_gpu_box.loaded == ["GPU-0"]  # the load runs on the GPU the window samples (TF GPU 0, bus 00)


def test_the_load_child_sees_only_the_sampled_gpu(tmp_path, monkeypatch):
    """gpu-review-2 finding 7: the load ran on CUDA's device 0 (FASTEST_FIRST) whatever was sampled."""
    seen = tmp_path / "env.json"
    probe = f"import json, os, time; json.dump(dict(os.environ), open({str(seen)!r}, 'w')); time.sleep(30)"
    monkeypatch.setattr(check, "LOAD", [sys.executable, "-c", probe])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # the user's, replaced for the load
    with check.gpu_load(0.5, "GPU-abc"):
        pass
    env = json.loads(seen.read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-abc" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_broken_gpu_path_fails_the_check_and_is_named(two_gpu_box, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_WORKER", "fail:gpu2-mixed_float16-xla")
    monkeypatch.setattr(devices, "discover", lambda check=False, backends=("tensorflow",): two_gpu_box)
    rc = cli.main(["devices", "--check", "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert err.strip().splitlines()[-1] == "FAILED: gpu2 all GPUs, XLA + loss scaling"
    (line,) = [ln for ln in out.splitlines() if ln.startswith("gpu2 all GPUs, XLA")]
    assert "FAIL" in line and "error: InternalError: NCCL operation ncclAllReduce failed" in line


def test_counter_and_integrated_power_that_disagree_fail_the_nvml_row(monkeypatch, fake_nvml, clock):
    fake = fake_nvml([FakeGPU(bus_id="00000000:00:00.0", load_w=400.0)])
    real_energy = fake.nvmlDeviceGetTotalEnergyConsumption
    # a counter reading half of what the instant-power samples integrate to
    monkeypatch.setattr(fake, "nvmlDeviceGetTotalEnergyConsumption", lambda h: real_energy(h) // 2)
    row = check.nvml_row(gpus.open_gpus_by_bus_id([BUS0]), contextlib.nullcontext, clock=clock, sleep=clock.advance)
    assert row.result == "FAIL" and "(+" in row.detail


def test_nvml_row_without_gpu_telemetry_is_not_available():
    row = check.nvml_row(gpus.EmptyGPUs("NVML library not found"), contextlib.nullcontext)
    assert (row.result, row.detail) == ("not available", "NVML library not found")


def test_the_nvml_check_script_runs_where_only_nvidia_ml_py_is_installed(tmp_path):
    """gpu-review-2 finding 11: docs/gpu_nvml_check.py failed to import without psutil."""
    script = Path(__file__).parents[1] / "docs" / "gpu_nvml_check.py"
    out = tmp_path / "out.json"
    code = (
        "import importlib.abc, runpy, sys\n"
        "class NoPsutil(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'psutil' or name.startswith('psutil.'):\n"
        "            raise ModuleNotFoundError('psutil hidden')\n"
        "sys.meta_path.insert(0, NoPsutil())\n"
        f"sys.argv = ['gpu_nvml_check.py', {str(out)!r}]\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "psutil" not in r.stderr, r.stderr[-2000:]
    found = json.loads(out.read_text())["discovery"]
    if found["reason"] or not found["gpus"]:  # this machine: no GPU, said so, exit 1
        assert r.returncode == 1 and "no GPU to check" in r.stdout
    else:
        assert r.returncode == 0, r.stderr[-2000:]


def test_reference_runs_the_published_configurations_of_this_gpu_and_keeps_a_report_ready_file(
    two_gpu_box, tmp_path, monkeypatch
):
    """issue 17 item 4: `devices --check --reference` on an A100 40GB runs its published ResNet-50 setups."""
    from bench import storage
    from bench.report.render import html_report

    monkeypatch.setenv("FAKE_WORKER", "fail:nothing")  # every case at the fake worker's 6400 samples/s
    cases = check.reference_cases("NVIDIA A100-SXM4-40GB", "tensorflow")
    assert {c.id for c in cases} >= {
        "cnn-train-gpu1-tf32-xla-b256",
        "cnn-infer-gpu1-mixed_float16-b64",
        "cnn-infer-gpu1-tf32-b1",
    }
    assert all(c.workload == "cnn" and c.device_count == 1 and not c.virtual for c in cases)
    # JAX always compiles: it can match only the XLA rows
    assert check.reference_cases("NVIDIA A100-SXM4-40GB", "jax") == [c.related(backend="jax") for c in cases if c.xla]
    rows = check.run_reference(two_gpu_box, tmp_path)
    train = next(r for r in rows if r.path == "published figures: resnet50_v1.5 train tf32 + XLA b256")
    # 6400 img/s against NVIDIA's 909: far above, so the configurations are said to differ (not a failure)
    assert train.result == "pass" and "7.04x of the published 909 img/s" in train.detail
    assert "CHECK THE CONFIGURATIONS ARE EQUAL" in train.detail
    assert len([r for r in rows if r.path.startswith("published figures: ")]) == len(cases)
    (kept,) = tmp_path.glob("*.json")
    doc = storage.load(kept)
    assert doc["run"]["profile"] == "standard" and rows[-1].detail.startswith(str(kept))
    assert "Against published figures" in html_report([doc]) and "7.04x" in html_report([doc])


def test_reference_says_why_not_where_nothing_can_be_compared(two_gpu_box, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(type(two_gpu_box), "gpu_name", lambda self, backend="tensorflow": "NVIDIA L4")
    (row,) = check.run_reference(two_gpu_box, tmp_path)
    assert (row.result, row.detail) == ("not available", "no published figure for this GPU (NVIDIA L4)")
    cpu = machine()
    (row,) = check.run_reference(cpu, tmp_path)
    assert row.result == "not available" and row.detail == cpu.no_gpu_reason()
    assert cli.main(["devices", "--reference"]) == 2  # --reference belongs to --check: one line, no traceback
    assert capsys.readouterr().err.strip() == (
        "accelbench: error: --reference runs with --check: accelbench devices --check --reference"
    )
