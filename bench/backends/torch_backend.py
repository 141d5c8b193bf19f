"""Keras on torch: the same Keras workloads, the step a Keras guide writes for torch, DDP over devices.

Research: ``shared/design/torch-backend.md``. The step is Keras' own torch training step, written
out as the guide does (``guides/custom_train_step_in_torch.py``): forward, ``zero_grad``,
``backward``, then Keras' optimizer ``apply`` under ``no_grad`` (SGD 0.01, momentum 0.9, as on
TensorFlow and JAX; a ``LossScaleOptimizer`` for fp16). Keras' torch backend runs eagerly; the
compile switch (``-compile`` in ids) wraps forward and loss in ``torch.compile`` (inductor,
default mode, ``dynamic=False``): Keras' layers break the graph in places, so the graphs and
breaks are counted and recorded; backward runs through AOTAutograd, the optimizer eagerly.

Precision: the Keras dtype policy, and torch's own TF32 switches set and read back for both
matmul and cuDNN (torch runs convolutions on TF32 by default: ``fp32`` turns both off). One
API only (the legacy flags): mixing them with ``fp32_precision`` raises in torch 2.11.

Several devices: :mod:`bench.torch_ddp` (one process per device, DDP over NCCL or gloo; this
process is the rank its environment names). Imports neither TensorFlow nor JAX.
"""

from __future__ import annotations

import gc
from typing import Any

import torch

from bench import torch_ddp
from bench.backends.base import Backend, Step
from bench.cases import Case, DeviceConfig
from bench.loop import COPY_REPS, PROBE_REPS, CopyProbe, PlacementError, Probe, best_copy_rate, best_matmul_rate
from bench.precision import PrecisionSpec, math_mode

CPU_MEMORY_REASON = "torch keeps no allocator statistics for the CPU (torch.cuda.max_memory_allocated is CUDA's)"
COMPILE_SCOPE = "forward+loss (torch.compile, inductor); backward AOTAutograd; optimizer eager"


