"""What every workload provides: sizes per profile, a Keras model, synthetic data, FLOPs.

Only Keras 3 APIs and NumPy are used here, so the models stay backend-neutral.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PROFILES = ("smoke", "standard", "large")
MODES = ("train", "infer")


@dataclass(frozen=True)
class Knob:
    """A size knob: its value at a size, and the size with it set (``set`` may raise ValueError)."""

    get: Callable[[Any], int]
    set: Callable[[Any, int], Any]


@dataclass(frozen=True)
class Workload:
    """A parametrised model family.

    Attributes:
        name: short name used in case ids (``mlp``, ``cnn``, ``transformer``).
        description: one line for reports.
        sizes: profile name -> size object (a frozen dataclass of the family's knobs).
        batch: profile name -> default per-replica batch size (samples).
        build: size -> uncompiled ``keras.Model`` mapping inputs to float32 logits.
        input_shape: size -> per-sample input shape.
        num_classes: size -> number of output classes (labels are int32 class ids).
        forward_flops: size -> analytic forward FLOPs per sample (2 per multiply-add, 1 per
            bias add; activations, normalisation and softmax are not counted).
        input_grad_flops: size -> FLOPs per sample of the gradient with respect to the data input
            of the layers that read the data directly (the data is not trainable, so no framework
            computes it; training executes 3 x forward less this).
        published_as: profile -> the model name published figures use for exactly that size
            (``resnet50_v1.5``); a size no one publishes for has none (``bench/report/published.py``).
        known_as: profile -> the model a reader knows at exactly that size (``ResNet-50 v1.5``).
        knobs: a sweep's size knobs, name -> (size, value) -> the size with that knob set
            (ParaDnn's axes: the MLP's width and depth, the CNN's image, the transformer's
            sequence length, width and blocks); the id carries a knob only where it changes
            the size.
    """

    name: str
    description: str
    sizes: Mapping[str, Any]
    batch: Mapping[str, int]
    build: Callable[[Any], Any]
    input_shape: Callable[[Any], tuple[int, ...]]
    num_classes: Callable[[Any], int]
    forward_flops: Callable[[Any], int]
    input_grad_flops: Callable[[Any], int]
    published_as: Mapping[str, str] = field(default_factory=dict)
    known_as: Mapping[str, str] = field(default_factory=dict)
    knobs: Mapping[str, Knob] = field(default_factory=dict)

    def size(self, profile: str, knobs: Sequence[tuple[str, int]] = ()) -> Any:
        """The size object of ``profile``, with a sweep's knobs set (ValueError for a knob it has not)."""
        size = self.sizes[profile]
        for name, value in knobs:
            if name not in self.knobs:
                raise ValueError(f"{self.name} has no size knob {name!r} (it has {', '.join(self.knobs) or 'none'})")
            size = self.knobs[name].set(size, value)
        return size

    def knob_values(self, size: Any) -> dict[str, int]:
        """Each size knob's value at ``size`` (the CSV's ``size_<knob>`` columns)."""
        return {name: k.get(size) for name, k in self.knobs.items()}

    def anchored(self, profile: str, knobs: Sequence[tuple[str, int]]) -> bool:
        """Whether the knobs leave the profile's size as it is (a published or well-known model stays itself)."""
        return self.size(profile, knobs) == self.sizes[profile]

    def flops_per_sample(self, size: Any, mode: str) -> int:
        """FLOPs per sample as executed.

        Forward for ``infer``; for ``train`` the forward pass, the gradient w.r.t. the weights and the gradient w.r.t. activations, the last without the data
        input's (``input_grad_flops``), which nothing differentiates.

        Held against the dots and convolutions of XLA's compiled step in ``tests/test_workloads.py``.
        """
        fwd = self.forward_flops(size)
        return fwd if mode == "infer" else 3 * fwd - self.input_grad_flops(size)

    def model_flops_per_sample(self, size: Any, mode: str) -> int:
        """The "model FLOPs" convention of MFU papers: forward for ``infer``, 3 x forward for ``train``.

        Kept beside ``flops_per_sample`` for comparing with figures that use it; it counts the data
        input's gradient, which no framework computes (8.5% of the standard MLP's training step).
        """
        fwd = self.forward_flops(size)
        return fwd if mode == "infer" else 3 * fwd

    def make_batch(self, size: Any, batch: int, seed: int = 0) -> tuple[Any, Any]:
        """Synthetic inputs and labels, created on the current device scope.

        Returns:
            (x, y): x float32 of shape (batch, *input_shape), y int32 class ids of shape (batch,).
        """
        import keras

        shape = (batch, *self.input_shape(size))
        x = keras.random.normal(shape, dtype="float32", seed=seed)
        y = keras.random.randint((batch,), 0, self.num_classes(size), dtype="int32", seed=seed + 1)
        return x, y


def dense_flops(n_in: int, n_out: int, bias: bool = True) -> int:
    """Forward FLOPs per sample of a dense layer: 2 per multiply-add plus 1 per bias add."""
    return 2 * n_in * n_out + (n_out if bias else 0)
