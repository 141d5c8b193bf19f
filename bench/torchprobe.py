"""Run in a child process: what PyTorch sees (``python -m bench.torchprobe OUT.json``).

The torch counterpart of :mod:`bench.jaxprobe`: versions, whether this build has CUDA, the GPUs
CUDA shows it (in PCI bus order, as the workers use) and, where it sees none, why. Imports
neither TensorFlow nor JAX.
"""

from __future__ import annotations

import json
import os
import sys


def no_gpu_reason(cuda_build: str | None, error: str | None) -> str:
    """Why torch sees no GPU, from its build and CUDA's own error (the words the report prints)."""
    if cuda_build is None:
        return "this torch is a CPU-only build (torch.version.cuda is None)"
    return f"a CUDA {cuda_build} build, but torch.cuda.is_available() is False" + (f": {error}" if error else "")


def probe() -> dict:
    """torch/keras versions, the CUDA build and torch's GPUs (name, compute capability, bus id)."""
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    import warnings

    import torch

    out: dict = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "gpus": []}
    try:
        import importlib.metadata as md

        out["keras"] = md.version("keras")
    except Exception:  # keras missing: the worker's import says so with the reason
        out["keras"] = None
    error = None
    with warnings.catch_warnings(record=True) as caught:  # CUDA's "driver too old" arrives as a warning
        warnings.simplefilter("always")
        try:
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception as e:  # a broken driver: the reason, not a crash
            n, error = 0, " ".join(str(e).split())[:300]
    if not n:
        error = error or " ".join(" ".join(str(w.message) for w in caught).split())[:300] or None
        out["gpu_reason"] = no_gpu_reason(out["cuda_build"], error)
    for i in range(n):
        p = torch.cuda.get_device_properties(i)
        bus, dom, dev = (getattr(p, f"pci_{k}_id", None) for k in ("bus", "domain", "device"))
        out["gpus"].append(
            {
                "torch_index": i,
                "name": p.name,
                "compute_capability": [p.major, p.minor],
                "memory_total_bytes": int(p.total_memory),
                "pci_bus_id": None if None in (bus, dom, dev) else f"{dom:08x}:{bus:02x}:{dev:02x}.0",
            }
        )
    return out


def main() -> int:
    """Write the probe as JSON to argv[1]."""
    from bench.backends.hiding import hide_unused

    hide_unused("torch")  # as in its workers: a quicker start
    with open(sys.argv[1], "w") as f:
        json.dump(probe(), f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
