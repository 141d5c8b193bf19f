"""Running ``accelbench`` in a subprocess, as the end-to-end tests and the clients checks do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_bench(args: list[str], out: Path, timeout: float = 900, env: dict | None = None):
    """``accelbench ARGS`` in a subprocess, results and reports under ``out``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            *args,
            "--results-dir",
            str(out / "results"),
            "--reports-dir",
            str(out / "reports"),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
