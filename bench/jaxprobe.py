"""Run in a child process: what JAX sees (``python -m bench.jaxprobe OUT.json``).

The JAX counterpart of :mod:`bench.tfprobe`, kept out of the parent for the same reasons: the
parent never initialises a framework (nor claims GPU memory). Imports neither TensorFlow nor
anything that would.
"""

from __future__ import annotations

import json
import os
import sys


def parse_cc(text: object) -> list[int] | None:
    """JAX's ``compute_capability`` (``"9.0"``) -> ``[9, 0]``; None where absent or malformed."""
    try:
        major, minor = (int(x) for x in str(text).split("."))
    except ValueError:
        return None
    return [major, minor]


def probe() -> dict:
    """jax/jaxlib/keras versions and JAX's GPUs (CUDA order = PCI bus order, as the workers use)."""
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the probe must not grab 75% of a GPU
    import jax
    import jaxlib

    out: dict = {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", None), "gpus": []}
    try:
        import importlib.metadata as md

        out["keras"] = md.version("keras")
    except Exception:  # keras missing: the worker's import says so with the reason
        out["keras"] = None
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as e:  # no GPU backend: JAX says why (no CUDA plugin, no driver)
        gpus, out["gpu_reason"] = [], " ".join(str(e).split())[:300]
    for i, d in enumerate(gpus):
        out["gpus"].append(
            {
                "jax_index": i,
                "name": getattr(d, "device_kind", str(d)),
                "compute_capability": parse_cc(getattr(d, "compute_capability", None)),
                "pci_bus_id": None,
            }
        )
    return out


def main() -> int:
    """Write the probe as JSON to argv[1]."""
    from bench.backends.hiding import hide_unused

    hide_unused("jax")  # as in its workers: a quicker start
    with open(sys.argv[1], "w") as f:
        json.dump(probe(), f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
