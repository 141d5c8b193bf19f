"""Runs in a child process (devices are fixed once per process): TensorFlow's distribution code
made to take its GPU branches over two logical CPU devices, through accelbench's real measure code.

``python tests/gpu_shaped.py OUT.json``. TensorFlow is real; only its "is this device a GPU?"
answer is changed (``_is_gpu_device``), which is what selects the no-merge_call XLA path on GPUs.
"""

import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorflow.python.distribute import mirrored_run, mirrored_strategy  # noqa: E402

mirrored_run._is_gpu_device = lambda d: True  # before any strategy is created
mirrored_strategy._is_gpu_device = lambda d: True

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import measure, steps  # noqa: E402
from bench.cases import Case, DeviceConfig  # noqa: E402
from bench.precision import spec  # noqa: E402

DEV = DeviceConfig("cpu", 2, virtual=True)
NAMES = measure.configure_devices(DEV)
STRATEGY, ALL_REDUCE = measure.make_strategy(DEV, NAMES)


def xla_training(workload, precision, batch):
    measure.apply_precision(spec(precision), "cpu")
    try:
        b = measure.build_case(
            Case(workload, "train", "cpu", 2, True, precision, True, batch), "smoke", STRATEGY, NAMES
        )
        out = b.step()
        measure.check_placement(STRATEGY, b, out, NAMES, True)
        out = b.step()
        ops = b.graph_ops()
        return {
            "ok": True,
            "loss": measure.final_loss(STRATEGY, out),
            "xla_scope": b.xla_scope,
            "all_reduce": measure.all_reduce_used(ops, ALL_REDUCE),
            "lso": type(b.optimizer).__name__,
        }
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    finally:
        keras.config.set_dtype_policy("float32")
        keras.backend.clear_session()


def whole_step_under_xla():
    """The old structure (optimizer inside the XLA function): must fail on the GPU path, which
    proves this simulation really takes it."""
    with STRATEGY.scope():
        v = keras.Variable(1.0)
        opt = keras.optimizers.SGD(0.1)
        opt.build([v])

    @tf.function(jit_compile=True)
    def replica():
        opt.apply([tf.constant(1.0)], [v])
        return v.value

    try:
        tf.function(lambda: STRATEGY.run(replica))()
        return "ran"
    except RuntimeError as e:
        text = " ".join(str(e).split())
        return text[text.find("`merge_call`") :][:200] if "`merge_call`" in text else text[-200:]


def lso(optimizer_cls, bad_replica):
    """One apply with an inf gradient on ``bad_replica``: weights and loss scale afterwards."""
    with STRATEGY.scope():
        v = keras.Variable(1.0)
        opt = optimizer_cls(keras.optimizers.SGD(0.1))
        opt.build([v])

    def fn():
        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        opt.apply([tf.where(tf.equal(r, bad_replica), float("inf"), 1.0)], [v])

    opt.dynamic_scale.assign(32768.0)
    tf.function(lambda: STRATEGY.run(fn))()
    local = [float(x) for x in STRATEGY.experimental_local_results(v.value)]
    return {"v": [x if math.isfinite(x) else str(x) for x in local], "scale": float(opt.dynamic_scale.numpy())}


def misplaced():
    """A two-device case whose model and data sit on one device only (what a silent fallback
    looks like): the placement check must fail it, naming where things are."""
    one = tf.distribute.OneDeviceStrategy(NAMES[0])
    try:
        b = measure.build_case(Case("mlp", "train", "cpu", 2, True, "fp32", False, 64), "smoke", one, NAMES[:1])
        out = b.step()
        measure.check_placement(one, b, out, NAMES, True)
        return "passed"
    except measure.PlacementError as e:
        return f"PlacementError: {e}"
    finally:
        keras.backend.clear_session()


def main():
    out = {
        "misplaced": misplaced(),
        "xla_train": {
            f"{w}-{p}": xla_training(w, p, b)
            for w, b in (("mlp", 64), ("cnn", 4))
            for p in ("fp32", "mixed_float16", "mixed_bfloat16")
        },
        "whole_step_under_xla": whole_step_under_xla(),
        "lso": {
            f"{cls.__name__}-{bad}": lso(cls, bad)
            for cls in (steps.SyncedLossScaleOptimizer, keras.optimizers.LossScaleOptimizer)
            for bad in (0, 1, -1)
        },
    }
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
