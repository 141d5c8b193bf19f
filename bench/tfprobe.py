"""Run in a child process: what TensorFlow sees, and where a tiny computation really runs.

``python -m bench.tfprobe OUT.json [--check]``. Kept out of the parent so the parent never
initialises TensorFlow (and never claims GPU memory or fixes the device configuration).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

_DESC = re.compile(r"(?:^|,\s*)([a-z ]+):\s*([^,]+)")


def parse_gpu_desc(desc: str) -> dict:
    """TensorFlow's ``physical_device_desc`` of a GPU -> cuda ordinal, name, PCI bus id, cc.

    E.g. ``device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute
    capability: 9.0``. Missing parts are None.
    """
    fields = {k.strip(): v.strip() for k, v in _DESC.findall(desc or "")}
    cc = fields.get("compute capability")
    try:
        major, minor = (int(x) for x in cc.split(".")) if cc else (None, None)
    except ValueError:
        major = minor = None
    ordinal = fields.get("device")
    return {
        "cuda_ordinal": int(ordinal) if ordinal and ordinal.isdigit() else None,
        "name": fields.get("name"),
        "pci_bus_id": fields.get("pci bus id"),
        "compute_capability": [major, minor] if major is not None else None,
    }


def tf_gpu_descs() -> list[dict]:
    """The GPUs TensorFlow really created, in its own order (GPU:0, GPU:1, ...), parsed.

    Unlike ``list_physical_devices``, this leaves out GPUs TensorFlow ignores (fewer SMs than
    TF_MIN_GPU_MULTIPROCESSOR_COUNT, compute capability too low). Initialises the GPUs.
    """
    from tensorflow.python.client import device_lib

    return [
        parse_gpu_desc(d.physical_device_desc)
        for d in device_lib.list_local_devices(session_config=growth_config())
        if d.device_type == "GPU"
    ]


def growth_config() -> Any:
    """A session config whose GPU allocators grow on demand.

    ``list_local_devices()`` with the default config creates every GPU's allocator without
    growth; the first tensor later placed on a GPU then reserves nearly all of its free memory
    (tensorflow/tensorflow#8021), which on a shared machine takes it from other tenants
    (gpu-review-2 finding 9).
    """
    import tensorflow as tf

    return tf.compat.v1.ConfigProto(gpu_options=tf.compat.v1.GPUOptions(allow_growth=True))


def probe(check: bool) -> dict:
    """TensorFlow/Keras versions, CUDA build info, visible GPUs, and with ``check`` placements."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the order the workers use, whatever the user set
    import keras
    import tensorflow as tf

    info = tf.sysconfig.get_build_info()
    out: dict = {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "built_with_cuda": bool(tf.test.is_built_with_cuda()),
        "cuda_build": info.get("cuda_version"),
        "cudnn_build": info.get("cudnn_version"),
        "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
        "cuda_device_order": os.environ["CUDA_DEVICE_ORDER"],
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "gpus": [],
        "placement": [],
    }
    physical = tf.config.list_physical_devices("GPU")
    for g in physical:
        tf.config.experimental.set_memory_growth(g, True)
    try:
        created = tf_gpu_descs() if physical else []
    except Exception as e:  # the bus ids are best effort; the listing below still works
        created, out["gpu_desc_error"] = [], str(e).splitlines()[0][:200]
    if created:
        out["ignored_gpus"] = len(physical) - len(created)
        for i, d in enumerate(created):
            out["gpus"].append({"tf_index": i, **d})
    for i, g in enumerate(physical if not created else []):
        try:
            d = tf.config.experimental.get_device_details(g)
        except Exception:  # details are best effort
            d = {}
        cc = d.get("compute_capability")
        out["gpus"].append(
            {
                "tf_index": i,
                "name": d.get("device_name", g.name),
                "compute_capability": list(cc) if cc else None,
                "pci_bus_id": None,
            }
        )
    if check:
        for dev in ["/CPU:0"] + [f"/GPU:{i}" for i in range(len(out["gpus"]))]:
            try:
                with tf.device(dev):
                    a = tf.random.normal((256, 256))
                    r = tf.matmul(a, a)
                    _ = float(tf.reduce_sum(r))
                out["placement"].append(
                    {"requested": dev, "ran_on": r.device, "ok": dev.strip("/").upper() in r.device.upper()}
                )
            except Exception as e:
                out["placement"].append(
                    {"requested": dev, "ran_on": None, "ok": False, "error": str(e).splitlines()[0][:200]}
                )
    return out


def main() -> int:
    """Write the probe as JSON to argv[1]."""
    from bench.backends.hiding import hide_unused

    hide_unused("tensorflow")  # as in its workers: a quicker start
    path = sys.argv[1]
    data = probe("--check" in sys.argv[2:])
    with open(path, "w") as f:
        json.dump(data, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
