"""Model-parallel layouts: which axis of which variable is split over the ``model`` mesh axis (pure)."""

from __future__ import annotations


def layout_for(path: str, shape: tuple[int, ...], n: int) -> tuple[str | None, ...] | None:
    """The model-parallel layout of one variable, or None (replicated).

    Dense kernels ``(in, out)`` split their outputs (``(None, "model")``) and their biases
    follow; attention query/key/value kernels ``(d_model, heads, head_dim)`` split their heads,
    the attention output kernel ``(heads, head_dim, d_model)`` splits its input heads (its
    bias, like norms, convolutions and batch-norm statistics, stays replicated). An axis that
    ``n`` does not divide stays whole.
    """
    name = path.rsplit("/", 1)[-1]
    if name not in ("kernel", "bias"):
        return None
    out_proj = "attention_output" in path
    if name == "kernel" and len(shape) == 2:
        axis = 1
    elif name == "kernel" and len(shape) == 3:
        axis = 0 if out_proj else 1
    elif name == "bias" and ((len(shape) == 1 and not out_proj) or len(shape) == 2):
        axis = 0  # a dense bias (out,), or a query/key/value bias (heads, head_dim)
    else:
        return None
    if shape[axis] % n:
        return None
    return tuple("model" if i == axis else None for i in range(len(shape)))


def bias_follows_kernel(path: str, shapes: dict[str, tuple[int, ...]], n: int) -> bool:
    """A dense bias is split only where its kernel is (a kernel with an unsplittable output keeps both whole)."""
    kernel = path[: -len("bias")] + "kernel"
    return kernel not in shapes or layout_for(kernel, shapes[kernel], n) is not None
