"""The framework probes' answers, kept for the next run on an unchanged machine and install.

Every ``accelbench run`` asks a child process what TensorFlow (JAX, torch) sees before it plans:
a framework import and GPU initialisation, 5-20 s a framework on the machines measured, paid
again by every run. Its answer changes only with what it is computed from, so it is kept in the
user's cache folder under a key of all of that: the probe's own code, the interpreter, every
folder on the import path (a package installed or removed changes its folder's modification
time), the environment variables frameworks read (``CUDA_*``, ``TF_*``, ``XLA_*``, ``JAX_*``,
``KERAS_*``, the thread counts, the library paths), Keras' config file, the CPUs this process
may run on, NVML's view (driver, GPUs, their limits), the host and its boot. Any change is a
new key and a fresh probe; an answer older than ``MAX_AGE_S`` is probed again too. Only a probe
that succeeded is kept, and ``accelbench devices`` (the command that answers "what does
TensorFlow see?") always probes afresh. ``ACCELBENCH_PROBE_CACHE=off`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

MAX_AGE_S = 24 * 3600.0
ENV_PREFIXES = (
    "CUDA_", "NVIDIA_", "TF_", "XLA_", "JAX_", "KERAS_", "TORCH", "PYTORCH_", "OMP_", "MKL_", "KMP_",
    "ONEDNN_", "DNNL_", "LD_", "PYTHON", "VIRTUAL_ENV", "CONDA_", "HIP_", "ROCR_", "TPU_",
)  # fmt: skip
ENV_NAMES = ("PATH", "HOME", "XDG_CONFIG_HOME")
ENV_IGNORED = ("TF_CONFIG",)  # a cluster's addresses (MultiWorkerMirroredStrategy reads it; no device listing does)


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """On unless ``ACCELBENCH_PROBE_CACHE=off``."""
    return (os.environ if env is None else env).get("ACCELBENCH_PROBE_CACHE", "").lower() != "off"


def root(env: Mapping[str, str] | None = None) -> Path:
    """``probes/`` beside the compile cache in the user's cache folder (``$ACCELBENCH_CACHE_DIR`` first)."""
    from bench.compile_cache import default_root

    return default_root(env).parent / "probes"


def _mtime(path: str | Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _importable(folder: Path, name: str) -> bool:
    """A name in ``folder`` that an import can find: a module, an extension, a .pth file, a regular package."""
    if name.startswith("."):
        return False
    if name.endswith((".py", ".so", ".pyd", ".pth")):
        return True
    return (folder / name / "__init__.py").is_file()


def _folder_state(entry: str) -> object:
    """What an import-path folder is known by: its modification time; the working folder, its importable names.

    ``python -m bench`` puts the working folder first on the path, and a run writes there
    (pytest-benchmark's ``.benchmarks/``, a results folder), which moves its modification time
    without changing what an import finds: the second run of a fresh checkout would probe again.
    There the key is the names an import could find instead (not namespace packages: a bare
    folder named like a framework in the working folder goes unseen).
    """
    folder = Path(entry or ".")
    try:
        if folder.resolve() == Path.cwd().resolve():
            return sorted(n for n in os.listdir(folder) if _importable(folder, n))
    except OSError:
        return None
    return _mtime(folder)


def key(module: str, args: list[str], nvml_view: dict, env: Mapping[str, str] | None = None) -> str:
    """What the probe ``python -m module OUT *args`` answers from, hashed (see the module's docstring)."""
    env = os.environ if env is None else env
    spec = importlib.util.find_spec(module)
    source = Path(spec.origin).read_bytes() if spec and spec.origin else b""
    keras_home = env.get("KERAS_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".keras")
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    parts = {
        "module": module,
        "args": args,
        "source": hashlib.sha256(source).hexdigest(),
        "python": [sys.executable, sys.version],
        "path": [[p, _folder_state(p)] for p in sys.path],
        "env": sorted(
            (k, v) for k, v in env.items() if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and k not in ENV_IGNORED
        ),
        "keras_config": _mtime(Path(keras_home) / "keras.json"),
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "nvml": nvml_view,
        "host": [socket.gethostname(), boot],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def cached(
    module: str,
    args: list[str],
    nvml_view: dict,
    run_probe: Callable[[], dict],
    folder: Path | None = None,
    now: Callable[[], float] = time.time,
) -> tuple[dict, float | None]:
    """The probe's answer and, where it came from the cache, when it was probed (else None).

    ``run_probe`` runs the child and raises where it fails (nothing is kept then). A cache folder
    that cannot be read or written only costs the probe.
    """
    folder = root() if folder is None else folder
    path = folder / f"{module.rsplit('.', 1)[-1]}-{key(module, args, nvml_view)[:32]}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        kept = json.loads(path.read_text())
        if 0 <= now() - float(kept["probed_at"]) <= MAX_AGE_S and isinstance(kept["answer"], dict):
            return kept["answer"], float(kept["probed_at"])
    answer = run_probe()
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".probe-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"probed_at": now(), "answer": answer}, f)
            os.replace(tmp, path)  # whole or not at all: two runs probing at once both write a full answer
        except OSError:
            os.unlink(tmp)
            raise
    return answer, None
