"""What makes two runs comparable: the machine and software a case's figures depend on.

Read from a results document's ``machine_info`` (and its run's image digest); the history keys
its baselines on it (``bench.history.summarise``), a comparison names its differences
(``bench.report.render``), a merge of shards requires it equal (``bench.storage``), and the
largest-batch search keys its answers on it (``bench.maxbatch``). Pure: no I/O.
"""

from __future__ import annotations


def machine_fingerprint(doc: dict) -> dict:
    """What makes two nights comparable: GPU models and count, driver, CUDA/cuDNN, CPU, image, each backend's versions.

    And TensorFlow's CPU allocator where the run recorded it (``bench.backends.tf_cpu_allocator``: it
    moves CPU step times by a third); a run from before it was recorded has no such key.
    """
    ab = doc.get("machine_info", {}).get("accelbench", {})
    gpus = sorted(str(g.get("name", "?")) for g in ab.get("gpus", []))
    fp = {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "driver": ab.get("driver_version"),
        "cuda": ab.get("cuda_build"),
        "cudnn": ab.get("cudnn_build"),
        "tensorflow": ab.get("tensorflow"),
        "keras": ab.get("keras"),
        "jax": ab.get("jax"),
        "jaxlib": ab.get("jaxlib"),
        "jax_keras": ab.get("jax_keras"),
        "cpu": ab.get("cpu", {}).get("model"),
        "image_digest": doc.get("run", {}).get("image_digest"),
    }
    if ab.get("tf_cpu_allocator"):  # recorded since 2026-12-07
        fp["tf_cpu_allocator"] = ab["tf_cpu_allocator"]
    return fp


def describe_fingerprint(fp: dict) -> str:
    """One line: ``2x NVIDIA H100, driver 550, CUDA 12.3, TF 2.18, Intel Xeon``."""
    names: dict[str, int] = {}
    for g in fp.get("gpus") or []:
        names[g] = names.get(g, 0) + 1
    gpus = ", ".join(f"{n}x {k}" for k, n in names.items()) or "no GPU"
    parts = [gpus]
    for key, label in (
        ("driver", "driver"),
        ("cuda", "CUDA"),
        ("cudnn", "cuDNN"),
        ("tensorflow", "TF"),
        ("keras", "Keras"),
        ("tf_cpu_allocator", "TF CPU allocator"),
        ("jax", "JAX"),
    ):
        if fp.get(key):
            parts.append(f"{label} {fp[key]}")
    parts.append(str(fp.get("cpu") or "?"))
    if fp.get("image_digest"):
        parts.append(f"image {str(fp['image_digest'])[:19]}")
    return ", ".join(parts)
