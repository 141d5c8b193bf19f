"""Keras backends as the harness sees them: which are installed, and each worker's environment.

Pure (imports no framework): the parent plans and starts workers with these. Each worker
imports one backend module (:func:`make`): :mod:`bench.backends.tf_backend` (TensorFlow,
``tf.distribute``), :mod:`bench.backends.jax_backend` (JAX, ``keras.distribution``),
:mod:`bench.backends.torch_backend` (Keras on torch) or :mod:`bench.backends.torch_native` (the
same models in plain PyTorch, the reference a PyTorch user trusts), which share one surface
(:class:`bench.backends.base.Backend`) so :mod:`bench.worker` measures them the same way.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from bench.cases import BACKENDS, TORCH_BACKENDS, DeviceConfig
from bench.errors import UserError

# what pip installs for each backend (the module a worker imports)
MODULE = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch", "torch-native": "torch"}
INSTALL_HINT = {
    "tensorflow": "pip install accelbench",
    "jax": "pip install 'accelbench[jax]'",
    "torch": "pip install 'accelbench[torch]'",
    "torch-native": "pip install 'accelbench[torch]'",
}
NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "Keras on torch", "torch-native": "native PyTorch"}


def installed(backend: str) -> bool:
    """Whether ``backend`` can be imported here (looked up without importing it)."""
    try:
        return importlib.util.find_spec(MODULE[backend]) is not None
    except (ImportError, ValueError):  # a finder that refuses it: not importable here either
        return False


def resolve(choice: str) -> tuple[str, ...]:
    """``--backend``: one backend or a comma list (each must be installed), or ``all`` = each installed one."""
    if choice == "all":
        found = tuple(b for b in BACKENDS if installed(b))
        if not found:
            raise UserError("--backend all: none of TensorFlow, JAX, torch is installed (pip install accelbench)")
        return found
    chosen = names(choice)
    for b in chosen:
        if not installed(b):
            raise UserError(f"--backend {b}: {MODULE[b]} is not installed ({INSTALL_HINT[b]})")
    return chosen


def described() -> tuple[str, ...]:
    """The backends ``accelbench devices`` asks: TensorFlow where installed, else JAX (else torch); torch beside."""
    found = ("tensorflow",) if installed("tensorflow") else resolve("all")[:1]
    return found + (("torch",) if installed("torch") and "torch" not in found else ())


def names(choice: str) -> tuple[str, ...]:
    """``--backend`` as backends in the suite's order (``all`` kept as it is); one line for an unknown name."""
    if choice == "all":
        return ("all",)
    chosen = tuple(b.strip() for b in choice.split(","))
    for b in chosen:
        if b not in BACKENDS:
            raise UserError(f"--backend takes {', '.join(BACKENDS)}, a comma list of them, or all; got {b!r}")
    return tuple(b for b in BACKENDS if b in chosen)


def tf_cpu_allocator(user_env: Mapping[str, str] | None = None) -> str:
    """The CPU allocator TensorFlow workers run with: ``"bfc"`` unless ``TF_CPU_ALLOCATOR_USE_BFC`` says otherwise.

    TensorFlow keeps allocator stats on the CPU (get_memory_info: the case's memory peak) only
    with its BFC allocator there: without it some CPUs gave peaks, others "Allocator stats not
    available". So workers get ``TF_CPU_ALLOCATOR_USE_BFC=true`` where ``user_env`` (default: this
    process's) does not set it. It changes speed, not only bookkeeping: the default allocator pays
    page faults for every fresh large buffer (docs/benchmarks.md: ResNet-50 training, the copy
    probe), so the choice is recorded (machine_info, the history's fingerprint). TensorFlow reads
    the variable as a bool: ``1`` / ``true`` on, ``0`` / ``false`` (or anything else) off.
    """
    value = _tf_cpu_bfc(os.environ if user_env is None else user_env).strip().lower()
    return "bfc" if value in ("1", "true") else "default"


def _tf_cpu_bfc(user: Mapping[str, str]) -> str:
    """The ``TF_CPU_ALLOCATOR_USE_BFC`` a TensorFlow worker gets: the user's, else ``true``."""
    return user.get("TF_CPU_ALLOCATOR_USE_BFC") or "true"


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
    env = {"KERAS_BACKEND": "torch" if backend in TORCH_BACKENDS else backend, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if backend in TORCH_BACKENDS:  # a CPU case never initialises CUDA; a GPU case sees exactly its GPUs
        uuids = list((gpu_plan or {}).get("uuids") or [])
        if device.kind == "cpu":
            env.update(CUDA_VISIBLE_DEVICES="", KERAS_TORCH_DEVICE="cpu")
        elif uuids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(uuids[: device.count])
        return env
    if backend != "jax":
        env["TF_CPU_ALLOCATOR_USE_BFC"] = _tf_cpu_bfc(os.environ if user_env is None else user_env)
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
