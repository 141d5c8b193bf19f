"""The workload registry: name -> Workload (Keras 3 models, synthetic data, analytic FLOPs)."""

from workloads.base import MODES, PROFILES, Workload
from workloads.cnn import CNN
from workloads.mlp import MLP
from workloads.transformer import TRANSFORMER

WORKLOADS: dict[str, Workload] = {w.name: w for w in (MLP, CNN, TRANSFORMER)}

__all__ = ["MODES", "PROFILES", "WORKLOADS", "Workload"]
