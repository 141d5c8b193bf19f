"""Per-profile timing budgets (the workload sizes per profile live in ``workloads/``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bench.errors import UserError


@dataclass(frozen=True)
class Timing:
    """How long and how often a case is measured.

    Attributes:
        case_budget_s: wall time the timed rounds of one case aim for (seconds).
        min_round_s: shortest round (seconds); >= 1 s on GPUs so NVML's energy counter,
            updated every ~100 ms, resolves a round.
        target_rounds: rounds aimed for; min_rounds: never fewer (>= 6 gives a
            distribution-free 95% CI of the median); max_rounds: never more.
        warmup_steps: steps after the first (compiling) call, before calibration.
        latency_steps: individually synced inference steps for latency percentiles.
        probe_n: matrix size of the matmul probe, per device kind.
        probe_budget_s: wall time of the matmul probe (seconds).
        latency_batch1: add a batch-1 inference case per workload and device.
        compile_allowance_s: the longest a worker may stay silent while it starts TensorFlow
            or compiles a step; with 3 x ``case_budget_s`` it bounds the watchdog
            (:attr:`stall_timeout_s`).
        serve_trial_s: a serve trial's shortest length (seconds); longer where certifying the
            p99 needs more requests (662 with one late), up to ``serve_max_trial_s``.
        serve_max_trials: trials of the rate search (the low end and the over-capacity one
            included; the rerun of the best rate not).
    """

    case_budget_s: float
    min_round_s: float
    target_rounds: int
    min_rounds: int
    max_rounds: int
    warmup_steps: int
    latency_steps: int
    probe_n: dict
    probe_budget_s: float
    latency_batch1: bool
    compile_allowance_s: float = 600.0
    serve_trial_s: float = 1.0
    serve_max_trial_s: float = 10.0
    serve_max_trials: int = 10

    @property
    def stall_timeout_s(self) -> float:
        """A worker that reports no progress for this long is killed (its case: ``timeout``)."""
        return self.compile_allowance_s + 3 * self.case_budget_s

    def to_dict(self) -> dict:
        """Plain dict, as recorded in results."""
        return asdict(self)


PROFILES: dict[str, Timing] = {
    "smoke": Timing(1.2, 0.04, 10, 6, 30, 2, 20, {"cpu": 512, "gpu": 4096}, 0.4, False, 300.0, 0.5, 4.0, 8),
    "standard": Timing(20.0, 1.0, 10, 6, 30, 5, 100, {"cpu": 2048, "gpu": 8192}, 3.0, True, 900.0, 1.0, 10.0, 10),
    "large": Timing(60.0, 1.0, 20, 6, 60, 10, 200, {"cpu": 4096, "gpu": 16384}, 5.0, True, 1800.0, 3.0, 30.0, 10),
}


def timing(profile: str) -> Timing:
    """The timing of ``profile``, or a UserError naming the choices."""
    try:
        return PROFILES[profile]
    except KeyError:
        raise UserError(f"profile must be one of {', '.join(PROFILES)}; got {profile!r}") from None
