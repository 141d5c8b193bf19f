"""Workloads: real Keras models, analytic FLOPs checked against TensorFlow's profiler."""

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

from workloads import WORKLOADS  # noqa: E402

# The profiler counts MatMul/Conv2D (+ fused bias) exactly as we do for the MLP; for the CNN it
# also counts the fused batch-norm; for Keras' einsum attention it misses part of the batched
# matmuls. Tolerances state how far each may differ.
TOLERANCE = {"mlp": 0.0, "cnn": 0.05, "transformer": 0.07}


def profiler_flops(model, shape):
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    f = tf.function(lambda x: model(x, training=False))
    graph = convert_variables_to_constants_v2(f.get_concrete_function(tf.TensorSpec(shape, tf.float32))).graph
    opts = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    opts["output"] = "none"
    return tf.compat.v1.profiler.profile(
        graph=graph, run_meta=tf.compat.v1.RunMetadata(), cmd="op", options=opts
    ).total_float_ops


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_analytic_flops_match_tensorflow_profiler(name):
    w = WORKLOADS[name]
    size = w.size("smoke")
    batch = 2
    measured = profiler_flops(w.build(size), (batch, *w.input_shape(size))) / batch
    analytic = w.flops_per_sample(size, "infer")
    assert analytic == pytest.approx(measured, rel=TOLERANCE[name], abs=0 if TOLERANCE[name] else 0.5)
    assert w.model_flops_per_sample(size, "train") == 3 * analytic
    assert w.flops_per_sample(size, "train") == 3 * analytic - w.input_grad_flops(size)


def test_training_flops_leave_out_the_data_inputs_gradient():
    """The issue's figures: the standard MLP executes 427,281,336 - 2 x 4096 x 4096 FLOPs per sample."""
    mlp = WORKLOADS["mlp"]
    std = mlp.size("standard")
    assert mlp.model_flops_per_sample(std, "train") == 427_281_336
    assert mlp.flops_per_sample(std, "train") == 393_726_904
    assert mlp.flops_per_sample(std, "infer") == mlp.model_flops_per_sample(std, "infer") == 142_427_112


def test_smoke_cnn_training_flops_by_hand():
    """The smoke CNN counted by hand: 32x32x3 images, a 3x3 stem to 16 channels at stride 1, stage 1 one
    bottleneck of width 16 (out 64) at 32x32, stage 2 one of width 32 (out 128) at stride 2 (16x16), 10 classes."""
    mac = (
        3 * 3 * 3 * 16 * 32 * 32  # stem
        + (16 * 64 + 16 * 16 + 3 * 3 * 16 * 16 + 16 * 64) * 32 * 32  # s0: projection, a, b, c
        + 64 * 128 * 16 * 16  # s1 projection (stride 2)
        + 64 * 32 * 32 * 32  # s1 a (1x1 at 32x32, before the stride)
        + (3 * 3 * 32 * 32 + 32 * 128) * 16 * 16  # s1 b (stride 2), c
        + 128 * 10  # logits
    )
    forward = 2 * mac + 10  # and the logits' bias
    stem_input_grad = 2 * 3 * 3 * 3 * 16 * 32 * 32
    cnn = WORKLOADS["cnn"]
    assert cnn.forward_flops(cnn.size("smoke")) == forward
    assert cnn.flops_per_sample(cnn.size("smoke"), "train") == 3 * forward - stem_input_grad


def test_standard_cnn_is_resnet50():
    w = WORKLOADS["cnn"]
    model = w.build(w.size("standard"))
    trainable = sum(int(v.numpy().size) for v in model.trainable_weights)
    assert trainable == 25_557_032  # ResNet-50 (torchvision / MLPerf count)
    assert model.input_shape == (None, 224, 224, 3) and model.output_shape == (None, 1000)
    assert w.forward_flops(w.size("standard")) == pytest.approx(8.18e9, rel=0.01)  # 4.09 GMACs


def test_standard_transformer_blocks_are_bert_base_sized():
    s = WORKLOADS["transformer"].size("standard")
    assert (s.d_model, s.heads, s.ffn) == (768, 12, 3072)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_synthetic_batch_shapes_and_labels(name):
    w = WORKLOADS[name]
    size = w.size("smoke")
    x, y = w.make_batch(size, 3)
    assert tuple(x.shape) == (3, *w.input_shape(size)) and tuple(y.shape) == (3,)
    assert int(max(y)) < w.num_classes(size) and keras.backend.standardize_dtype(y.dtype) == "int32"
    assert tuple(w.build(size)(x).shape) == (3, w.num_classes(size))


def test_workloads_import_only_keras_and_numpy():
    import ast
    from pathlib import Path

    for path in Path(__file__).parents[1].joinpath("workloads").glob("*.py"):
        tree = ast.parse(path.read_text())
        mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert mods <= {"keras", "numpy", "workloads", "__future__", "dataclasses", "collections", "typing"}, path


def test_virtual_gpus_are_sized_from_nvml_total_memory():
    from bench.measure import virtual_gpu_limit_mb

    h200 = 143_771_336_704  # bytes, as NVML reports an H200's total
    assert virtual_gpu_limit_mb(h200, 2) == int(h200 * 0.9 / 2) // 2**20 == 61_699
    assert virtual_gpu_limit_mb(80 * 2**30, 4) == 18_432
    with pytest.raises(ValueError, match="NVML gave no total memory"):
        virtual_gpu_limit_mb(None, 2)
