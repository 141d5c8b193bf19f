"""The compiled step of a case: model, optimizer, device-resident data, XLA scope.

TensorFlow-specific, like ``bench.measure`` (which re-exports what the worker uses).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from bench.cases import Case
from workloads import WORKLOADS


class SyncedLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras' LossScaleOptimizer with the finiteness check agreed across replicas.

    Keras decides "skip the step and halve the scale" from replica 0's own gradients (it
    assumes they are already all-reduced; in a custom loop they are not, the inner optimizer
    all-reduces after the check). A non-finite gradient on any other replica was applied and
    destroyed the weights. Here every replica contributes its flag to an all-reduce, so all
    replicas skip together, and under XLA no replica can take the other branch of the
    ``cond`` and leave a collective waiting.
    """

    def check_finite(self, grads: Any) -> Any:
        """True only when every replica's gradients are finite."""
        finite = super().check_finite(grads)
        ctx = tf.distribute.get_replica_context()
        if ctx is None or ctx.num_replicas_in_sync == 1:
            return finite
        bad = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(finite), tf.float32))
        return tf.equal(bad, 0.0)


@dataclass
class Built:
    """A case's step function and everything it closes over.

    ``xla_scope`` says what XLA compiles: ``whole step`` for training on one device,
    ``forward+backward`` for training over several (the optimizer, with its all-reduce, runs
    outside XLA), ``forward`` for inference, None without XLA.
    ``graph_ops`` lists the op types of the traced step, from which
    :func:`all_reduce_used` reads the all-reduce that really ran.
    """

    step: Callable[[], Any]
    model: keras.Model
    params: int
    inputs: Any
    optimizer: Any = None
    xla_scope: str | None = None
    concrete: Callable[[], Any] | None = None
    serve: ServeStep | None = None  # serve: one padded batch of n requests, host to host

    def graph_ops(self) -> set[str]:
        """Op types of the traced step, nested functions included (empty before the first call)."""
        if self.concrete is None:
            return set()
        try:
            gdef = self.concrete().graph.as_graph_def()
        except Exception:  # nothing traced yet, or no graph to read
            return set()
        ops = {n.op for n in gdef.node}
        for f in gdef.library.function:
            ops.update(n.op for n in f.node_def)
        return ops


def all_reduce_used(ops: set[str], configured: str) -> str:
    """The all-reduce the traced step really contains: NCCL ops, collective ops, or ``configured``.

    Under XLA, MirroredStrategy swaps the configured cross-device ops for CollectiveAllReduce
    (with only a log warning), so the configured name alone can be wrong.
    """
    nccl = any(o.startswith("Nccl") for o in ops)
    collective = any(o.startswith("CollectiveReduce") or o.startswith("CollectiveAllReduce") for o in ops)
    if nccl and collective:
        return "NcclAllReduce+CollectiveAllReduce"
    if nccl:
        return "NcclAllReduce"
    if collective:
        return "CollectiveAllReduce"
    return configured


def build_case(case: Case, profile: str, strategy: tf.distribute.Strategy, names: Sequence[str]) -> Built:
    """Model, optimizer, device-resident synthetic data and the compiled step of ``case``.

    With XLA, training compiles only the forward and backward pass; the optimizer (and so the
    gradient all-reduce and the loss-scale bookkeeping) runs outside XLA. Compiling the whole
    replica step fails under MirroredStrategy on GPUs: Keras' optimizer calls ``merge_call``,
    which XLA's no-merge-call path forbids (keras-team/tf-keras#385, keras-team/keras#21366).
    """
    w = WORKLOADS[case.workload]
    size = w.size(profile, case.knobs)
    with strategy.scope():
        model = w.build(size)
        optimizer: Any = None
        if case.mode == "train":
            optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
            if case.precision_spec.loss_scaling:
                optimizer = SyncedLossScaleOptimizer(optimizer)
            optimizer.build(model.trainable_variables)

    batches: dict[int, tuple[Any, Any]] = {}

    def part(i: int) -> Callable[[Any], Any]:
        # Called once per replica; the device scope puts each replica's data on its device
        # (distribute_values_from_function alone leaves it on the first device).
        def fn(ctx: Any) -> Any:
            r = ctx.replica_id_in_sync_group  # global across workers: rank x local devices + local index
            if r not in batches:
                with tf.device(names[r % len(names)]):  # names: this worker's devices
                    batches[r] = w.make_batch(size, case.per_replica_batch, seed=17 + r)
            return batches[r][i]

        return fn

    x = strategy.experimental_distribute_values_from_function(part(0))
    y = strategy.experimental_distribute_values_from_function(part(1))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    global_batch = case.global_batch
    scaled_loss = case.precision_spec.loss_scaling

    def grads_and_loss(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
            scaled = optimizer.scale_loss(loss) if scaled_loss else loss
        return tape.gradient(scaled, model.trainable_variables), loss

    def infer_replica(x: Any, y: Any) -> Any:
        return model(x, training=False)

    # one replica (OneDeviceStrategy): XLA compiles the whole training step, optimizer and loss
    # scaling included, as JAX does; the split below is only for MirroredStrategy's merge_call
    whole = case.xla and case.mode == "train" and len(names) == 1 and case.nodes == 1
    if case.xla and not whole:
        grads_and_loss = tf.function(grads_and_loss, jit_compile=True)
    if case.xla:
        infer_replica = tf.function(infer_replica, jit_compile=True)

    def train_replica(x: Any, y: Any) -> Any:
        grads, loss = grads_and_loss(x, y)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    if whole:
        train_replica = tf.function(train_replica, jit_compile=True)

    replica = train_replica if case.mode == "train" else infer_replica

    @tf.function
    def step(x: Any, y: Any) -> Any:
        return strategy.run(replica, args=(x, y))

    scope = None
    if case.xla:
        scope = ("whole step" if whole else "forward+backward") if case.mode == "train" else "forward"
    if case.mode == "serve":  # one device: requests come from and go back to the host
        serve = ServeStep(model, w.make_batch(size, case.per_replica_batch, seed=17)[0], names[0], case.xla)
        return Built(
            step=lambda: serve(case.per_replica_batch),
            model=model,
            params=int(model.count_params()),
            inputs=None,
            xla_scope=scope,
            serve=serve,
        )
    return Built(
        step=lambda: step(x, y),
        model=model,
        params=int(model.count_params()),
        inputs=x,
        optimizer=optimizer,
        xla_scope=scope,
        concrete=lambda: step.get_concrete_function(x, y),
    )


class ServeStep:
    """A serve case's step: ``n`` requests in one padded batch, from the host and back to it.

    The first ``n`` requests' inputs are copied from host memory to the device, the forward pass
    runs (traced, or compiled with XLA, once per bucket size), the outputs are copied back.
    ``out_device`` is where the last forward pass ran, for the placement check.
    """

    def __init__(self, model: keras.Model, batch: Any, device: str, xla: bool):
        self.host = keras.ops.convert_to_numpy(batch)
        self.device = device
        self.out_device = ""

        def forward(x: Any) -> Any:
            return model(x, training=False)

        self.fwd = tf.function(forward, jit_compile=xla, reduce_retracing=False)

    def __call__(self, n: int) -> Any:
        """Serve ``n`` requests; their outputs, on the host."""
        with tf.device(self.device):
            y = self.fwd(tf.constant(self.host[:n]))
        self.out_device = y.device
        return y.numpy()
