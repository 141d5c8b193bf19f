"""What a worker never uses, hidden from it before its framework is imported (a quicker start).

Pure: no framework, nothing of ours; workers (:func:`bench.backends.factory.make`) and the framework
probes call :func:`hide_unused` first.
"""

from __future__ import annotations

import sys

# What a worker of each backend never uses but its frameworks import where installed, each in a
# try/except ImportError of theirs: Keras 3 imports JAX (a shim in its Orbax callback), pandas (its
# array adapters) and matplotlib (its image gallery) under every backend, and TensorFlow's tf.lite
# imports JAX. Hidden from the worker they are skipped as if not installed: measured on a 2-core VM,
# importing TensorFlow and Keras 6.2 s -> 4.1 s, Keras on torch 6.4 s -> 4.2 s, Keras on JAX 3.0 s ->
# 2.1 s (docs/benchmarks.md). Reports, the only users of pandas and matplotlib, run in the parent.
UNUSED = {
    "tensorflow": ("jax", "jaxlib", "torch", "pandas", "matplotlib"),
    "jax": ("tensorflow", "torch", "pandas", "matplotlib"),
    "torch": ("tensorflow", "jax", "jaxlib", "pandas", "matplotlib"),
    "torch-native": ("tensorflow", "jax", "jaxlib", "pandas", "matplotlib"),
}


class _Hidden:
    """Python's path finder, except that it finds none of ``names`` (top-level packages)."""

    def __init__(self, finder, names: frozenset[str]) -> None:
        self.finder, self.names = finder, names

    def find_spec(self, name, path=None, target=None):
        # None, as for a package not installed (an error instead would break those who ask find_spec)
        if name.partition(".")[0] in self.names:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attr):  # the rest (find_distributions: versions stay readable) as before
        return getattr(self.finder, attr)


def hide_unused(backend: str) -> tuple[str, ...]:
    """In a worker, before its framework is imported: the packages ``backend`` never uses cannot be imported.

    Returns those hidden: already imported ones stay, and a second call hides nothing more. This process only.
    """
    names = frozenset(n for n in UNUSED.get(backend, ()) if n not in sys.modules)
    if not names or any(isinstance(f, _Hidden) for f in sys.meta_path):
        return ()
    sys.meta_path[:] = [_Hidden(f, names) if getattr(f, "__name__", "") == "PathFinder" else f for f in sys.meta_path]
    return tuple(sorted(names))
