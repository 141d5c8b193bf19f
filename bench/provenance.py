"""Where a run's results live, and where they came from.

Run ids, the machine, the commit and the CI context, recorded so nothing downstream guesses.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from bench import storage
from bench.devices import Machine
from bench.errors import UserError


def new_run_id() -> str:
    """``YYYYmmdd-HHMMSS-xxxx`` (UTC, random suffix)."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def results_path(results_dir: str | Path, run_id: str) -> Path:
    """Where a run's results live; rejects ids that are not plain names."""
    if not storage.RUN_ID_RE.match(run_id):
        raise UserError(f"run id must be letters, digits, '.', '_' or '-'; got {run_id!r}")
    return Path(results_dir) / f"{run_id}.json"


def machine_info(machine: Machine) -> dict:
    """pytest-benchmark's machine_info plus the accelbench block."""
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

    info = pytest_benchmark_generate_machine_info()
    info["accelbench"] = machine.to_dict()
    return info


def commit_info() -> dict:
    """pytest-benchmark's commit_info of the current folder."""
    from pytest_benchmark.utils import get_commit_info

    return get_commit_info()


def ci_context(environ: Mapping[str, str] | None = None) -> dict:
    """Which testbed and runner ran this, from the environment (nightly CI sets these), so nothing downstream guesses.

    ACCELBENCH_TESTBED (the history key), RUNNER_NAME (GitHub's runner; a sick node in a pool shows
    as a shift confined to its cases), ACCELBENCH_IMAGE_DIGEST (the container image), GITHUB_* (the
    workflow run and the commit it checked out).
    """
    env = os.environ if environ is None else environ
    out: dict = {}
    if env.get("ACCELBENCH_TESTBED"):
        out["testbed"] = env["ACCELBENCH_TESTBED"]
    if env.get("RUNNER_NAME"):
        out["runner_name"] = env["RUNNER_NAME"]
    if env.get("ACCELBENCH_IMAGE_DIGEST"):
        out["image_digest"] = env["ACCELBENCH_IMAGE_DIGEST"]
    if env.get("GITHUB_RUN_ID"):
        server, repo = env.get("GITHUB_SERVER_URL", "https://github.com"), env.get("GITHUB_REPOSITORY", "")
        out["ci"] = {
            "run_id": env["GITHUB_RUN_ID"],
            "sha": env.get("GITHUB_SHA"),
            "ref": env.get("GITHUB_REF"),
            "run_url": f"{server}/{repo}/actions/runs/{env['GITHUB_RUN_ID']}" if repo else None,
        }
    return out


def now() -> str:
    """The time now, UTC, ISO 8601."""
    return datetime.now(timezone.utc).isoformat()
