"""The TensorFlow backend: ``tf.distribute`` strategies over the case's devices (``bench.measure``, ``bench.steps``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from bench import measure
from bench.backends.base import Backend, Step
from bench.cases import Case, DeviceConfig
from bench.loop import CopyProbe, Probe
from bench.precision import PrecisionSpec


class TFBackend(Backend):
    """One worker's TensorFlow: devices configured before anything initialises them."""

    name = "tensorflow"

    def __init__(
        self,
        device: DeviceConfig,
        gpu_plan: dict | None = None,
        cluster: bool = False,
    ):
        gpu = gpu_plan or {}
        self.device = device
        self.names = measure.configure_devices(
            device, gpu.get("memory_total_bytes"), gpu.get("cuda_ordinals"), gpu.get("memory_limit_mb")
        )
        self.strategy: Any = None
        if not cluster:  # a cluster worker's strategy comes from bench.multiworker (set_strategy)
            self.strategy, self.all_reduce = measure.make_strategy(device, self.names)

    def set_strategy(self, strategy: Any, all_reduce: str, names: Sequence[str]) -> None:
        """Use a strategy made elsewhere (MultiWorkerMirroredStrategy); sync only these devices."""
        self.strategy, self.all_reduce, self.names = strategy, all_reduce, list(names)
        measure.sync_local_only(self.names)

    def versions(self) -> dict:
        return {"tensorflow": tf.__version__, "keras": keras.__version__}

    def threads(self) -> dict:
        return {
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        }

    def apply_precision(self, spec: PrecisionSpec, device_kind: str) -> str:
        return measure.apply_precision(spec, device_kind)

    def matmul_probe(self, spec: PrecisionSpec, n: int, budget_s: float) -> Probe:
        return measure.matmul_probe(self.names[0], spec, n, budget_s)

    def copy_probe(self, n_bytes: int, budget_s: float) -> CopyProbe:
        return measure.copy_probe(self.names[0], n_bytes, budget_s)

    def build(self, case: Case, profile: str) -> Step:
        b = measure.build_case(case, profile, self.strategy, self.names)
        return Step(step=b.step, params=b.params, xla_scope=b.xla_scope, native=b, serve=b.serve)

    def sync(self) -> None:
        measure.sync()

    def check_placement(self, built: Step, first: Any) -> dict:
        measure.check_placement(self.strategy, built.native, first, self.names, self.device.virtual)
        return {}

    def all_reduce_used(self, built: Step) -> str:
        if len(self.names) < 2:
            return self.all_reduce
        return measure.all_reduce_used(built.native.graph_ops(), self.all_reduce)

    def final_loss(self, last: Any) -> float:
        return measure.final_loss(self.strategy, last)

    def reset_memory(self) -> None:
        measure.reset_memory(self.names)

    def memory_peaks(self, virtual_cpu: bool) -> list[int | None]:
        return measure.memory_peaks(self.names, virtual_cpu)

    def is_oom(self, e: BaseException) -> bool:
        return isinstance(e, tf.errors.ResourceExhaustedError)

    def end_case(self) -> None:
        keras.config.set_dtype_policy("float32")
        keras.backend.clear_session()
