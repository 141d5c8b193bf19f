"""Per-profile timing budgets (the workload sizes per profile live in ``workloads/``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from bench.errors import UserError
from bench.stopping import SCHEDULES, Schedule


@dataclass(frozen=True)
class Timing:
    """How long and how often a case is measured.

    Attributes:
        case_budget_s: wall time the timed rounds of one case aim for (seconds).
        min_round_s: shortest round (seconds); >= 1 s on GPUs so NVML's energy counter,
            updated every ~100 ms, resolves a round.
        looks, ranks: the rounds at which the median's CI is looked at, and its ranks there
            (``bench.stopping``: any look misses the median with at most 5% chance); the last
            look is the cap, and each round lasts ``max(min_round_s, case_budget_s / cap)``.
        ci_target: the CI half-width (relative to the median) a case stops at, per device kind.
        warmup_steps: steps after the first (compiling) call, before calibration; alone (not
            a cluster, whose ranks must step together) the warm-up ends early once it has
            lasted ``warmup_s`` (criterion.rs warms up for a time, 3 s by default: a 12 s CNN
            step on two CPU cores needs no five more to be warm).
        warmup_s: the warm-up's time bound (seconds; at least one step runs).
        latency_steps: individually synced inference steps for latency percentiles.
        probe_n: matrix size of the matmul probe, per device kind (one size in every profile,
            so one device has one peak per precision whatever the profile).
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
    looks: tuple[int, ...]
    ranks: tuple[int, ...]
    ci_target: dict
    warmup_steps: int
    latency_steps: int
    probe_n: dict
    probe_budget_s: float
    latency_batch1: bool
    warmup_s: float = 3.0
    compile_allowance_s: float = 600.0
    serve_trial_s: float = 1.0
    serve_max_trial_s: float = 10.0
    serve_max_trials: int = 10

    def __post_init__(self) -> None:
        # read back from a plan's JSON the looks are lists: one value, one type
        object.__setattr__(self, "looks", tuple(self.looks))
        object.__setattr__(self, "ranks", tuple(self.ranks))

    @property
    def schedule(self) -> Schedule:
        """The looks and ranks of the stopping rule."""
        return Schedule(tuple(self.looks), tuple(self.ranks))

    @property
    def min_rounds(self) -> int:
        """The fewest rounds a case runs (the first look)."""
        return self.looks[0]

    @property
    def round_s(self) -> float:
        """Each round's length, fixed after calibration."""
        return max(self.min_round_s, self.case_budget_s / self.looks[-1])

    def first_look_only(self, **changes) -> Timing:
        """Rounds as long as these, up to the first look only, no latency steps (``changes`` on top).

        For a median that is a figure's input, not a figure (a second worker, ``bench.spread``),
        or for a step that need only run (a largest-batch probe, ``bench.maxbatch``).
        """
        first = self.looks[0]
        return replace(
            self,
            case_budget_s=self.round_s * first,
            looks=(first,),
            ranks=self.ranks[:1],
            latency_steps=0,
            **changes,
        )

    @property
    def stall_timeout_s(self) -> float:
        """A worker that reports no progress for this long is killed (its case: ``timeout``)."""
        return self.compile_allowance_s + 3 * self.case_budget_s

    def to_dict(self) -> dict:
        """Plain dict, as recorded in results."""
        return asdict(self)


PROBE_N = {"cpu": 2048, "gpu": 8192}  # large enough to be the device's peak (report-review-1 finding 11)


def _profile(name: str, **kw) -> Timing:
    s = SCHEDULES[name]
    return Timing(looks=s.looks, ranks=s.ranks, probe_n=dict(PROBE_N), **kw)


PROFILES: dict[str, Timing] = {
    "smoke": _profile(
        "smoke",
        case_budget_s=1.2,
        min_round_s=0.04,
        ci_target={"cpu": 0.05, "gpu": 0.01},
        warmup_steps=2,
        warmup_s=0.5,
        latency_steps=20,
        probe_budget_s=0.4,
        latency_batch1=False,
        compile_allowance_s=300.0,
        serve_trial_s=0.5,
        serve_max_trial_s=4.0,
        serve_max_trials=8,
    ),
    "standard": _profile(
        "standard",
        case_budget_s=20.0,
        min_round_s=1.0,
        ci_target={"cpu": 0.02, "gpu": 0.01},
        warmup_steps=5,
        warmup_s=3.0,
        latency_steps=100,
        probe_budget_s=3.0,
        latency_batch1=True,
        compile_allowance_s=900.0,
        serve_trial_s=1.0,
        serve_max_trial_s=10.0,
        serve_max_trials=10,
    ),
    "large": _profile(
        "large",
        case_budget_s=60.0,
        min_round_s=1.0,
        ci_target={"cpu": 0.02, "gpu": 0.01},
        warmup_steps=10,
        warmup_s=10.0,
        latency_steps=200,
        probe_budget_s=5.0,
        latency_batch1=True,
        compile_allowance_s=1800.0,
        serve_trial_s=3.0,
        serve_max_trial_s=30.0,
        serve_max_trials=10,
    ),
}


def timing(profile: str) -> Timing:
    """The timing of ``profile``, or a UserError naming the choices."""
    try:
        return PROFILES[profile]
    except KeyError:
        raise UserError(f"profile must be one of {', '.join(PROFILES)}; got {profile!r}") from None
