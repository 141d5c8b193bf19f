"""What each accelbench precision means, derived once, for every backend, the probe and the report.

An accelbench precision is a name (``fp32``, ``tf32``, ``mixed_float16``, ``mixed_bfloat16``);
:func:`spec` turns it into the settings the code acts on, so the Keras policy, the TF32 switch,
the probe's dtype, loss scaling and the datasheet column can't drift apart between the places
that use them. Pure: imports no framework.

- ``fp32`` is float32 with TF32 **off** (TensorFlow turns TF32 on by default on Ampere and
  later: ``shared/design/measurement.md``), so "fp32" means true fp32 on every GPU.
- ``tf32`` is float32 variables and compute with TF32 matmuls/convolutions on GPUs.
- The mixed policies compute in fp16/bf16 with float32 variables; their float32 leftovers run on
  TF32 where the GPU has it (both frameworks' default). fp16 needs loss scaling, bf16 does not
  (bf16 has fp32's exponent range).
"""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS = ("fp32", "tf32", "mixed_float16", "mixed_bfloat16")


@dataclass(frozen=True)
class PrecisionSpec:
    """One precision's settings; see the module docstring for what each means."""

    name: str
    keras_policy: str  # keras.config.set_dtype_policy
    compute_dtype: str  # of the layers' math, and of the matmul probe's operands
    tf32: bool  # TensorFloat-32 for float32 matmuls and convolutions (GPUs with compute capability >= 8.0)
    jax_matmul_precision: str  # jax_default_matmul_precision
    loss_scaling: bool  # the optimizer scales the loss (fp16's narrow exponent range)
    min_compute_capability: tuple[int, int]  # the tensor cores the precision needs on NVIDIA GPUs
    gpu_label: str  # what the precision needs, in reasons: "mixed_float16 (fp16 tensor cores)"

    @property
    def datasheet_column(self) -> str:
        """The datasheet peak a case of this precision is set against (``bench.report.peaks``)."""
        return self.name

    @property
    def mixed(self) -> bool:
        """Whether the math runs in a 16-bit type with float32 variables."""
        return self.compute_dtype != "float32"


_SPECS = {
    # JAX: "float32" pins TF32 off as TensorFlow's switch does. The mixed policies keep JAX's
    # default, which on GPUs runs their float32 leftovers on TF32 (docs.jax.dev, "Matmul
    # precision"); naming "tensorfloat32" there would also pin the fp16 matmuls' algorithm
    # (F16_F16_F32), which the CPU rejects ("The precision 'F16_F16_F32' is not supported by
    # dot_general on CPU").
    "fp32": PrecisionSpec("fp32", "float32", "float32", False, "float32", False, (0, 0), "fp32"),
    "tf32": PrecisionSpec("tf32", "float32", "float32", True, "tensorfloat32", False, (8, 0), "tf32"),
    "mixed_float16": PrecisionSpec(
        "mixed_float16", "mixed_float16", "float16", True, "default", True, (7, 0), "mixed_float16 (fp16 tensor cores)"
    ),
    "mixed_bfloat16": PrecisionSpec(
        "mixed_bfloat16",
        "mixed_bfloat16",
        "bfloat16",
        True,
        "default",
        False,
        (8, 0),
        "mixed_bfloat16 (bf16 tensor cores)",
    ),
}


def spec(precision: str) -> PrecisionSpec:
    """The settings of an accelbench precision (ValueError for an unknown name)."""
    try:
        return _SPECS[precision]
    except KeyError:
        raise ValueError(f"unknown precision {precision!r}; one of {', '.join(PRECISIONS)}") from None


def math_mode(compute_dtype: str, variable_dtype: str, device_kind: str, fp32_on_tf32: bool) -> str:
    """How the math really runs, from what the framework reports back after the settings were applied.

    E.g. ``fp32 (tf32 off)``, ``tf32``, ``bf16 compute, float32 variables, fp32 ops tf32``.
    """
    gpu = device_kind == "gpu"
    if compute_dtype == "float32":
        return ("tf32" if fp32_on_tf32 else "fp32 (tf32 off)") if gpu else "fp32"
    mode = f"{'bf16' if compute_dtype == 'bfloat16' else 'fp16'} compute, {variable_dtype} variables"
    if compute_dtype == "float16":
        mode += ", loss scaling"
    if gpu:
        mode += f", fp32 ops {'tf32' if fp32_on_tf32 else 'fp32'}"
    return mode
