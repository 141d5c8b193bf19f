"""Measuring one case in TensorFlow: compile, warm up, calibrate, timed rounds, telemetry.

Rules from ``shared/design/measurement.md``: the first call is ``compile_s`` and stays out of
the steady state; warm-up uses the timed shapes; a round is K steps closed by one device sync
(never a sync per step inside the timed block); throughput is global samples of a round over
its wall time; synthetic data sits on the devices; TF32 is set explicitly per precision.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from bench import loop, precision
from bench.cases import DeviceConfig
from bench.loop import NumericsError, PlacementError, Probe, plan_rounds, summarize
from bench.precision import PrecisionSpec
from bench.steps import Built, all_reduce_used, build_case

# the step builders live in bench.steps, the backend-neutral loop in bench.loop
__all__ = [
    "Built",
    "NumericsError",
    "PlacementError",
    "Probe",
    "all_reduce_used",
    "build_case",
    "plan_rounds",
    "summarize",
]


def virtual_gpu_limit_mb(total_bytes: int | None, count: int, share: float = 0.9) -> int:
    """Memory limit (MB, as ``LogicalDeviceConfiguration`` takes it) of each of ``count`` logical GPUs.

    ``total_bytes`` is NVML's total memory of the GPU being split, carried in the plan:
    TensorFlow's ``get_device_details`` has no memory key (only ``device_name`` and
    ``compute_capability``), so it cannot size the split. ``share`` of the total is divided
    evenly; the rest stays for the CUDA context, cuDNN/cuBLAS workspaces and the driver.
    """
    if not total_bytes or total_bytes <= 0:
        raise ValueError(
            "cannot size virtual GPUs: NVML gave no total memory for the GPU to split "
            "(NVML unavailable?); run without --virtual-devices"
        )
    return int(total_bytes * share / count) // 2**20


def configure_devices(
    device: DeviceConfig,
    gpu_memory_total_bytes: int | None = None,
    cuda_ordinals: Sequence[int] | None = None,
    memory_limit_mb: int | None = None,
) -> list[str]:
    """Make exactly the case's devices visible (before TensorFlow initialises); their names.

    Virtual configurations split the first device into ``count`` logical devices (sharing its
    silicon: correctness of the multi-device path, never scaling); a GPU split is sized from
    ``gpu_memory_total_bytes`` (NVML's total of that GPU, see :func:`virtual_gpu_limit_mb`).
    ``cuda_ordinals`` pick the physical GPUs (the probe's list of GPUs TensorFlow really
    creates), so a GPU TensorFlow ignores is never chosen; default: the first ones.
    ``memory_limit_mb`` caps one whole GPU (a tenant of a shared GPU, and its alone baseline).
    """
    physical = tf.config.list_physical_devices("GPU")
    gpus = [physical[i] for i in cuda_ordinals if i < len(physical)] if cuda_ordinals else physical
    if device.kind == "cpu":
        tf.config.set_visible_devices([], "GPU")
        if device.count > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * device.count)
        return [f"/device:CPU:{i}" for i in range(device.count)]
    if device.virtual:
        limit = virtual_gpu_limit_mb(gpu_memory_total_bytes, device.count)
        tf.config.set_visible_devices(gpus[:1], "GPU")
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=limit)] * device.count
        )
    elif memory_limit_mb:
        tf.config.set_visible_devices(gpus[:1], "GPU")
        tf.config.set_logical_device_configuration(gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit_mb)])
    else:
        tf.config.set_visible_devices(gpus[: device.count], "GPU")
        for g in gpus[: device.count]:
            tf.config.experimental.set_memory_growth(g, True)
    return [f"/device:GPU:{i}" for i in range(device.count)]


def make_strategy(device: DeviceConfig, names: Sequence[str]) -> tuple[tf.distribute.Strategy, str]:
    """OneDeviceStrategy for one device, MirroredStrategy (weak scaling) for several."""
    if len(names) == 1:
        return tf.distribute.OneDeviceStrategy(names[0]), "none (1 replica)"
    if device.kind == "gpu" and not device.virtual:
        ops: Any = tf.distribute.NcclAllReduce()
    else:
        ops = tf.distribute.ReductionToOneDevice(reduce_to_device=names[0])
    return tf.distribute.MirroredStrategy(devices=list(names), cross_device_ops=ops), type(ops).__name__


_LOCAL_DEVICES: list[str] = []  # set under MultiWorkerMirroredStrategy: sync only this worker's devices


def sync_local_only(devices: Sequence[str]) -> None:
    """Make :func:`sync` wait for these devices only (a cluster worker cannot sync remote ones)."""
    _LOCAL_DEVICES[:] = list(devices)


def sync() -> None:
    """Wait for every device (of this worker, in a cluster) to finish its queued work."""
    if not _LOCAL_DEVICES:
        tf.test.experimental.sync_devices()
        return
    # tf.test.experimental.sync_devices() syncs every logical device, remote ones included, and
    # fails under MultiWorkerMirroredStrategy ("Haven't set up remote eager worker")
    for d in _LOCAL_DEVICES:
        with tf.device(d):
            tf.raw_ops.SyncDevice()
    from tensorflow.python.eager import context

    context.async_wait()


def apply_precision(spec: PrecisionSpec, device_kind: str) -> str:
    """Set the Keras dtype policy and TF32 of ``spec``; return the math mode really set (read back)."""
    keras.config.set_dtype_policy(spec.keras_policy)
    tf.config.experimental.enable_tensor_float_32_execution(spec.tf32)
    p = keras.config.dtype_policy()
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    mode = precision.math_mode(p.compute_dtype, p.variable_dtype, device_kind, tf32)
    fpmath = os.environ.get("ONEDNN_DEFAULT_FPMATH_MODE")
    if device_kind == "cpu" and fpmath and fpmath.upper() != "STRICT":
        mode += f" (oneDNN fpmath {fpmath}: fp32 ops may run reduced)"
    return mode


def matmul_probe(device_name: str, spec: PrecisionSpec, n: int, budget_s: float) -> Probe:
    """Best FLOP/s of a chain of n x n matmuls on ``device_name`` in the spec's compute dtype.

    TF32 is set as the case will have it (the same switch :func:`apply_precision` sets), so the
    order of the two calls doesn't matter.
    """
    dtype = tf.as_dtype(spec.compute_dtype)
    tf.config.experimental.enable_tensor_float_32_execution(spec.tf32)
    with tf.device(device_name):
        a = tf.cast(tf.random.normal((n, n)), dtype)
        b = tf.cast(tf.random.normal((n, n)) / math.sqrt(n), dtype)

        @tf.function
        def chain(a, b):
            c = a
            for _ in range(loop.PROBE_REPS):
                c = tf.matmul(c, b)
            return c

        def run() -> None:
            chain(a, b)
            sync()

        run()
        best = loop.best_matmul_rate(run, n, budget_s)
    return Probe(best / 1e12, n, dtype.name)


def copy_probe(device_name: str, n_bytes: int, budget_s: float) -> loop.CopyProbe:
    """Best (read + write) bandwidth of ``device_name``: a chain of y = x + 1 over an fp32 array of ``n_bytes``."""
    with tf.device(device_name):
        x = tf.zeros((n_bytes // 4,), tf.float32)
        # one pass per call, never one graph of several passes: auto-clustering (XLA) would fuse them
        one = tf.function(lambda x: x + 1.0, jit_compile=False)

        def run() -> None:
            for _ in range(loop.COPY_REPS):
                one(x)
            sync()

        run()
        best = loop.best_copy_rate(run, n_bytes, budget_s)
    return loop.CopyProbe(best / 1e9, n_bytes)


def _device_key(name: str) -> tuple[str, int]:
    spec = tf.DeviceSpec.from_string(name)
    return (spec.device_type or "").upper(), int(spec.device_index or 0)


def check_placement(
    strategy: tf.distribute.Strategy, built: Built, outputs: Any, expected: Sequence[str], virtual: bool
) -> None:
    """Fail unless variables, input data and outputs sit on the case's devices.

    Every expected device must hold a copy of the variables and its replica's data. Outputs
    must come from the expected devices, one per replica where the devices are real
    (TensorFlow reports function outputs of logical CPU devices on CPU:0, so for virtual
    devices only the device type is held to).
    """
    want = {_device_key(d) for d in expected}
    seen_vars: set[tuple[str, int]] = set()
    for v in built.model.weights:
        for local in strategy.experimental_local_results(getattr(v, "value", v)):
            seen_vars.add(_device_key(local.device))
    if built.serve is not None:  # requests come from the host by design; the forward must run on the device
        seen_data, seen_out = want, {_device_key(built.serve.out_device)}
    else:
        seen_data = {_device_key(t.device) for t in strategy.experimental_local_results(built.inputs)}
        seen_out = {_device_key(t.device) for t in strategy.experimental_local_results(outputs)}
    kinds = {k for k, _ in want}
    out_ok = {k for k, _ in seen_out} <= kinds if virtual else seen_out == want
    if seen_vars != want or seen_data != want or not out_ok:
        raise PlacementError(
            f"expected variables, data and compute on {sorted(want)}; variables on "
            f"{sorted(seen_vars)}, data on {sorted(seen_data)}, outputs on {sorted(seen_out)} "
            "(a silent fallback to another device?)"
        )


def _short(name: str) -> str:
    """``/job:worker/replica:0/task:1/device:GPU:0`` or ``/device:GPU:0`` -> ``GPU:0`` (the memory API's spelling)."""
    kind, index = _device_key(name)
    return f"{kind}:{index}"


def memory_peaks(names: Sequence[str], virtual_cpu: bool) -> list[int | None]:
    """TensorFlow allocator peak bytes per device (one shared allocator for virtual CPUs)."""
    out: list[int | None] = []
    for name in names[:1] if virtual_cpu else names:
        try:
            out.append(int(tf.config.experimental.get_memory_info(_short(name))["peak"]))
        except (ValueError, tf.errors.OpError):
            out.append(None)
    return out


def reset_memory(names: Sequence[str]) -> None:
    """Reset allocator peaks, where the device supports it."""
    for name in names:
        try:
            tf.config.experimental.reset_memory_stats(_short(name))
        except (ValueError, tf.errors.OpError):
            pass


def final_loss(strategy: tf.distribute.Strategy, out: Any) -> float:
    """Global mean loss from per-replica losses (each already divided by the global batch).

    Across workers a SUM reduction (local results are only this worker's share).
    """
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return float(strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None))
    return float(sum(np.asarray(v, dtype=np.float64) for v in strategy.experimental_local_results(out)))
