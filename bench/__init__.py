"""accelbench: trustworthy CPU / GPU / multi-GPU / mixed-precision benchmarks on TensorFlow."""

__version__ = "0.1.0"
