import fcntl
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_nvml import Clock, FakeGPU, FakeNVML  # noqa: E402
from run_bench import run_bench  # noqa: E402

DATA = Path(__file__).parent / "data"

# JAX runs of the tests keep their compile cache in the machine's temporary folder, never the user's cache;
# no run of the tests starts second workers unless it asks (--repeats): the CI's time. tests/test_runner.py
# and the JAX run (tests/test_jax.py) measure them
os.environ.setdefault("ACCELBENCH_REPEATS", "0")
os.environ.setdefault("ACCELBENCH_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"accelbench-tests-{os.getuid()}"))

# tests/clients/ checks outputs with third-party clients (node, Java, Chromium) on a fresh smoke
# run: `nox -s clients` runs it (CI too); the plain test run leaves it out
collect_ignore = [] if os.environ.get("ACCELBENCH_CLIENTS") == "1" else ["clients"]


# Longest files first (measured: tests/durations.json). nox -s tests runs two workers, each taking a
# whole file at a time (--dist loadfile); in xdist's own order (most tests first) the few-test files
# that start real runs came last, and one worker ran a 6-minute file alone at the end
# (--no-loadscope-reorder keeps this order)
FILE_SECONDS = {k: v for k, v in json.loads((Path(__file__).parent / "durations.json").read_text()).items() if k != "_"}


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.name, 0))  # stable: a file's own order is kept


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


# A real smoke run (TensorFlow on this CPU, logical devices), shared by the e2e tests, the
# nightly rehearsal and the JAX report test: one TensorFlow run for the whole session. Under
# pytest-xdist (nox -s tests runs two workers) the first worker to need it runs it, under a file
# lock in the session's shared temporary folder; the others wait and read it.
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
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # pytest-N/: this session's workers
    d = shared / "e2e-smoke"
    with open(shared / "e2e-smoke.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = d / "done.json"
        if not done.exists():
            # what the nightly workflow sets: recorded in the run block (the history's testbed key)
            env = {**os.environ, "ACCELBENCH_TESTBED": "rehearsal-cpu", "RUNNER_NAME": "local-runner"}
            r = run_bench(SMOKE_ARGS, d, env=env)
            done.write_text(json.dumps({"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr}))
    r = SimpleNamespace(**json.loads(done.read_text()))
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = (d / "results").glob("*.json")
    return d, path, r
