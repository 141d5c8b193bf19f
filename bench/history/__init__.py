"""Nightly history: one summary line per night per testbed, the nightly judge, change points.

Pure Python + numpy/scipy; nothing here imports TensorFlow, so the hosted judge job stays light.
"""
