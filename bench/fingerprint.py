"""What makes two runs comparable: the machine and software a case's figures depend on.

Read from a results document's ``machine_info`` (and its run's image digest); the history keys
its baselines on it (``bench.history.summarise``), a comparison names its differences
(``bench.report.render``), a merge of shards requires it equal (``bench.storage``), and the
largest-batch search keys its answers on it (``bench.maxbatch``). Pure: no I/O.

One rule for all of them (:func:`differences`): a field only one of two fingerprints has is no
difference. A run has a backend's fields only where it probed that backend, and a field added to
the fingerprint after runs were stored without it (TensorFlow's CPU allocator, 2026-12-07) is
absent from those: neither starts a new baseline, nor stops two shards merging, by itself.
"""

from __future__ import annotations

from typing import Any

# What every case's figures depend on (each key: where machine_info.accelbench keeps it) ...
COMMON = {"driver": "driver_version", "cuda": "cuda_build", "cudnn": "cudnn_build"}
COMMON_KEYS = ("gpus", "gpu_count", *COMMON, "cpu", "image_digest")
# ... and what only one backend's cases do: a JAX upgrade starts a new baseline for the JAX cases and
# leaves the TensorFlow cases' alone. Each key is in a fingerprint only where the run recorded it.
BACKEND_KEYS = {
    "tensorflow": ("tensorflow", "keras", "tf_cpu_allocator"),  # the allocator moves CPU step times by a third
    "jax": ("jax", "jaxlib", "jax_keras"),
    "torch": ("torch", "torch_cuda_build", "torch_keras"),
    "torch-native": ("torch", "torch_cuda_build"),  # no Keras
}
ALL_KEYS = tuple(dict.fromkeys(COMMON_KEYS + tuple(k for ks in BACKEND_KEYS.values() for k in ks)))
LABELS = {
    "driver": "driver",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "tensorflow": "TF",
    "keras": "Keras",
    "tf_cpu_allocator": "TF CPU allocator",
    "jax": "JAX",
    "torch": "torch",
    "torch_cuda_build": "torch CUDA",
}


def machine_fingerprint(doc: dict) -> dict:
    """GPU models and count, driver, CUDA/cuDNN, CPU, image; each probed backend's versions (:data:`BACKEND_KEYS`)."""
    ab = doc.get("machine_info", {}).get("accelbench", {})
    gpus = sorted(str(g.get("name", "?")) for g in ab.get("gpus", []))
    fp: dict[str, Any] = {"gpus": gpus, "gpu_count": len(gpus), **{k: ab.get(src) for k, src in COMMON.items()}}
    fp["cpu"] = ab.get("cpu", {}).get("model")
    fp["image_digest"] = doc.get("run", {}).get("image_digest")
    fp.update({k: ab[k] for k in ALL_KEYS if k not in fp and ab.get(k) is not None})
    return fp


def keys_for(backend: str | None = None) -> tuple[str, ...]:
    """The fields a case of ``backend`` depends on (None: any case's)."""
    return (COMMON_KEYS + BACKEND_KEYS.get(backend, ())) if backend else ALL_KEYS


def differences(new: dict, old: dict, backend: str | None = None) -> list[tuple[str, Any, Any]]:
    """``(field, old value, new value)`` for each field both fingerprints have and disagree on."""
    return [(k, old[k], new[k]) for k in keys_for(backend) if k in new and k in old and new[k] != old[k]]


def describe_differences(new: dict, old: dict) -> list[str]:
    """:func:`differences` of any case as ``field old -> new`` lines."""
    return [f"{k} {was} -> {now}" for k, was, now in differences(new, old)]


def describe_fingerprint(fp: dict) -> str:
    """One line: ``2x NVIDIA H100, driver 550, CUDA 12.3, TF 2.18, Intel Xeon``."""
    names: dict[str, int] = {}
    for g in fp.get("gpus") or []:
        names[g] = names.get(g, 0) + 1
    parts = [", ".join(f"{n}x {k}" for k, n in names.items()) or "no GPU"]
    parts += [f"{label} {fp[key]}" for key, label in LABELS.items() if fp.get(key)]
    parts.append(str(fp.get("cpu") or "?"))
    if fp.get("image_digest"):
        parts.append(f"image {str(fp['image_digest'])[:19]}")
    return ", ".join(parts)
