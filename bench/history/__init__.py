"""Nightly history: one summary line per night per testbed, the nightly judge, change points.

Pure Python + numpy/scipy; nothing here imports TensorFlow, so the judge starts without loading
it (the package still installs TensorFlow: it is a dependency of accelbench).
"""
