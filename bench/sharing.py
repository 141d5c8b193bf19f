"""What concurrent jobs on one device do to each other: the multiprogram metrics and the sharing mode.

Metrics (Eyerman and Eeckhout, "System-Level Performance Metrics for Multiprogram Workloads",
IEEE Micro 2008), from each tenant's throughput alone and shared over one common window:
normalised progress NP_i = shared_i / alone_i; system throughput STP = sum NP_i (N when tenants
do not interfere, 1 when they serialise perfectly, below 1 when sharing loses work); average
normalised turnaround ANTT = mean(1 / NP_i); fairness = min NP / max NP; Jain's index over NP.

The sharing mode is what the machine does, read and never changed (MPS and MIG need root and
affect other users): ``time-slicing`` by default, ``mps`` when NVML lists our processes as MPS
clients, ``mig`` on a MIG-enabled GPU, ``cpu`` for CPU tenants (never GPU interference); under
``exclusive_process`` without MPS a second process is refused a context, so N > 1 tenants cannot
run (a reason, not a failure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SHARING_MODES = ("time-slicing", "mps", "mig", "cpu")


@dataclass(frozen=True)
class Sharing:
    """The multiprogram figures of N tenants against their alone throughput."""

    alone: float  # samples/s of one tenant by itself (with the same memory cap)
    shared: tuple[float, ...]  # samples/s of each tenant over the common window

    def __post_init__(self) -> None:
        if not self.alone > 0 or not self.shared or any(not s >= 0 for s in self.shared):
            raise ValueError(f"sharing needs a positive alone rate and tenants' rates; got {self.alone}, {self.shared}")

    @property
    def n(self) -> int:
        """Tenants."""
        return len(self.shared)

    @property
    def progress(self) -> tuple[float, ...]:
        """Normalised progress of each tenant: its shared rate over the alone rate."""
        return tuple(s / self.alone for s in self.shared)

    @property
    def aggregate(self) -> float:
        """Samples/s of all tenants together."""
        return sum(self.shared)

    @property
    def stp(self) -> float:
        """System throughput: the sum of normalised progress (the work of STP jobs run alone)."""
        return sum(self.progress)

    @property
    def antt(self) -> float | None:
        """Average normalised turnaround time: mean slowdown (None when a tenant made no progress)."""
        p = self.progress
        return None if min(p) == 0 else sum(1 / x for x in p) / len(p)

    @property
    def worst_slowdown(self) -> float | None:
        """The slowest tenant's alone / shared rate (None when a tenant made no progress)."""
        return None if min(self.progress) == 0 else 1 / min(self.progress)

    @property
    def fairness(self) -> float:
        """Min over max normalised progress: 1 when every tenant slows alike."""
        p = self.progress
        return min(p) / max(p) if max(p) > 0 else 0.0

    @property
    def jain(self) -> float:
        """Jain's fairness index over normalised progress (1/N .. 1)."""
        p = self.progress
        sq = sum(x * x for x in p)
        return sum(p) ** 2 / (len(p) * sq) if sq > 0 else 0.0

    def verdict(self) -> str:
        """One line for people: what sharing gained and what it cost each tenant."""
        w = self.worst_slowdown
        if w is None:
            return f"{self.n} tenants: a tenant made no progress"
        if self.stp < 1.05:
            return f"sharing does not pay: STP {self.stp:.2f} with {self.n} tenants, each up to {w:.2g}x slower"
        return f"{self.n} tenants: STP {self.stp:.2f}, each up to {w:.2g}x slower, fairness {self.fairness:.2f}"


def common_window(spans: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """The interval every tenant was running in: [latest start, earliest end], or None when they never overlapped."""
    if not spans:
        return None
    start, end = max(s for s, _ in spans), min(e for _, e in spans)
    return (start, end) if end > start else None


def rate_in_window(rounds: Sequence[tuple[float, float, int]], window: tuple[float, float]) -> float | None:
    """Samples/s of one tenant inside ``window`` from its rounds (start, end, samples).

    Only rounds wholly inside the window count (a round that straddles an edge ran partly alone);
    the rate is their samples over their summed time, so gaps between rounds do not dilute it.
    """
    lo, hi = window
    inside = [(s, e, n) for s, e, n in rounds if s >= lo and e <= hi and e > s]
    t = sum(e - s for s, e, _ in inside)
    return sum(n for _, _, n in inside) / t if t > 0 else None


def sharing_mode(
    device_kind: str, mig: bool, compute_mode: str | None, mps_clients: int | None
) -> tuple[str | None, str]:
    """The sharing mode of a device, or None with the reason N > 1 tenants cannot share it.

    ``mps_clients``: processes NVML lists as MPS clients on the GPU (None: not reported).
    """
    if device_kind == "cpu":
        return "cpu", "CPU tenants share cores and caches: not GPU interference"
    if mig:
        return "mig", "MIG: each tenant needs its own MIG instance"
    if mps_clients:
        return "mps", "MPS: the tenants' kernels run concurrently"
    if compute_mode in ("exclusive_process", "exclusive_thread"):
        return None, (
            f"the GPU's compute mode is {compute_mode} without MPS: a second process is refused a context "
            "(start MPS, or nvidia-smi -c DEFAULT; docs/method.md)"
        )
    if compute_mode == "prohibited":
        return None, "the GPU's compute mode is prohibited: no process may compute on it"
    return "time-slicing", "time-slicing: one context runs at a time"
