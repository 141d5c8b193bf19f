"""Data parallel torch: one process per device, as ``torchrun`` would start them, DDP between them.

The runner starts one worker per device configuration; for a torch case on several devices that
worker is rank 0, and :func:`join` starts the other ranks itself (``python -m bench.worker PLAN``
with ``ACCELBENCH_DDP_RANK`` set: the same plan and cases, no spool), with ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a free ``MASTER_PORT``, then joins the process group
(NCCL on GPUs, each rank on ``cuda:<rank>`` of the case's GPUs; gloo on CPUs, where
``cpuN-virtual`` is N processes sharing the CPU, each with its share of the cores). Every rank runs
the same cases in step (:class:`bench.coordination.DDPCoordinator`); rank 0 times and records.
A rank whose parent is gone leaves at once, so a killed worker leaves no rank behind.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from bench.cases import DeviceConfig

RANK_VAR = "ACCELBENCH_DDP_RANK"  # set only in the ranks rank 0 starts
PLAN_VAR = "ACCELBENCH_WORKER_PLAN"  # the worker's plan file (bench.worker sets it)
TIMEOUT_S = 600  # a collective waiting longer than this fails the case (a rank died or hung)


def all_reduce_text(device: DeviceConfig) -> str:
    """What the configured all-reduce is, in the records' words."""
    if device.count == 1:
        return "none (1 replica)"
    return f"DDP all-reduce ({'NCCL' if device.kind == 'gpu' else 'gloo'}, bucketed)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _leave_with_parent(parent: int) -> None:
    """A started rank exits once the rank 0 that started it is gone (it would wait in a collective)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


class Group:
    """A process's place in the case's process group, and the collectives the harness needs."""

    def __init__(self, rank: int, world: int, kind: str):
        self.rank, self.world, self.kind = rank, world, kind

    def wrap(self, model: Any, dev: Any) -> Any:
        """``model`` under DistributedDataParallel (its parameters broadcast from rank 0)."""
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[dev] if dev.type == "cuda" else None)

    def _tensor(self, values: list[float]) -> Any:
        import torch

        return torch.tensor(values, dtype=torch.float64, device="cuda" if self.kind == "gpu" else "cpu")

    def agree_max(self, value: float) -> float:
        """The largest ``value`` over the ranks."""
        import torch.distributed as dist

        t = self._tensor([value])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def mean(self, value: Any) -> float:
        """The mean of a scalar over the ranks."""
        import torch.distributed as dist

        t = self._tensor([float(value)])
        dist.all_reduce(t)
        return float(t.item()) / self.world

    def gather_ints(self, value: int) -> list[int | None]:
        """``value`` of every rank, in rank order."""
        import torch.distributed as dist

        t = self._tensor([0.0] * self.world)
        t[self.rank] = float(value)
        dist.all_reduce(t)
        return [int(v) for v in t.tolist()]

    def barrier(self) -> None:
        """Every rank here."""
        import torch
        import torch.distributed as dist

        if self.kind == "gpu":
            torch.cuda.synchronize()
        dist.barrier()

    def close(self) -> None:
        """Leave the group."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


_GROUP: Group | None = None


def current() -> Group | None:
    """The process group this worker joined (None: one device)."""
    return _GROUP


def join(device: DeviceConfig, command: list[str] | None = None) -> Group | None:
    """On several devices: start the other ranks (rank 0) and join the process group; None on one device.

    ``command``: what the other ranks run (default: this worker's plan again, ``python -m bench.worker PLAN``).
    """
    global _GROUP
    if device.count == 1 or device.nodes > 1:
        return None
    if _GROUP is not None:
        return _GROUP
    import torch
    import torch.distributed as dist

    world = device.count
    rank = int(os.environ.get(RANK_VAR, "0"))
    if rank == 0:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world))
        plan = os.environ.get(PLAN_VAR)
        if command is None and not plan:
            raise RuntimeError(f"a DDP worker needs its plan file in {PLAN_VAR} (bench.worker sets it)")
        for r in range(1, world):
            env = {**os.environ, RANK_VAR: str(r), "RANK": str(r), "LOCAL_RANK": str(r)}
            subprocess.Popen(command or [sys.executable, "-m", "bench.worker", str(plan), ""], env=env)
    else:
        _leave_with_parent(os.getppid())
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    if device.kind == "cpu":  # N processes share the CPU: each its share of the cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    else:
        os.environ["KERAS_TORCH_DEVICE"] = f"cuda:{rank}"  # read when Keras is first imported (after this)
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if device.kind == "gpu" else "gloo", rank=rank, world_size=world, timeout=timedelta(seconds=TIMEOUT_S)
    )
    _GROUP = Group(rank, world, device.kind)
    return _GROUP
