import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_nvml import Clock, FakeGPU, FakeNVML  # noqa: E402

DATA = Path(__file__).parent / "data"


@pytest.fixture
def clock():
    return Clock(100.0)


@pytest.fixture
def fake_nvml(monkeypatch, clock):
    """Install a fake NVML with the given GPUs: ``fake_nvml([FakeGPU(...), ...])``."""

    def install(gpus=None, init_error=None, binding=None):
        fake = FakeNVML(gpus if gpus is not None else [FakeGPU()], clock, init_error, binding)
        monkeypatch.setattr("bench.telemetry.nvml.pynvml", fake)
        return fake

    return install


# A real smoke run (TensorFlow on this CPU, logical devices), shared by the e2e tests and the
# nightly rehearsal (session scope: one TensorFlow run for both).
SMOKE_ARGS = [
    "run",
    "--profile",
    "smoke",
    "--workloads",
    "mlp",
    "--precisions",
    "fp32,mixed_bfloat16",
    "--virtual-devices",
    "2",
    "--xla",
    "both",
    "-k",
    "not (xla and bfloat16)",
]


@pytest.fixture(scope="session")
def smoke(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            *SMOKE_ARGS,
            "--results-dir",
            str(d / "results"),
            "--reports-dir",
            str(d / "reports"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        # what the nightly workflow sets: recorded in the run block (the history's testbed key)
        env={**os.environ, "ACCELBENCH_TESTBED": "rehearsal-cpu", "RUNNER_NAME": "local-runner"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = (d / "results").glob("*.json")
    return d, path, r
