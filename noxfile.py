"""accelbench's sessions: ``nox -s bench``, ``nox -s tests``, ``nox -s lint``, ``nox -s report``."""

import os

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests", "lint"]
nox.options.reuse_venv = "yes"

PYPROJECT = nox.project.load_toml("pyproject.toml")
# ACCELBENCH_EXTRAS=cuda nox -s bench installs TensorFlow with its CUDA libraries (GPU machines).
PROJECT = f".[{os.environ['ACCELBENCH_EXTRAS']}]" if os.environ.get("ACCELBENCH_EXTRAS") else "."


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Run the benchmark matrix, print the summary table, write the report. Args go to `accelbench run`."""
    session.install(PROJECT)
    session.run("accelbench", "run", *session.posargs)


@nox.session(default=False)
def report(session: nox.Session) -> None:
    """Re-render reports: nox -s report -- results/RUN.json [--baseline B.json] [--out DIR]."""
    session.install(".")
    session.run("accelbench", "report", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (real TensorFlow on CPU; fake NVML at the hardware boundary)."""
    session.install(".", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("pytest", "--benchmark-disable", *session.posargs)  # timing is not what the tests check


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check) and mypy on bench/ and workloads/."""
    session.install(".", *nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", "bench", "workloads", "tests", "noxfile.py")
    session.run("ruff", "format", "--check", "bench", "workloads", "tests", "noxfile.py")
    session.run("mypy", "bench", "workloads")
