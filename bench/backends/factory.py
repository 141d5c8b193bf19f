"""The backend a worker measures through, by name (each imports its own framework only)."""

from __future__ import annotations

from typing import Any

from bench.cases import DeviceConfig


def make(backend: str, device: DeviceConfig, gpu_plan: dict, cluster: bool = False) -> Any:
    """A worker's backend (imports that framework only; a JAX or torch worker never imports TensorFlow)."""
    from bench.backends.hiding import hide_unused

    hide_unused(backend)  # what its framework would import needlessly: a quicker start
    if backend == "jax":
        from bench.backends.jax_backend import JaxBackend

        return JaxBackend(device, gpu_plan)
    if backend == "torch":
        from bench.backends.torch_backend import TorchBackend

        return TorchBackend(device, gpu_plan)
    if backend == "torch-native":
        from bench.backends.torch_native import NativeBackend

        return NativeBackend(device, gpu_plan)
    from bench.backends.tf_backend import TFBackend

    return TFBackend(device, gpu_plan, cluster=cluster)
