"""What a worker agrees on with others: nothing when it runs alone, everything in a cluster.

:class:`bench.worker.WorkerSession` measures the same way in both cases and asks its coordinator
at each point where a multi-node run differs: joining (the strategy, the plan compared across
nodes, the cases an earlier attempt finished), calibration (one step count for every node, the
slowest node's step time), the rounds (inference ends each round on a barrier), the latency
steps (a fixed count), the figures (per node, all-gathered) and leaving (a last barrier; after a
failed case, leave at once: the other nodes are inside its collectives).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from bench.profiles import Timing
from bench.protocol import WorkerPlan

CALIBRATION_STEPS = 5  # the fixed step count every node of a cluster calibrates with


class Solo:
    """A worker that runs alone (one process, one node)."""

    rank: int | None = None
    lockstep = False  # whether other processes run the same steps (then no one stops on its own look)

    def join(
        self, be: Any, plan: WorkerPlan, heartbeat: Callable[[str], None], fatal: Callable[[str], None]
    ) -> set[str]:
        """Set up with the others; returns the ids of cases measured by an earlier attempt."""
        return set()

    def setup_failed(self, message: str, fatal: Callable[[str], None]) -> None:
        """Alone, every case records the setup error and the worker goes on to the end."""

    def calibrate(self, step_and_sync: Callable[[], None], timing: Timing, warm_step_s: float | None = None) -> float:
        """Seconds per step: 2 steps (1 that outlasts a round: K is 1 anyway), up to 0.2 s (or a round) of them.

        A last warm-up step (``warm_step_s``) that already outlasted a round says K is 1: no step
        is run for it (a 12 s CNN training step on two CPU cores costs one less).
        """
        if warm_step_s is not None and warm_step_s >= timing.round_s:
            return warm_step_s
        n, t0 = 0, time.perf_counter()
        while n < 1 or (n < 2 and time.perf_counter() - t0 < timing.round_s):
            step_and_sync()
            n += 1
        while time.perf_counter() - t0 < min(0.2, timing.min_round_s) and n < 1000:
            step_and_sync()
            n += 1
        return (time.perf_counter() - t0) / n

    def round_barrier(self, mode: str) -> Callable[[], None] | None:
        """What ends each timed round besides the sync (nothing alone)."""
        return None

    def latency_budget_s(self, timing: Timing) -> float:
        """Wall time the latency steps may take."""
        return timing.case_budget_s / 4

    def gather(self, out: Mapping[str, Any], samples: int) -> dict:
        """Figures of the other nodes (none alone)."""
        return {}

    def peer_failed(self, e: BaseException) -> bool:
        """Whether ``e`` says another node died."""
        return False

    def leave_after_failure(self) -> bool:
        """Whether a failed case ends this worker (alone: the next case runs)."""
        return False

    def close(self, heartbeat: Callable[[str], None]) -> None:
        """Before the worker exits."""


class ClusterCoordinator(Solo):
    """A worker of a multi-node run (MultiWorkerMirroredStrategy from TF_CONFIG)."""

    lockstep = True

    def __init__(self, cluster: Mapping[str, Any]):
        self.cluster = cluster
        self.rank = int(cluster["rank"])
        self.strategy: Any = None
        self.joined = False

    def join(
        self, be: Any, plan: WorkerPlan, heartbeat: Callable[[str], None], fatal: Callable[[str], None]
    ) -> set[str]:
        """The strategy, created before anything else runs; plans compared; rank 0's finished cases agreed."""
        from bench import multiworker

        self.mw = multiworker
        heartbeat(f"joining the cluster as rank {self.rank} of {self.cluster['world']}")
        self.strategy, all_reduce = multiworker.make_strategy(plan.device)
        be.set_strategy(self.strategy, all_reduce, self.strategy.extended.worker_devices)
        v = be.versions()
        mine = plan.fingerprint((v["tensorflow"], v["keras"]))
        seen = [int(x) for x in multiworker.gather_rows(self.strategy, [float(mine)])[:, 0]]
        if len(set(seen)) > 1:
            odd = [r for r, x in enumerate(seen) if x != seen[0]]
            fatal(
                f"nodes disagree on the plan (cases, profile, timing, devices or TensorFlow/Keras versions): "
                f"rank(s) {odd} differ from rank 0; run the same accelbench command and versions on every node"
            )
        # on --resume only rank 0 knows which cases an earlier attempt finished: agree on its list
        ids, mine_skip = plan.ids, set(plan.skip)
        agreed = multiworker.gather_rows(self.strategy, [1.0 if i in mine_skip else 0.0 for i in ids])[0]
        self.joined = True
        return {i for i, m in zip(ids, agreed) if m == 1.0}

    def setup_failed(self, message: str, fatal: Callable[[str], None]) -> None:
        """The other nodes cannot go on without this one: stop the run here."""
        fatal(f"rank {self.rank}: {message}")

    def calibrate(self, step_and_sync: Callable[[], None], timing: Timing, warm_step_s: float | None = None) -> float:
        """A step count every node shares, then the slowest node's step time (a warm-up step is one node's: unused)."""
        t0 = time.perf_counter()
        for _ in range(CALIBRATION_STEPS):
            step_and_sync()
        return float(self.mw.agree_max(self.strategy, (time.perf_counter() - t0) / CALIBRATION_STEPS))

    def round_barrier(self, mode: str) -> Callable[[], None] | None:
        """Inference has no collective of its own: a barrier keeps the nodes' rounds together."""
        return (lambda: self.mw.barrier(self.strategy)) if mode == "infer" else None

    def latency_budget_s(self, timing: Timing) -> float:
        """A fixed count (no collective here, but every node leaves together)."""
        return float("inf")

    def gather(self, out: Mapping[str, Any], samples: int) -> dict:
        """Per-node energy, peak memory and host RSS, all-gathered; energy is the nodes' sum."""
        keys = ("energy_j", "device_peak_mem_bytes", "host_peak_rss_bytes", "power_mean_w")
        rows = self.mw.gather_rows(self.strategy, [float("nan") if out.get(k) is None else float(out[k]) for k in keys])
        per = {f"per_node_{k}": [None if math.isnan(v) else v for v in rows[:, i]] for i, k in enumerate(keys)}
        energy = per["per_node_energy_j"]
        total = sum(energy) if all(e is not None for e in energy) else None  # type: ignore[arg-type]
        return {
            **per,
            "energy_j": total,
            "energy_j_per_sample": total / samples if total else None,
            "samples_per_joule": samples / total if total else None,
            "cluster_rank": self.rank,
            "cluster_world": self.cluster["world"],
            "cluster_hosts": sorted(set(h.rsplit(":", 1)[0] for h in self.cluster["workers"])),
        }

    def peer_failed(self, e: BaseException) -> bool:
        """Another worker died: the cluster cannot recover (no rejoin)."""
        return bool(self.strategy is not None and self.mw.is_peer_failure(e))

    def leave_after_failure(self) -> bool:
        """The other nodes are still inside the failed case's collectives: going on would desynchronise them."""
        return True

    def close(self, heartbeat: Callable[[str], None]) -> None:
        """A last barrier, so no worker leaves while another still needs it."""
        if self.joined:
            heartbeat("final barrier")
            self.mw.barrier(self.strategy)


