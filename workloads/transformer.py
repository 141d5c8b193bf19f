"""Transformer encoder blocks (post-LN, as BERT); at ``standard`` BERT-base-sized blocks.

Inputs are synthetic token embeddings of shape (seq_len, d_model), so no embedding lookup is
timed; a mean-pool and a logits layer close the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workloads.base import Knob, Workload, dense_flops


@dataclass(frozen=True)
class TransformerSize:
    """Knobs: sequence length, model width, heads, feed-forward width, blocks, classes."""

    seq_len: int
    d_model: int
    heads: int
    ffn: int
    layers: int
    classes: int


SIZES = {
    "smoke": TransformerSize(seq_len=32, d_model=64, heads=4, ffn=256, layers=2, classes=10),
    "standard": TransformerSize(seq_len=128, d_model=768, heads=12, ffn=3072, layers=4, classes=1000),
    "large": TransformerSize(seq_len=512, d_model=768, heads=12, ffn=3072, layers=12, classes=1000),
}
BATCH = {"smoke": 16, "standard": 32, "large": 64}


def build(size: TransformerSize) -> Any:
    """Stack of encoder blocks; logits in float32."""
    import keras

    if size.d_model % size.heads:
        raise ValueError(f"d_model {size.d_model} is not divisible by heads {size.heads}")
    inputs = keras.Input((size.seq_len, size.d_model), name="embeddings")
    x = inputs
    for i in range(size.layers):
        attn = keras.layers.MultiHeadAttention(size.heads, size.d_model // size.heads, name=f"block{i}_attn")(x, x)
        x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"block{i}_ln1")(keras.layers.Add()([x, attn]))
        f = keras.layers.Dense(size.ffn, activation="gelu", name=f"block{i}_ffn1")(x)
        f = keras.layers.Dense(size.d_model, name=f"block{i}_ffn2")(f)
        x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"block{i}_ln2")(keras.layers.Add()([x, f]))
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    logits = keras.layers.Dense(size.classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, logits, name="transformer")


def forward_flops(size: TransformerSize) -> int:
    """Forward FLOPs per sequence: projections, attention matmuls, feed-forward, logits."""
    s, d, f = size.seq_len, size.d_model, size.ffn
    projections = 4 * s * dense_flops(d, d)  # Q, K, V and output
    attention = 2 * (2 * s * s * d)  # Q K^T and softmax(.) V over all heads
    feed_forward = s * (dense_flops(d, f) + dense_flops(f, d))
    return size.layers * (projections + attention + feed_forward) + dense_flops(d, size.classes)


def input_grad_flops(size: TransformerSize) -> int:
    """The first block's query, key and value projections read the data: their input gradients."""
    return 3 * size.seq_len * 2 * size.d_model * size.d_model if size.layers else 2 * size.d_model * size.classes


def _with_width(s: TransformerSize, d_model: int) -> TransformerSize:
    heads = max(1, d_model // 64)
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not divisible by its {heads} heads of 64: take a multiple of 64")
    return replace(s, d_model=d_model, heads=heads, ffn=4 * d_model)


TRANSFORMER = Workload(
    name="transformer",
    description="transformer encoder blocks (BERT-base-sized at standard)",
    sizes=SIZES,
    batch=BATCH,
    build=build,
    input_shape=lambda s: (s.seq_len, s.d_model),
    num_classes=lambda s: s.classes,
    forward_flops=forward_flops,
    input_grad_flops=input_grad_flops,
    known_as={
        p: f"{s.layers} BERT-base blocks, sequence {s.seq_len}"
        for p, s in SIZES.items()
        if (s.d_model, s.heads, s.ffn) == (768, 12, 3072)
    },
    knobs={
        "seq": Knob(lambda s: s.seq_len, lambda s, v: replace(s, seq_len=v)),
        "dmodel": Knob(lambda s: s.d_model, _with_width),  # heads of 64 (at least one), a feed-forward of 4 x d_model
        "layers": Knob(lambda s: s.layers, lambda s, v: replace(s, layers=v)),
    },
)
