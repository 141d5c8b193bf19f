"""MultiWorkerMirroredStrategy for a cluster worker (imports TensorFlow): strategy, agreement, barriers.

Every collective must be entered by every worker the same number of times in the same order, so
nothing that depends on local timing may decide how many steps run: the workers agree on the
slowest calibration instead. ``ReduceOp`` has only SUM and MEAN, so agreement goes through
``strategy.gather`` and a local max.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from bench.cases import DeviceConfig


def make_strategy(device: DeviceConfig) -> tuple[tf.distribute.Strategy, str]:
    """The strategy (from TF_CONFIG in the environment): RING on CPUs, NCCL on GPUs."""
    impl = tf.distribute.experimental.CommunicationImplementation
    chosen = impl.RING if device.kind == "cpu" else impl.NCCL
    options = tf.distribute.experimental.CommunicationOptions(implementation=chosen)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    return strategy, f"CollectiveAllReduce/{chosen.name}"


def gather_rows(strategy: tf.distribute.Strategy, values: Sequence[float]) -> np.ndarray:
    """Every worker's ``values``, one row per worker in rank order (float64, all-gathered)."""
    row = tf.constant([list(values)], dtype=tf.float64)
    per_replica = strategy.experimental_distribute_values_from_function(lambda ctx: row)
    rows = strategy.gather(per_replica, axis=0).numpy()
    local = len(strategy.extended.worker_devices)
    return rows[::local]  # each worker contributed one identical row per local device


def agree_max(strategy: tf.distribute.Strategy, value: float) -> float:
    """The largest of every worker's ``value``."""
    return float(np.max(gather_rows(strategy, [value])))


def barrier(strategy: tf.distribute.Strategy) -> None:
    """Return only when every worker got here (a one-scalar all-reduce)."""
    one = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(1.0))
    strategy.reduce(tf.distribute.ReduceOp.SUM, one, axis=None)


def is_peer_failure(e: BaseException) -> bool:
    """A collective failed because another worker died or the cluster broke (nothing to retry)."""
    return isinstance(e, (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)) or (
        isinstance(e, tf.errors.OpError) and "ollective ops is aborted" in str(e)
    )
