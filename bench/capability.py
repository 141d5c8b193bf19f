"""Which device and precision combinations the hardware can run, and why not (pure rules).

Sources (``shared/design/measurement.md`` rule 9): fp16 tensor cores need compute capability
>= 7.0, bf16 and TF32 >= 8.0; on a CPU bf16 is only worth measuring where it is native
(avx512_bf16 / amx_bf16); emulated it is slower than fp32 and would publish a misleading
"loss". fp16 on CPU is not offered (see CPU_FP16_REASON).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bench.precision import spec

CPU_FLAGS_FOR = {"mixed_bfloat16": ("avx512_bf16", "amx_bf16")}
# Measured on a Xeon with avx512_fp16 (TF 2.21, smoke MLP): mixed_float16 training ran at 0.01x
# of fp32 and CNN training at 0.02x: TensorFlow's CPU fp16 kernels are mostly emulated.
CPU_FP16_REASON = (
    "mixed_float16 on CPU: TensorFlow's CPU kernels emulate most fp16 ops even where the CPU "
    "has avx512_fp16 (measured: MLP training at 0.01x of fp32)"
)
# Measured with accelbench's JAX backend (jax 0.10.2, smoke MLP on 2 CPU devices): mixed_float16
# training at 0.56x of fp32; the transformer's attention does not compile at all in fp16 on XLA's CPU.
JAX_CPU_FP16_REASON = (
    "mixed_float16 on CPU: XLA's CPU backend emulates fp16 (measured: MLP training at 0.56x of fp32) "
    "and rejects fp16 attention ('The precision F16_F16_F32 is not supported by dot_general on CPU')"
)
TORCH_CPU_FP16_REASON = (
    "mixed_float16 on CPU: fp16 is a GPU tensor-core format; TensorFlow's and XLA's CPU backends emulate "
    "it (measured), and torch's CPU fp16 is not offered until it is measured against fp32"
)
CPU_FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16", "amx_tile")


@dataclass(frozen=True)
class Support:
    """Whether a combination can run; ``reason`` says why not (empty when supported)."""

    supported: bool
    reason: str = ""


OK = Support(True)


def cpu_precision(precision: str, cpu_flags: Iterable[str], backend: str = "tensorflow") -> Support:
    """Support of ``precision`` on a CPU with ``cpu_flags`` (as in /proc/cpuinfo), on ``backend``."""
    flags = set(cpu_flags)
    if precision == "fp32":
        return OK
    if precision == "tf32":
        return Support(
            False, "tf32 needs an NVIDIA GPU with compute capability >= 8.0 (a tensor-core math mode; CPUs have none)"
        )
    if precision == "mixed_float16":
        reason = {"jax": JAX_CPU_FP16_REASON, "torch": TORCH_CPU_FP16_REASON, "torch-native": TORCH_CPU_FP16_REASON}
        return Support(False, reason.get(backend, CPU_FP16_REASON))
    needed = CPU_FLAGS_FOR[precision]
    if flags.intersection(needed):
        return OK
    return Support(
        False,
        f"{precision} on this CPU would be emulated (no {' or '.join(needed)} in the CPU flags); "
        "emulated bf16 runs slower than fp32",
    )


def gpu_precision(precision: str, compute_capability: tuple[int, int] | None, name: str = "") -> Support:
    """Support of ``precision`` on an NVIDIA GPU of ``compute_capability`` (major, minor)."""
    if precision == "fp32":
        return OK
    if compute_capability is None:
        return Support(False, f"compute capability of {name or 'the GPU'} is unknown")
    s = spec(precision)
    need = s.min_compute_capability
    if tuple(compute_capability) >= need:
        return OK
    what = s.gpu_label
    cc = ".".join(map(str, compute_capability))
    return Support(
        False,
        f"{what} needs an NVIDIA GPU with compute capability >= {need[0]}.{need[1]}; {name or 'this GPU'} has {cc}",
    )


def device_count(
    kind: str, count: int, available: int, virtual: bool, no_gpu_reason: str = "", who: str = "TensorFlow"
) -> Support:
    """Whether ``count`` devices of ``kind`` exist (``available`` = how many ``who``, the backend, sees)."""
    if virtual or kind == "cpu":
        if kind == "gpu" and available < 1:
            return Support(False, no_gpu_reason or f"no NVIDIA GPU visible to {who}")
        return OK
    if available < 1:
        return Support(False, no_gpu_reason or f"no NVIDIA GPU visible to {who}")
    if count > available:
        return Support(False, f"gpu:{count} needs {count} GPUs; {who} sees {available}")
    return OK


RING_XLA = (
    "XLA-compiled steps need NCCL collectives under MultiWorkerMirroredStrategy; a CPU cluster uses RING "
    "(TensorFlow: 'Only compiling NCCL/auto collective is supported, got: ring')"
)


def cluster_xla_support(kind: str, nodes: int) -> Support:
    """XLA across nodes: only where the all-reduce is NCCL (GPUs)."""
    return Support(False, RING_XLA) if nodes > 1 and kind == "cpu" else Support(True)


def xla_support(kind: str, count: int, virtual: bool, mode: str = "train") -> Support:
    """XLA (jit_compile) support of a device configuration and mode.

    Training compiles only forward and backward (the optimizer runs outside XLA), which works
    over logical CPU devices too. Inference over several logical CPU devices does not: TF
    compiles every replica's function for CPU:0, which cannot reach the other replicas'
    variables. (On GPUs each replica's function is compiled for its own GPU.)
    """
    if kind == "cpu" and virtual and count > 1 and mode == "infer":
        return Support(
            False,
            "XLA inference over several logical CPU devices fails in TensorFlow: every replica is "
            "compiled for CPU:0 and cannot reach the variables of the others ('Trying to access "
            "resource ... located in device CPU:1')",
        )
    return OK


JAX_VIRTUAL_GPU = "JAX cannot split one GPU into logical devices (TensorFlow's virtual GPUs have no JAX counterpart)"
TORCH_VIRTUAL_GPU = (
    "torch cannot split one GPU into logical devices (TensorFlow's virtual GPUs have no torch counterpart)"
)
MODEL_PARALLEL_TORCH = (
    "model parallelism on torch: Keras' torch backend has no distribution_lib in Keras 3.15 (the epic "
    "keras-team/keras#23418 is open), and accelbench's native torch models are data parallel (DDP) only"
)
MODEL_PARALLEL_TF = (
    "model parallelism (Keras ModelParallel with a LayoutMap) runs only on the JAX backend: Keras' "
    "TensorFlow distribution_lib is a prototype without distribute_tensor (keras-team/keras#18473)"
)


SERVE_ONE_DEVICE = Support(
    False,
    "serve runs one model instance with one request queue on one device; several devices "
    "(a queue per replica, or one batch split over them) are not measured yet",
)


def backend_support(backend: str, parallelism: str, kind: str, virtual: bool) -> Support:
    """What a backend can run: virtual GPUs are TensorFlow's, model parallelism is JAX's."""
    torch = backend in ("torch", "torch-native")
    if parallelism == "model" and backend != "jax":
        return Support(False, MODEL_PARALLEL_TORCH if torch else MODEL_PARALLEL_TF)
    if backend != "tensorflow" and kind == "gpu" and virtual:
        return Support(False, TORCH_VIRTUAL_GPU if torch else JAX_VIRTUAL_GPU)
    return OK


def virtual_gpu_split(memory_total_bytes: int | None) -> Support:
    """A virtual GPU split needs the GPU's total memory (from NVML) to size the logical devices."""
    if not memory_total_bytes:
        return Support(
            False,
            "virtual GPUs are sized from NVML's total memory of the GPU, and NVML gave none "
            "(NVML unavailable, or the GPU has no NVML match)",
        )
    return OK
