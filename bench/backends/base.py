"""The surface a worker measures through; one implementation per Keras backend.

A backend owns everything framework-specific of a worker: making the case's devices visible
and distributing over them, the precision, the compiled step, the sync that closes a round,
the placement check, memory peaks and the matmul probe. The loop itself (rounds, latencies,
statistics, telemetry) is :mod:`bench.loop` and :mod:`bench.worker`, the same for every backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.cases import Case
from bench.loop import CopyProbe, Probe
from bench.precision import PrecisionSpec


@dataclass
class Step:
    """A built case: ``step()`` runs one step (asynchronously where the backend can).

    ``compile_s``: set where the backend compiles ahead of the first call (JAX's AOT); else
    the worker times the first call as compile time. ``extra``: backend facts for the record.
    """

    step: Callable[[], Any]
    params: int
    xla_scope: str | None
    native: Any = None  # the backend's own build (TensorFlow's Built, JAX's state holder)
    compile_s: float | None = None
    extra: dict = field(default_factory=dict)
    serve: Callable[[int], Any] | None = None  # serve cases: one padded batch of n requests, host to host


class Backend:
    """One worker's framework. ``names``: the case's devices as the backend names them."""

    name = "?"
    # whether reset_memory restarts the allocator's peak; JAX's peak_bytes_in_use is the process's
    # lifetime maximum, so anything run before a case (the matmul probe) would be its peak
    resets_memory_peak = True
    names: list[str]
    all_reduce: str

    def versions(self) -> dict:
        """Framework versions for the record."""
        raise NotImplementedError

    def threads(self) -> dict:
        """Intra/inter-op thread counts (None where the backend does not say)."""
        return {"intra_op_threads": None, "inter_op_threads": None}

    def apply_precision(self, spec: PrecisionSpec, device_kind: str) -> str:
        """Set the dtype policy and matmul math of ``spec``; return the math mode really set."""
        raise NotImplementedError

    def matmul_probe(self, spec: PrecisionSpec, n: int, budget_s: float) -> Probe:
        """Best FLOP/s of a matmul chain on the first device in the spec's compute dtype and math."""
        raise NotImplementedError

    def copy_probe(self, n_bytes: int, budget_s: float) -> CopyProbe:
        """Best memory bandwidth of the first device: y = x + 1 over an fp32 array of ``n_bytes`` (bench.loop)."""
        raise NotImplementedError

    def build(self, case: Case, profile: str) -> Step:
        """Model, optimizer, device-resident synthetic data and the compiled step."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait until every step queued so far has finished on the case's devices."""
        raise NotImplementedError

    def check_placement(self, built: Step, first: Any) -> dict:
        """Raise PlacementError unless state, data and outputs sit as intended; facts for the record."""
        raise NotImplementedError

    def all_reduce_used(self, built: Step) -> str:
        """The all-reduce the step really contains (or the configured one)."""
        return self.all_reduce

    def final_loss(self, last: Any) -> float:
        """The global mean loss of the last training step."""
        raise NotImplementedError

    def reset_memory(self) -> None:
        """Reset device memory peaks where the backend can."""

    def memory_peaks(self, virtual_cpu: bool) -> list[int | None]:
        """Peak device bytes per device (None where unknown)."""
        raise NotImplementedError

    def memory_note(self) -> str:
        """What the memory peaks mean (or why there are none); '' when nothing to say."""
        return ""

    def is_oom(self, e: BaseException) -> bool:
        """Whether ``e`` is the backend's out-of-memory error."""
        raise NotImplementedError

    def gpu_bus_ids(self) -> list[str]:
        """PCI bus ids of the GPUs in use, in the backend's order ([] where it does not say)."""
        return []

    def end_case(self) -> None:
        """Forget the case: dtype policy, distribution, Keras session."""
        raise NotImplementedError
