"""A JAX-only install (no TensorFlow importable): devices, devices --check and run --backend jax work."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import capability
from bench.devices import cpu_info

pytest.importorskip("jax")
pytestmark = pytest.mark.slow

# what a JAX-only install looks like to Python: no module named 'tensorflow' nor 'torch' (this process and
# every child it starts, as the worker processes are)
HIDE_TF = """
import sys


class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "torch"):  # torch too: its paths are test_torch.py's
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTensorFlow())
"""


def accelbench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(HIDE_TF)
    root = Path(__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(root)])}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path
    )


def test_the_shim_really_hides_tensorflow(tmp_path):
    r = accelbench(tmp_path, "run", "--backend", "tensorflow", "--profile", "smoke")
    assert r.returncode == 2 and "tensorflow is not installed" in r.stderr


def test_devices_describes_a_jax_only_machine(tmp_path):
    r = accelbench(tmp_path, "devices")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "TensorFlow: not installed" in r.stdout and "JAX " in r.stdout and "Traceback" not in r.stderr
    assert "Precision support:" in r.stdout


def test_devices_check_runs_the_cpu_paths_on_jax_and_names_the_missing_backend(tmp_path):
    r = accelbench(tmp_path, "devices", "--check", "--json", "--results-dir", str(tmp_path / "check"))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {row["path"]: row for row in json.loads(r.stdout)["rows"]}
    assert rows["TensorFlow"]["result"] == "not available" and "ran on JAX" in rows["TensorFlow"]["detail"]
    assert rows["cpu fp32 (JAX)"]["result"] == "pass"
    assert rows["cpu2-virtual data parallel (JAX)"]["result"] == "pass"
    bf16 = capability.cpu_precision("mixed_bfloat16", cpu_info().flags, "jax").supported  # this CPU's flags
    assert rows["cpu mixed_bfloat16 (JAX)"]["result"] == ("pass" if bf16 else "not available")
    assert all(row["result"] != "FAIL" for row in rows.values())