class DDPCoordinator(Solo):
    """A rank of a torch case on several devices (:mod:`bench.torch_ddp`): every rank steps together."""

    lockstep = True

    def __init__(self) -> None:
        from bench import torch_ddp

        self.ddp = torch_ddp
        self.rank = int(os.environ.get(torch_ddp.RANK_VAR, "0"))

    def join(
        self, be: Any, plan: WorkerPlan, heartbeat: Callable[[str], None], fatal: Callable[[str], None]
    ) -> set[str]:
        """The group was joined when the backend started (every rank reads the same plan)."""
        return set()

    def setup_failed(self, message: str, fatal: Callable[[str], None]) -> None:
        """The other ranks cannot go on without this one."""
        fatal(f"rank {self.rank}: {message}")

    def calibrate(self, step_and_sync: Callable[[], None], timing: Timing, warm_step_s: float | None = None) -> float:
        """A step count every rank shares, then the slowest rank's step time (a warm-up step is one rank's: unused)."""
        t0 = time.perf_counter()
        for _ in range(CALIBRATION_STEPS):
            step_and_sync()
        group = self.ddp.current()
        mine = (time.perf_counter() - t0) / CALIBRATION_STEPS
        return group.agree_max(mine) if group else mine

    def round_barrier(self, mode: str) -> Callable[[], None] | None:
        """Inference has no collective of its own: a barrier closes each round on every rank."""
        group = self.ddp.current()
        return group.barrier if group and mode == "infer" else None

    def latency_budget_s(self, timing: Timing) -> float:
        """A fixed count (every rank leaves together)."""
        return float("inf")

    def gather(self, out: Mapping[str, Any], samples: int) -> dict:
        """The group's size and this record's rank (rank 0 records)."""
        group = self.ddp.current()
        return {"ddp_rank": self.rank, "ddp_world": group.world if group else 1}

    def peer_failed(self, e: BaseException) -> bool:
        """Another rank died or hung: its collectives fail here (gloo, NCCL, or the group's timeout)."""
        text = str(e).lower()
        return self.ddp.current() is not None and any(w in text for w in ("gloo", "nccl", "connection", "timed out"))

    def leave_after_failure(self) -> bool:
        """The other ranks are inside the failed case's collectives."""
        return True

    def close(self, heartbeat: Callable[[str], None]) -> None:
        """A last barrier, then leave the group."""
        group = self.ddp.current()
        if group:
            heartbeat("final barrier")
            group.barrier()
            group.close()


def coordinator(plan: WorkerPlan) -> Solo:
    """The coordinator a plan asks for."""
    if plan.cluster:
        return ClusterCoordinator(plan.cluster)
    if plan.backend in ("torch", "torch-native") and plan.device.count > 1:
        return DDPCoordinator()
    return Solo()
