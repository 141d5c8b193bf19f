"""One precision spec: what each precision means, set the same way whoever asks first."""

import subprocess
import sys

import pytest

from bench import capability, precision
from bench.cases import PRECISIONS
from bench.report.peaks import DATASHEET


def test_every_precision_has_one_spec_and_the_rules_hold():
    assert PRECISIONS == precision.PRECISIONS
    specs = {p: precision.spec(p) for p in PRECISIONS}
    assert all(s.name == p for p, s in specs.items())
    # fp32 is true fp32 (TF32 off, in both frameworks); tf32 is float32 on TF32 math
    assert not specs["fp32"].tf32 and specs["fp32"].jax_matmul_precision == "float32"
    assert specs["tf32"].tf32 and specs["tf32"].jax_matmul_precision == "tensorfloat32"
    assert {s.keras_policy for p, s in specs.items() if not s.mixed} == {"float32"}
    assert [p for p, s in specs.items() if s.mixed] == ["mixed_float16", "mixed_bfloat16"]
    assert all(s.keras_policy == p for p, s in specs.items() if s.mixed)
    # only fp16 needs loss scaling (bf16 has float32's exponent range)
    assert [p for p, s in specs.items() if s.loss_scaling] == ["mixed_float16"]
    assert specs["mixed_bfloat16"].compute_dtype == "bfloat16" and specs["mixed_float16"].compute_dtype == "float16"
    # every datasheet entry is keyed by a spec's column
    assert {k for row in DATASHEET.values() for k in row} <= {s.datasheet_column for s in specs.values()}
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        precision.spec("fp8")


def test_gpu_support_follows_the_spec():
    for p in PRECISIONS:
        s = precision.spec(p)
        assert capability.gpu_precision(p, s.min_compute_capability).supported
        if s.min_compute_capability > (0, 0):
            below = (s.min_compute_capability[0] - 1, 5)
            no = capability.gpu_precision(p, below, "Old GPU")
            assert not no.supported and s.gpu_label in no.reason and "Old GPU has" in no.reason


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (("float32", "float32", "gpu", False), "fp32 (tf32 off)"),
        (("float32", "float32", "gpu", True), "tf32"),
        (("float32", "float32", "cpu", True), "fp32"),  # no TF32 on a CPU, whatever the switch says
        (("bfloat16", "float32", "cpu", True), "bf16 compute, float32 variables"),
        (("float16", "float32", "gpu", True), "fp16 compute, float32 variables, loss scaling, fp32 ops tf32"),
        (("bfloat16", "float32", "gpu", False), "bf16 compute, float32 variables, fp32 ops fp32"),
    ],
)
def test_math_mode_words(args, want):
    assert precision.math_mode(*args) == want


TF32_ORDER = """
import sys
from bench import measure
from bench.precision import PRECISIONS, spec
import tensorflow as tf
for p in PRECISIONS:
    s = spec(p)
    seen = []
    for first, then in (("probe", "apply"), ("apply", "probe")):
        for step in (first, then):
            if step == "probe":
                measure.matmul_probe("/CPU:0", s, 32, 0.01)
            else:
                measure.apply_precision(s, "cpu")
        seen.append(tf.config.experimental.tensor_float_32_execution_enabled())
    print(p, *seen)
"""


def test_tf32_is_what_the_spec_says_whichever_of_probe_and_policy_runs_last():
    """The probe and the policy used to set TF32 each their own way, so the case's math hung on their call order."""
    r = subprocess.run([sys.executable, "-c", TF32_ORDER], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    seen = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines() if line.split()[0] in PRECISIONS}
    assert seen.keys() == set(PRECISIONS)
    for p, flags in seen.items():
        assert flags == [str(precision.spec(p).tf32)] * 2, (p, flags)
