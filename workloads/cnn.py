"""Residual CNN; at the ``standard`` profile exactly ResNet-50 v1.5 on 224x224x3, 1000 classes.

ResNet-50 v1.5 (stride in the 3x3 convolution of each bottleneck, convolutions without bias,
batch normalisation after each) is the model of NVIDIA's and MLPerf's published images/s, so
``standard`` numbers can be held against them. It has 25,557,032 parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workloads.base import Knob, Workload, dense_flops


@dataclass(frozen=True)
class CNNSize:
    """Knobs of the residual CNN.

    Attributes:
        image: input height and width (pixels); channels: input channels.
        stem_kernel, stem_stride, stem_pool: the first convolution, and whether a 3x3/2 max-pool
            follows it.
        blocks: bottleneck blocks per stage; widths: bottleneck width per stage (the block's
            output has 4x this many channels).
        classes: output classes.
    """

    image: int
    channels: int
    stem_kernel: int
    stem_stride: int
    stem_pool: bool
    blocks: tuple[int, ...]
    widths: tuple[int, ...]
    classes: int


RESNET50 = CNNSize(224, 3, 7, 2, True, (3, 4, 6, 3), (64, 128, 256, 512), 1000)
SIZES = {
    "smoke": CNNSize(32, 3, 3, 1, False, (1, 1), (16, 32), 10),
    "standard": RESNET50,
    "large": RESNET50,
}
BATCH = {"smoke": 16, "standard": 64, "large": 256}
EXPANSION = 4


def _conv_bn(x, filters: int, kernel: int, stride: int, name: str, relu: bool = True):
    import keras

    x = keras.layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False, name=f"{name}_conv")(x)
    x = keras.layers.BatchNormalization(epsilon=1e-5, name=f"{name}_bn")(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x) if relu else x


def _stage_strides(size: CNNSize) -> list[int]:
    return [1] + [2] * (len(size.blocks) - 1)


def build(size: CNNSize) -> Any:
    """ResNet v1.5 with bottleneck blocks; logits in float32."""
    import keras

    inputs = keras.Input((size.image, size.image, size.channels), name="images")
    x = _conv_bn(inputs, size.widths[0], size.stem_kernel, size.stem_stride, "stem")
    if size.stem_pool:
        x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
    for s, (n, width, stride) in enumerate(zip(size.blocks, size.widths, _stage_strides(size))):
        for b in range(n):
            name = f"s{s}b{b}"
            block_stride = stride if b == 0 else 1
            shortcut = x
            if b == 0:
                shortcut = _conv_bn(x, width * EXPANSION, 1, block_stride, f"{name}_proj", False)
            y = _conv_bn(x, width, 1, 1, f"{name}_a")
            y = _conv_bn(y, width, 3, block_stride, f"{name}_b")
            y = _conv_bn(y, width * EXPANSION, 1, 1, f"{name}_c", relu=False)
            x = keras.layers.ReLU(name=f"{name}_out")(keras.layers.Add(name=f"{name}_add")([y, shortcut]))
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    logits = keras.layers.Dense(size.classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, logits, name="resnet")


def _out(hw: int, stride: int) -> int:
    return -(-hw // stride)  # "same" padding: ceil(hw / stride)


def forward_flops(size: CNNSize) -> int:
    """Forward FLOPs per image: convolutions (2 per multiply-add) and the logits layer."""

    def conv(hw_out: int, k: int, cin: int, cout: int) -> int:
        return 2 * k * k * cin * cout * hw_out * hw_out

    hw = _out(size.image, size.stem_stride)
    total = conv(hw, size.stem_kernel, size.channels, size.widths[0])
    if size.stem_pool:
        hw = _out(hw, 2)
    cin = size.widths[0]
    for n, width, stride in zip(size.blocks, size.widths, _stage_strides(size)):
        for b in range(n):
            hw_out = _out(hw, stride) if b == 0 else hw
            cout = width * EXPANSION
            if b == 0:
                total += conv(hw_out, 1, cin, cout)
            total += conv(hw, 1, cin, width)
            total += conv(hw_out, 3, width, width)
            total += conv(hw_out, 1, width, cout)
            hw, cin = hw_out, cout
    return total + dense_flops(cin, size.classes)


def input_grad_flops(size: CNNSize) -> int:
    """The stem convolution reads the images: its input gradient (a transposed convolution of its size)."""
    hw = _out(size.image, size.stem_stride)
    return 2 * size.stem_kernel**2 * size.channels * size.widths[0] * hw * hw


CNN = Workload(
    name="cnn",
    description="residual CNN (ResNet-50 v1.5 at standard), conv-bound",
    sizes=SIZES,
    batch=BATCH,
    build=build,
    input_shape=lambda s: (s.image, s.image, s.channels),
    num_classes=lambda s: s.classes,
    forward_flops=forward_flops,
    input_grad_flops=input_grad_flops,
    published_as={p: "resnet50_v1.5" for p, size in SIZES.items() if size == RESNET50},
    known_as={p: "ResNet-50 v1.5" for p, size in SIZES.items() if size == RESNET50},
    knobs={"image": Knob(lambda s: s.image, lambda s, v: replace(s, image=v))},  # input height and width (pixels)
)
