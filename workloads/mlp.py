"""Dense multi-layer perceptron: the matmul-bound workload."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workloads.base import Knob, Workload, dense_flops


@dataclass(frozen=True)
class MLPSize:
    """Knobs of the MLP: input features, hidden widths, output classes."""

    features: int
    hidden: tuple[int, ...]
    classes: int


SIZES = {
    "smoke": MLPSize(features=256, hidden=(512, 512), classes=10),
    "standard": MLPSize(features=4096, hidden=(4096, 4096, 4096, 4096), classes=1000),
    "large": MLPSize(features=8192, hidden=(8192,) * 6, classes=1000),
}
BATCH = {"smoke": 64, "standard": 1024, "large": 2048}


def build(size: MLPSize) -> Any:
    """ReLU MLP; the logits layer computes in float32 under mixed precision."""
    import keras

    inputs = keras.Input((size.features,), name="features")
    x = inputs
    for i, width in enumerate(size.hidden):
        x = keras.layers.Dense(width, activation="relu", name=f"dense_{i}")(x)
    logits = keras.layers.Dense(size.classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, logits, name="mlp")


def forward_flops(size: MLPSize) -> int:
    """Forward FLOPs per sample."""
    widths = (size.features, *size.hidden, size.classes)
    return sum(dense_flops(a, b) for a, b in zip(widths[:-1], widths[1:]))


def input_grad_flops(size: MLPSize) -> int:
    """The first layer's gradient w.r.t. its input (the data): one more matmul of its size."""
    first = size.hidden[0] if size.hidden else size.classes
    return 2 * size.features * first


MLP = Workload(
    name="mlp",
    description="dense MLP (ReLU), matmul-bound",
    sizes=SIZES,
    batch=BATCH,
    build=build,
    input_shape=lambda s: (s.features,),
    num_classes=lambda s: s.classes,
    forward_flops=forward_flops,
    input_grad_flops=input_grad_flops,
    knobs={
        # every hidden layer's width; hidden layers of the first one's width
        "width": Knob(lambda s: s.hidden[0], lambda s, v: replace(s, hidden=(v,) * len(s.hidden))),
        "depth": Knob(lambda s: len(s.hidden), lambda s, v: replace(s, hidden=(s.hidden[0],) * v)),
    },
)
