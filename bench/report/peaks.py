"""Datasheet dense peak TFLOP/s per GPU model (``shared/design/measurement.md`` rule 24).

Matched by exact name: "NVIDIA H200" is a prefix of "NVIDIA H200 NVL", which is another part.
"""

from __future__ import annotations

# name -> {precision: dense TFLOP/s}; FP16 with FP32 accumulate
DATASHEET: dict[str, dict[str, float]] = {
    "Tesla V100-SXM2-16GB": {"fp32": 15.7, "mixed_float16": 125},
    "Tesla V100-SXM2-32GB": {"fp32": 15.7, "mixed_float16": 125},
    "NVIDIA A100-SXM4-40GB": {"fp32": 19.5, "tf32": 156, "mixed_float16": 312, "mixed_bfloat16": 312},
    "NVIDIA A100-PCIE-40GB": {"fp32": 19.5, "tf32": 156, "mixed_float16": 312, "mixed_bfloat16": 312},
    "NVIDIA A100-SXM4-80GB": {"fp32": 19.5, "tf32": 156, "mixed_float16": 312, "mixed_bfloat16": 312},
    "NVIDIA H100 80GB HBM3": {"fp32": 67, "tf32": 494.7, "mixed_float16": 989.4, "mixed_bfloat16": 989.4},
    "NVIDIA H100 PCIe": {"fp32": 51, "tf32": 378, "mixed_float16": 756, "mixed_bfloat16": 756},
    "NVIDIA H200": {"fp32": 67, "tf32": 494.7, "mixed_float16": 989.4, "mixed_bfloat16": 989.4},
    "NVIDIA L4": {"fp32": 30.3, "tf32": 60, "mixed_float16": 121, "mixed_bfloat16": 121},
    "NVIDIA L40S": {"fp32": 91.6, "tf32": 183, "mixed_float16": 362, "mixed_bfloat16": 362},
    "NVIDIA GeForce RTX 4090": {"fp32": 82.6, "tf32": 82.6, "mixed_float16": 165.2, "mixed_bfloat16": 165.2},
    "NVIDIA RTX A6000": {"fp32": 38.7, "tf32": 77.4, "mixed_float16": 154.8, "mixed_bfloat16": 154.8},
}


def datasheet_tflops(gpu_name: str | None, precision: str) -> float | None:
    """Dense datasheet peak of one GPU, or None when the model is not known exactly."""
    if not gpu_name:
        return None
    return DATASHEET.get(gpu_name.strip(), {}).get(precision)
