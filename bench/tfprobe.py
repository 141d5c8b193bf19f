"""Run in a child process: what TensorFlow sees, and where a tiny computation really runs.

``python -m bench.tfprobe OUT.json [--check]``. Kept out of the parent so the parent never
initialises TensorFlow (and never claims GPU memory or fixes the device configuration).
"""

from __future__ import annotations

import json
import os
import sys


def probe(check: bool) -> dict:
    """TensorFlow/Keras versions, CUDA build info, visible GPUs, and with ``check`` placements."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
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
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "gpus": [],
        "placement": [],
    }
    for i, g in enumerate(tf.config.list_physical_devices("GPU")):
        try:
            d = tf.config.experimental.get_device_details(g)
        except Exception:  # details are best effort
            d = {}
        cc = d.get("compute_capability")
        out["gpus"].append(
            {"tf_index": i, "name": d.get("device_name", g.name), "compute_capability": list(cc) if cc else None}
        )
    if check:
        for g in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(g, True)
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
    path = sys.argv[1]
    data = probe("--check" in sys.argv[2:])
    with open(path, "w") as f:
        json.dump(data, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
