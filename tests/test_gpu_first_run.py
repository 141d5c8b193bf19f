"""docs/gpu_first_run.py, the script prepared for a borrowed GPU machine, reaches its summary."""

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "docs" / "gpu_first_run.py"


def test_the_main_block_comes_after_every_definition():
    """The first GPU run ended in a NameError: a function defined below ``if __name__ == "__main__"``."""
    body = ast.parse(SCRIPT.read_text()).body
    last = body[-1]
    assert isinstance(last, ast.If) and "__main__" in ast.unparse(last.test)
    assert sum(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in body) == 1


def test_the_summary_is_written_from_a_real_gpu_run(tmp_path):
    """Its summary over the H200's own smoke run and tenants files: every finding has a verdict."""
    spec = importlib.util.spec_from_file_location("gpu_first_run", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "results").mkdir()
    (tmp_path / "tenants").mkdir()
    shutil.copy(ROOT / "tests" / "data" / "h200" / "smoke-cpu-and-gpu1.json", tmp_path / "results")
    shutil.copy(ROOT / "tests" / "data" / "h200" / "tenants-mix.json", tmp_path / "tenants")
    shutil.copy(ROOT / "tests" / "data" / "h200" / "nvml.json", tmp_path / "nvml.json")
    summary = mod.write_summary(tmp_path, False, False, time.monotonic(), 0, {}, (None, "timed out"), 0)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["findings"].keys() == summary["findings"].keys() >= {"1", "4", "5", "7", "10", "tenants"}
    assert all(v["verdict"] for v in on_disk["findings"].values())
    assert on_disk["findings"]["tenants"]["verdict"] in ("ran", "CHECK")


def test_without_an_out_dir_it_says_how_to_call_it():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage: python docs/gpu_first_run.py OUT_DIR" in r.stderr