class TorchBackend(Backend):
    """One worker's torch: one device of the case (its rank's, under DDP)."""

    name = "torch"
    resets_memory_peak = True  # torch.cuda.reset_peak_memory_stats

    def __init__(self, device: DeviceConfig, gpu_plan: dict | None = None):
        self.device = device
        self.group = torch_ddp.join(device)  # None on one device
        rank = self.group.rank if self.group else 0
        if device.kind == "gpu":
            seen = torch.cuda.device_count()
            if seen < device.count:
                raise RuntimeError(f"torch sees {seen} GPU(s); the case needs {device.count}")
            self.dev = torch.device("cuda", rank)
            torch.cuda.set_device(self.dev)
        else:
            self.dev = torch.device("cpu")
        self.names = [f"{self.dev.type}:{i}" for i in range(device.count)]
        self.bus_ids = list((gpu_plan or {}).get("pci_bus_ids") or [])[: device.count]
        self.all_reduce = torch_ddp.all_reduce_text(device)
        self._graphs: Any = None

    def versions(self) -> dict:
        import keras

        return {"torch": torch.__version__, "keras": keras.__version__, "torch_cuda_build": torch.version.cuda}

    def threads(self) -> dict:
        return {"intra_op_threads": torch.get_num_threads(), "inter_op_threads": torch.get_num_interop_threads()}

    def apply_precision(self, spec: PrecisionSpec, device_kind: str) -> str:
        import keras

        keras.config.set_dtype_policy(spec.keras_policy)
        p = keras.config.dtype_policy()
        return self._math(spec, p.compute_dtype, p.variable_dtype, device_kind)

    def _math(self, spec: PrecisionSpec, compute: str, variables: str, device_kind: str) -> str:
        """Sets torch's TF32 switches (matmul and cuDNN) as the spec says; the math mode read back from them."""
        torch.backends.cuda.matmul.allow_tf32 = spec.tf32
        torch.backends.cudnn.allow_tf32 = spec.tf32
        mm, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        words = f"torch TF32: matmul {'on' if mm else 'off'}, cuDNN {'on' if conv else 'off'}"
        return f"{math_mode(compute, variables, device_kind, fp32_on_tf32=mm and conv)} ({words})"

    def matmul_probe(self, spec: PrecisionSpec, n: int, budget_s: float) -> Probe:
        dtype = getattr(torch, spec.compute_dtype)
        self._math(spec, spec.compute_dtype, "float32", self.device.kind)  # the case's TF32 switches
        g = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(n, n, generator=g).to(self.dev, dtype)
        b = (torch.randn(n, n, generator=g) / n**0.5).to(self.dev, dtype)

        @torch.no_grad()
        def run() -> None:
            c = a
            for _ in range(PROBE_REPS):
                c = c @ b
            self.sync()

        run()
        best = best_matmul_rate(run, n, budget_s)
        return Probe(best / 1e12, n, spec.compute_dtype)

    def copy_probe(self, n_bytes: int, budget_s: float) -> CopyProbe:
        x = torch.zeros(n_bytes // 4, dtype=torch.float32, device=self.dev)
        y = torch.empty_like(x)

        @torch.no_grad()
        def run() -> None:
            a, b = x, y
            for _ in range(COPY_REPS):
                torch.add(a, 1.0, out=b)
                a, b = b, a
            self.sync()

        run()
        return CopyProbe(best_copy_rate(run, n_bytes, budget_s) / 1e9, n_bytes)

    # -- building ---------------------------------------------------------------------------

    def build(self, case: Case, profile: str) -> Step:
        import keras

        from workloads import WORKLOADS

        w = WORKLOADS[case.workload]
        size = w.size(profile, case.knobs)
        rank = self.group.rank if self.group else 0
        model = w.build(size)
        x, y = w.make_batch(size, case.per_replica_batch, seed=17 + rank)  # each rank its own shard of the batch
        x, y = x.to(self.dev), y.to(self.dev)
        params = int(model.count_params())
        net = self.group.wrap(model, self.dev) if self.group else model
        loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        if case.mode == "train":
            optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
            if case.precision_spec.loss_scaling:
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(model.trainable_variables)
            trainable = model.trainable_variables

            def forward(x: Any, y: Any) -> Any:
                return loss_obj(y, net(x, training=True))

            fwd = self._compiled(forward, case, fullgraph=False)

            def step() -> Any:
                loss = fwd(x, y)
                model.zero_grad()
                (optimizer.scale_loss(loss) if case.precision_spec.loss_scaling else loss).backward()
                with torch.no_grad():
                    optimizer.apply([v.value.grad for v in trainable], trainable)
                return loss.detach()

        else:

            def infer(x: Any) -> Any:
                return net(x, training=False)

            fwd_infer = self._compiled(infer, case, fullgraph=False)

            def step() -> Any:
                with torch.no_grad():
                    return fwd_infer(x)

        holder = _Holder(model=model, x=x, y=y, params=lambda: [v.value for v in model.weights])
        serve = self._serve(case, fwd_infer, x) if case.mode == "serve" else None
        return self._step(case, step, holder, params, serve=serve)

    def _serve(self, case: Case, fwd: Any, x: Any) -> Any:
        """Serve cases: one padded batch of n requests, host to device and back (synced by the copy)."""
        host = x.cpu()

        def serve(n: int) -> Any:
            with torch.no_grad():
                return fwd(host[:n].to(self.dev)).float().cpu().numpy()

        return serve

    def _compiled(self, fn: Any, case: Case, fullgraph: bool) -> Any:
        """``fn`` itself (eager), or under ``torch.compile`` where the case compiles (graphs counted after the first call)."""
        if not case.xla:
            return fn
        import torch._dynamo

        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        self._graphs = torch._dynamo.utils.counters
        return torch.compile(fn, fullgraph=fullgraph, dynamic=False)

    def _step(
        self, case: Case, step: Any, holder: Any, params: int, serve: Any = None, extra: dict | None = None
    ) -> Step:
        """The Step of a built case: eager (nothing compiled ahead: compile_s 0) or lazily compiled (the first call)."""
        self._holder = holder
        scope = (COMPILE_SCOPE if self.name == "torch" else NATIVE_SCOPE) if case.xla else None
        return Step(
            step=step,
            params=params,
            xla_scope=scope,
            native=holder,
            compile_s=None if case.xla else 0.0,
            serve=serve,
            extra={
                "parallelism": case.parallelism,
                "ddp_world": self.group.world if self.group else 1,
                **(extra or {}),
            },
        )

    def sync(self) -> None:
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)

    def check_placement(self, built: Step, first: Any) -> dict:
        """Every parameter and buffer, the data and the output on this rank's device; compile's graphs and breaks."""
        h = built.native
        tensors = list(h.params()) + [h.x, h.y] + ([first] if isinstance(first, torch.Tensor) else [])
        bad = sorted(
            {
                str(t.device)
                for t in tensors
                if t.device != self.dev
                and not (self.dev.type == "cuda" and t.device.type == "cuda" and t.device.index == self.dev.index)
            }
        )
        if bad:
            raise PlacementError(f"expected parameters, data and outputs on {self.dev}; found some on {bad}")
        facts: dict = {"torch_device": str(self.dev)}
        if self._graphs is not None:
            stats = self._graphs.get("stats", {})
            facts["torch_compile_graphs"] = int(stats.get("unique_graphs", 0))
            facts["torch_compile_graph_breaks"] = int(sum(self._graphs.get("graph_break", {}).values()))
        return facts

    def final_loss(self, last: Any) -> float:
        loss = last.detach().float()
        return float(self.group.mean(loss) if self.group else loss)

    def reset_memory(self) -> None:
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)

    def memory_peaks(self, virtual_cpu: bool) -> list[int | None]:
        if self.dev.type != "cuda":
            return [None] * (1 if virtual_cpu else self.device.count)
        mine = int(torch.cuda.max_memory_allocated(self.dev))
        return self.group.gather_ints(mine) if self.group else [mine]

    def memory_note(self) -> str:
        if self.dev.type != "cuda":
            return CPU_MEMORY_REASON
        return "torch.cuda.max_memory_allocated per rank (tensors; the caching allocator reserves more)"

    def is_oom(self, e: BaseException) -> bool:
        return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()

    def gpu_bus_ids(self) -> list[str]:
        return self.bus_ids

    def end_case(self) -> None:
        import keras

        keras.config.set_dtype_policy("float32")
        keras.backend.clear_session()
        self._end()

    def _end(self) -> None:
        import torch._dynamo

        torch._dynamo.reset()
        self._graphs, self._holder = None, None
        gc.collect()
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()


NATIVE_SCOPE = "model + loss (torch.compile fullgraph, inductor); backward AOTAutograd; optimizer eager"


class _Holder:
    """A built case's tensors for the placement check."""

    def __init__(self, model: Any, x: Any, y: Any, params: Any):
        self.model, self.x, self.y, self.params = model, x, y, params
