"""Keras backends as the harness sees them: which are installed, and each worker's environment.

Pure (imports no framework): the parent plans and starts workers with these. Each worker
imports one backend module: :mod:`bench.backends.tf_backend` (TensorFlow, ``tf.distribute``) or
:mod:`bench.backends.jax_backend` (JAX, ``keras.distribution``), which share one surface
(:class:`bench.backends.base.Backend`) so :mod:`bench.worker` measures both the same way.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from bench.cases import BACKENDS, DeviceConfig
from bench.errors import UserError

# what pip installs for each backend (the module a worker imports)
MODULE = {"tensorflow": "tensorflow", "jax": "jax"}
INSTALL_HINT = {"tensorflow": "pip install accelbench", "jax": "pip install 'accelbench[jax]'"}


def installed(backend: str) -> bool:
    """Whether ``backend`` can be imported here (looked up without importing it)."""
    try:
        return importlib.util.find_spec(MODULE[backend]) is not None
    except (ImportError, ValueError):  # a finder that refuses it: not importable here either
        return False


def resolve(choice: str) -> tuple[str, ...]:
    """``--backend``: one backend (it must be installed), or ``all`` = each installed one."""
    if choice == "all":
        found = tuple(b for b in BACKENDS if installed(b))
        if not found:
            raise UserError("--backend all: neither TensorFlow nor JAX is installed (pip install accelbench)")
        return found
    if choice not in BACKENDS:
        raise UserError(f"--backend must be one of {', '.join(BACKENDS)}, all; got {choice!r}")
    if not installed(choice):
        raise UserError(f"--backend {choice}: {MODULE[choice]} is not installed ({INSTALL_HINT[choice]})")
    return (choice,)


JAX_MEM_FRACTION = "0.95"  # of each GPU's memory a JAX worker may pool (XLA's default cap is 0.75)
MEM_FRACTION_VARS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")  # jaxlib refuses both set


def worker_env(
    backend: str, device: DeviceConfig, gpu_plan: Mapping | None = None, user_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment variables a worker of ``backend`` on ``device`` starts with (set before any import).

    Keras picks its backend at import from KERAS_BACKEND, so it is always set (a user's
    ``KERAS_BACKEND=jax`` must not turn a TensorFlow worker into a JAX one). JAX workers: CPU
    cases see only the CPU platform (a GPU box does not initialise CUDA for them) with exactly
    ``count`` CPU devices (virtual ones for ``cpuN-virtual``); GPU cases see exactly their GPUs,
    named by NVML UUID, and allocate on demand. Without preallocation XLA still caps its pool at
    75% of the GPU (gpu-review-2 finding 4), where TensorFlow grows into nearly all of it: JAX
    workers get a memory fraction of 0.95 unless ``user_env`` (default: this process's) sets
    either spelling of it, which is left alone (jaxlib refuses both).
    """
    env = {"KERAS_BACKEND": backend, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if backend != "jax":
        return env
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if device.kind == "cpu":
        env.update(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=str(device.count))
    else:
        env["JAX_PLATFORMS"] = "cuda,cpu"  # cpu stays for host-side arrays
        if not any(v in (os.environ if user_env is None else user_env) for v in MEM_FRACTION_VARS):
            # the older spelling: every jaxlib from our lower bound on reads it (newer ones read both)
            env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = JAX_MEM_FRACTION
        uuids = list((gpu_plan or {}).get("uuids") or [])
        if uuids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(uuids[: device.count])
    return env
