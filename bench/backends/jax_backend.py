"""The JAX backend: the same Keras workloads as jitted stateless steps, data or model parallel.

Research: ``shared/design/jax-backend.md``. The step is ``model.stateless_call`` +
``optimizer.stateless_apply`` under ``jax.jit`` with the state donated, compiled ahead of time
(``lower().compile()``: compile time on its own, and an executable that cannot retrace: a
changed input sharding is an error, not a silent recompile). A round ends by blocking on the
state (training) or the last output (inference; a device runs its queued executions in order).
Several devices: ``keras.distribution.DataParallel`` (batch sharded, weights replicated, XLA
SPMD inserts the all-reduce) or ``ModelParallel`` (dense and attention kernels sharded over a
``model`` mesh axis; the state's output shardings are pinned to its input shardings, without
which XLA hands back other shardings and the next call recompiles). Imports no TensorFlow.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import keras
import numpy as np
from keras import distribution as kd

from bench import compile_cache
from bench.backends.base import Backend, Step
from bench.backends.layouts import bias_follows_kernel, layout_for
from bench.cases import Case, DeviceConfig
from bench.hlo_flops import dot_conv_flops
from bench.loop import COPY_REPS, PROBE_REPS, CopyProbe, PlacementError, Probe, best_copy_rate, best_matmul_rate
from bench.precision import PrecisionSpec, math_mode
from workloads import WORKLOADS

# Steps in flight at once over several CPU devices. XLA's CPU collectives deadlock when many
# multi-device steps are queued (measured, jax 0.10.2 on 2 cores: 100 queued steps, data or model
# parallel, training or inference -> "Termination timeout for `all reduce RendezvousKey` of 40
# seconds exceeded", abort). Waiting for step i-2 before queueing step i keeps two in flight,
# so the devices never idle for it and nothing deadlocks. GPUs queue without bound.
CPU_IN_FLIGHT = 2
CPU_MEMORY_REASON = "JAX's CPU devices report no memory statistics (Device.memory_stats() is None)"


class JaxBackend(Backend):
    """One worker's JAX: the case's devices (platform and count fixed by the runner's environment)."""

    name = "jax"
    resets_memory_peak = False  # peak_bytes_in_use has no reset (gpu-review-2 finding 5)

    def __init__(self, device: DeviceConfig, gpu_plan: dict | None = None):
        self.device = device
        self.platform = "cpu" if device.kind == "cpu" else "gpu"
        found = jax.devices(self.platform)
        if len(found) < device.count:
            raise RuntimeError(f"JAX sees {len(found)} {self.platform} device(s); the case needs {device.count}")
        self.devices = list(found[: device.count])
        self.names = [f"{d.platform}:{d.id}" for d in self.devices]
        self.bus_ids = list((gpu_plan or {}).get("pci_bus_ids") or [])[: device.count]
        self.all_reduce = (
            "none (1 replica)"
            if device.count == 1
            else "XLA SPMD collectives (NCCL)"
            if device.kind == "gpu"
            else "XLA SPMD collectives (in-process CPU)"
        )
        self._sync_on: Any = None
        self.cache_events = compile_cache.Events()
        jax.monitoring.register_event_listener(self.cache_events.event)
        jax.monitoring.register_event_duration_secs_listener(self.cache_events.duration)

    def versions(self) -> dict:
        import jaxlib

        return {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", None), "keras": keras.__version__}

    def apply_precision(self, spec: PrecisionSpec, device_kind: str) -> str:
        keras.config.set_dtype_policy(spec.keras_policy)
        jax.config.update("jax_default_matmul_precision", spec.jax_matmul_precision)
        mm = jax.config.jax_default_matmul_precision
        p = keras.config.dtype_policy()
        # JAX's "default" runs float32 matmuls on TF32 where the GPU has it; "float32" never does.
        # The same words as TensorFlow's for the same math (gpu-review-2 finding 13)
        return math_mode(p.compute_dtype, p.variable_dtype, device_kind, fp32_on_tf32=mm != "float32")

    def matmul_probe(self, spec: PrecisionSpec, n: int, budget_s: float) -> Probe:
        dtype = jnp.dtype(spec.compute_dtype)
        dev = self.devices[0]
        ka, kb = jax.random.split(jax.random.PRNGKey(0))
        a = jax.device_put(jax.random.normal(ka, (n, n), jnp.float32).astype(dtype), dev)
        b = jax.device_put((jax.random.normal(kb, (n, n), jnp.float32) / n**0.5).astype(dtype), dev)

        def chain(a: Any, b: Any) -> Any:
            c = a
            for _ in range(PROBE_REPS):
                c = c @ b
            return c

        with jax.default_matmul_precision(spec.jax_matmul_precision):
            fn = jax.jit(chain).lower(a, b).compile()

        def run() -> None:
            jax.block_until_ready(fn(a, b))

        run()
        best = best_matmul_rate(run, n, budget_s)
        return Probe(best / 1e12, n, jnp.dtype(dtype).name)

    def copy_probe(self, n_bytes: int, budget_s: float) -> CopyProbe:
        x = jax.device_put(jnp.zeros((n_bytes // 4,), jnp.float32), self.devices[0])

        def chain(x: Any) -> Any:
            for _ in range(COPY_REPS):
                x = x + 1.0  # XLA fuses the passes into one: each is kept apart by the barrier below
                x = jax.lax.optimization_barrier(x)
            return x

        fn = jax.jit(chain).lower(x).compile()

        def run() -> None:
            jax.block_until_ready(fn(x))

        run()
        return CopyProbe(best_copy_rate(run, n_bytes, budget_s) / 1e9, n_bytes)

    # -- building ---------------------------------------------------------------------------

    def _distribution(self, case: Case, w: Any, size: Any) -> tuple[Any, dict]:
        """The case's Keras distribution (None on one device) and the layouts asked for."""
        n = len(self.devices)
        if n == 1:
            return None, {}
        if case.parallelism == "data":
            return kd.DataParallel(devices=self.names), {}
        # learn the variables' paths and shapes from an unplaced build, then name each one exactly
        probe = w.build(size)
        shapes = {v.path: tuple(v.shape) for v in probe.weights}
        keras.backend.clear_session()
        mesh = kd.DeviceMesh((1, n), ("batch", "model"), self.names)
        layout_map = kd.LayoutMap(mesh)
        wanted: dict[str, tuple] = {}
        for path, shape in shapes.items():
            lay = layout_for(path, shape, n)
            if lay is None or (path.endswith("/bias") and not bias_follows_kernel(path, shapes, n)):
                continue
            layout_map[f"^{re.escape(path)}$"] = lay
            wanted[path] = lay
        if not wanted:
            raise PlacementError(f"model parallelism over {n} devices: no dense or attention kernel splits {n} ways")
        return kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch"), wanted

    def build(self, case: Case, profile: str) -> Step:
        w = WORKLOADS[case.workload]
        size = w.size(profile, case.knobs)
        dist, wanted = self._distribution(case, w, size)
        kd.set_distribution(dist)
        model = w.build(size)
        optimizer: Any = None
        if case.mode == "train":
            optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
            if case.precision_spec.loss_scaling:
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(model.trainable_variables)
        x, y = w.make_batch(size, case.global_batch, seed=17)
        if dist is not None:
            x = jax.device_put(x, dist.get_data_layout(x.shape).backend_layout)
            y = jax.device_put(y, dist.get_data_layout(y.shape).backend_layout)
        else:
            x, y = jax.device_put(x, self.devices[0]), jax.device_put(y, self.devices[0])
        tv = [v.value for v in model.trainable_variables]
        ntv = [v.value for v in model.non_trainable_variables]
        paths = [v.path for v in model.trainable_variables] + [v.path for v in model.non_trainable_variables]
        holder = _Holder(model=model, optimizer=optimizer, x=x, y=y, wanted=wanted, paths=paths, distribution=dist)
        bound = _InFlight(CPU_IN_FLIGHT if dist is not None and self.platform == "cpu" else None)
        self.cache_events.reset()  # the step's own compiles from here (Keras' build compiled its own before)
        t0 = time.perf_counter()
        if case.mode == "train":
            ov = [v.value for v in optimizer.variables]
            holder.state = (tv, ntv, ov)
            fn = _train_fn(model, optimizer, case.precision_spec.loss_scaling)
            state_sh = jax.tree_util.tree_map(lambda a: a.sharding, holder.state)
            loss_sh = (
                jax.sharding.NamedSharding(dist.device_mesh.backend_mesh, jax.sharding.PartitionSpec())
                if dist
                else None
            )
            jitted = jax.jit(fn, donate_argnums=0, out_shardings=(loss_sh, state_sh) if dist else None)
            lowered = jitted.lower(holder.state, x, y)
            compiled = lowered.compile()

            def step() -> Any:
                loss, holder.state = compiled(holder.state, x, y)
                return bound(loss)

            self._sync_on = lambda: holder.state
        elif case.mode == "serve":  # one device; compiled per bucket size on first use (warmed before timing)
            holder.state = (tv, ntv)
            fn, host, dev = jax.jit(_infer_fn(model)), np.asarray(jax.device_get(x)), self.devices[0]

            def serve(n: int) -> Any:
                holder.last = fn(holder.state, jax.device_put(host[:n], dev))
                return np.asarray(holder.last)  # outputs back on the host (and so synced)

            self._sync_on = lambda: holder.last
            holder.in_shardings = jax.tree_util.tree_map(lambda a: a.sharding, holder.state)
            return Step(
                step=lambda: serve(case.per_replica_batch),
                params=int(model.count_params()),
                xla_scope="forward (jax.jit, one executable per bucket size)",
                native=holder,
                serve=serve,
                extra={"parallelism": case.parallelism},
            )
        else:
            holder.state = (tv, ntv)
            lowered = jax.jit(_infer_fn(model)).lower(holder.state, x)
            compiled = lowered.compile()

            def step() -> Any:
                holder.last = bound(compiled(holder.state, x))
                return holder.last

            self._sync_on = lambda: holder.last
        compile_s = time.perf_counter() - t0
        holder.in_shardings = jax.tree_util.tree_map(lambda a: a.sharding, holder.state)
        return Step(
            step=step,
            params=int(model.count_params()),
            xla_scope="whole step (jax.jit, compiled ahead of time)",
            native=holder,
            compile_s=compile_s,
            extra={
                "parallelism": case.parallelism,
                **_xla_figures(lowered, compiled, self.platform),
                **self.cache_events.figures(_cache_on(), compile_s),
            },
        )

    def sync(self) -> None:
        jax.block_until_ready(self._sync_on() if self._sync_on else None)

    def check_placement(self, built: Step, first: Any) -> dict:
        """Every state leaf and the data on exactly the case's devices and platform; shardings kept.

        Model parallel: each kernel asked to split is split on ``model`` over every device.
        After a step the state must carry the shardings it went in with (else the next call
        would need another executable).
        """
        h: _Holder = built.native
        want = set(self.devices)
        bad: list[str] = []
        leaves = jax.tree_util.tree_leaves(h.state)
        for a in leaves + [h.x, h.y, h.last if built.serve else first]:  # serve: first is on the host
            if set(a.sharding.device_set) != want:
                bad.append(f"{a.shape} on {sorted(str(d) for d in a.sharding.device_set)}")
            elif any(d.platform != self.devices[0].platform for d in a.sharding.device_set):
                bad.append(f"{a.shape} on platform {[d.platform for d in a.sharding.device_set]}")
        drift = [
            f"{s} -> {a.sharding}"
            for s, a in zip(jax.tree_util.tree_leaves(h.in_shardings), leaves)
            if not s.is_equivalent_to(a.sharding, a.ndim)
        ]
        # the model's variables were donated to the step: read the weights from the live state
        weights = dict(zip(h.paths, list(h.state[0]) + list(h.state[1])))
        split = {}
        for path, lay in h.wanted.items():
            a = weights[path]
            spec = tuple(a.sharding.spec) if hasattr(a.sharding, "spec") else ()
            split[path] = spec + (None,) * (a.ndim - len(spec)) == tuple(lay)
        if bad or drift[:1] or not all(split.values()):
            raise PlacementError(
                f"expected state, data and outputs on {self.names}: "
                + "; ".join(
                    bad[:3]
                    + [f"sharding changed by the step: {d}" for d in drift[:2]]
                    + [f"{p} not split as {h.wanted[p]}" for p, ok in split.items() if not ok][:3]
                )
            )
        data_spec = getattr(h.x.sharding, "spec", None)  # the input's mesh axis per dimension ([] on one device)
        facts: dict = {
            "state_leaves": len(leaves),
            "data_sharding": [None if a is None else str(a) for a in data_spec or ()],
        }
        if h.wanted:
            facts["model_parallel_split"] = sorted(h.wanted)
            facts["model_parallel_split_fraction"] = round(
                sum(int(weights[p].size) for p in h.wanted) / max(1, sum(int(w.size) for w in weights.values())), 4
            )
        return facts

    def final_loss(self, last: Any) -> float:
        return float(last)

    def memory_peaks(self, virtual_cpu: bool) -> list[int | None]:
        out: list[int | None] = []
        for d in self.devices:
            stats = d.memory_stats()
            out.append(int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None)
        return out

    def memory_note(self) -> str:
        if self.platform == "cpu":
            return CPU_MEMORY_REASON
        return (
            "peak_bytes_in_use over the worker's life (JAX cannot reset it): the case's own where above every "
            "earlier case's and the matmul probe's, else XLA's estimate of the step"
        )

    def is_oom(self, e: BaseException) -> bool:
        return "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e)

    def gpu_bus_ids(self) -> list[str]:
        return self.bus_ids

    def end_case(self) -> None:
        kd.set_distribution(None)
        keras.config.set_dtype_policy("float32")
        keras.backend.clear_session()
        self._sync_on = None


class _InFlight:
    """Bounds the steps queued at once: before returning step i's output, waits for step i-depth's."""

    def __init__(self, depth: int | None):
        self.depth = depth
        self.queue: deque[Any] = deque()

    def __call__(self, out: Any) -> Any:
        if self.depth is not None:
            self.queue.append(out)
            if len(self.queue) > self.depth:
                jax.block_until_ready(self.queue.popleft())
        return out


@dataclass
class _Holder:
    """A case's live state between steps (donated buffers are replaced at every call)."""

    model: Any
    optimizer: Any
    x: Any
    y: Any
    wanted: dict  # model parallel: variable path -> the layout asked for
    paths: list  # variable paths in state order: trainable, then non-trainable
    distribution: Any
    state: Any = None
    last: Any = None
    in_shardings: Any = None


def _train_fn(model: Any, optimizer: Any, scaled: bool) -> Any:
    """``(state, x, y) -> (loss, state)``: forward, backward and the optimizer, all in one XLA program."""
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True)  # mean over the global batch

    def loss_fn(tv: Any, ntv: Any, ov: Any, x: Any, y: Any) -> Any:
        logits, ntv = model.stateless_call(tv, ntv, x, training=True)
        loss = loss_obj(y, logits)
        out = loss
        if scaled:  # as keras' JAX trainer does: the scale is optimizer state
            with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, ov))):
                out = optimizer.scale_loss(loss)
        return out, (loss, ntv)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def train_step(state: Any, x: Any, y: Any) -> Any:
        tv, ntv, ov = state
        (_, (loss, ntv)), grads = grad_fn(tv, ntv, ov, x, y)
        tv, ov = optimizer.stateless_apply(ov, grads, tv)
        return loss, (tv, ntv, ov)

    return train_step


def _infer_fn(model: Any) -> Any:
    def infer_step(state: Any, x: Any) -> Any:
        tv, ntv = state
        logits, _ = model.stateless_call(tv, ntv, x, training=False)
        return logits

    return infer_step


def _cache_on() -> bool:
    """The persistent compile cache is in use in this process (the runner's variables set its folder)."""
    return bool(jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir)


def _xla_figures(lowered: Any, compiled: Any, platform: str) -> dict:
    """XLA's own FLOP count and buffer sizes of the compiled step, and the dots and convolutions as lowered.

    The cost analysis and buffers are per device under SPMD, where reported. The dots and convolutions
    are the whole step's as lowered, before any library call replaces them: valid on GPUs too, where
    the cost analysis misses cuBLAS and cuDNN (there it is kept under a name that says so).
    """
    out: dict = {}
    try:
        out["hlo_dot_flops_per_step"] = float(sum(dot_conv_flops(lowered.as_text(dialect="hlo")).values()))
    except Exception:  # best effort: a text form this parser does not know
        pass
    try:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        if cost and cost.get("flops"):
            # on GPUs the dots are cuBLAS/cuDNN calls the analysis does not see: not a FLOP count there
            key = "xla_flops_per_device_step" if platform == "cpu" else "xla_cost_flops_without_library_calls"
            out[key] = float(cost["flops"])
    except Exception:  # best effort: not every platform and version has it
        pass
    try:
        mem = compiled.memory_analysis()
        if mem is not None:
            out["xla_temp_bytes"] = int(mem.temp_size_in_bytes)
            out["xla_argument_bytes"] = int(mem.argument_size_in_bytes)
            out["xla_output_bytes"] = int(mem.output_size_in_bytes)
            out["xla_alias_bytes"] = int(mem.alias_size_in_bytes)
            # the step's device total as the JAX docs give it (host-offloading notebook): temp +
            # arguments + outputs - aliased; a prediction beside the allocator's measured peak
            out["xla_step_memory_estimate_bytes"] = (
                out["xla_temp_bytes"] + out["xla_argument_bytes"] + out["xla_output_bytes"] - out["xla_alias_bytes"]
            )
    except Exception:  # best effort, as above
        pass
    return out
