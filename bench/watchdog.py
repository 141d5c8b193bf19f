"""How the runner ends a worker that hangs, and how it tells a persistent hang from a one-off.

A worker that makes no progress for the stall bound is killed with its whole process group (the
worker leads its own group, so helpers it started die with it). A process stuck inside the GPU
driver may not die even on SIGKILL: the wait for it is bounded and the record says so, instead of
the run hanging with it. Two workers of one group in a row that hang before measuring anything
mean the hang persists: the rest of the group is recorded as not run, not one stall bound each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.cases import Case
from bench.telemetry import gpus, nvml

WORKER = [sys.executable, "-m", "bench.worker"]  # + PLAN SPOOL: the runner's workers and the tenants' alike
KILL_WAIT_S = 30.0  # how long a SIGKILLed worker may take to die before the run goes on without it
STALLS_IN_A_ROW = 2  # consecutive workers of a group hanging before they measured anything: give up
RELEASE_WAIT_S = 30.0  # how long the next worker waits for NVML to stop listing a killed one

NCCL_HINT = " On PCIe workstations NCCL all-reduce can hang with ACS/IOMMU on; try NCCL_P2P_DISABLE=1"


def multi_gpu(case: Case) -> bool:
    """Whether the case runs collectives over more than one real GPU (where the NCCL hint applies)."""
    return case.device_kind == "gpu" and case.device_count > 1 and not case.virtual


@dataclass
class WorkerEnd:
    """How a worker ended: exit code, whether the watchdog killed it, its last heartbeat."""

    rc: int | None = None
    stalled: bool = False
    case_id: str | None = None
    phase: str | None = None
    fatal: str | None = None  # a worker's one-line reason to stop the run (exit 2)
    pid: int | None = None  # set when the watchdog killed it
    unkillable: bool = False  # it did not die within KILL_WAIT_S of SIGKILL


class ClusterFailed(Exception):
    """A worker of a cluster run died or lost its peers: the run ends (no rejoin), --resume continues."""


def kill_worker(proc: subprocess.Popen) -> int | None:
    """SIGKILL the worker's process group and wait (bounded) for it: its exit code, None if it would not die."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.kill()  # in case it is not (yet) its group's leader
    try:
        return proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        return None


def start_worker(
    cmd: Sequence[str], plan: Path, spool: Path, log: Path, worker_env: Mapping[str, str]
) -> subprocess.Popen:
    """Start ``cmd PLAN SPOOL`` with this environment and ``worker_env`` over it, its output into ``log``.

    Unbuffered, TensorFlow's C++ log quiet unless asked for, no stdin, in its own process group,
    dying with the parent (:func:`die_with_parent`).
    """
    env = dict(os.environ, **worker_env, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with open(log, "w") as out:
        return subprocess.Popen(
            [*cmd, str(plan), str(spool)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )


def die_with_parent() -> None:
    """In the worker before exec: lead its own process group and die with the parent (Linux).

    A kill of the group takes the worker's helpers too, and no worker outlives a killed run.
    """
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def log_tail(log: Path, n: int = 3) -> str:
    """The worker log's last few meaningful lines, for a record's reason."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    keep = [ln for ln in lines if not ln.startswith(("WARNING", "I0000", "W0000"))]
    return " | ".join(keep[-n:])[-400:] or "no output"


def wait_released(
    bus_ids: Sequence[str],
    pid: int,
    timeout_s: float = 30.0,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> str | None:
    """Wait until NVML no longer lists ``pid`` as a compute process on these GPUs.

    None once released (its contexts and memory freed), else why the next worker may find them held.
    """
    import time

    clock, sleep = clock or time.monotonic, sleep or time.sleep
    found = gpus.discover()
    if found.reason:
        return f"NVML cannot tell whether the GPUs were released ({found.reason})"
    by_bus = {g.pci_bus_id: g for g in found.gpus}
    wanted = [gpus.normalize_bus_id(x) for x in bus_ids]
    gone = [b for b in wanted if b not in by_bus]
    if gone:  # discovery skips a GPU it cannot open: a lost one is not a released one
        return f"NVML cannot open {', '.join(gone)} ({'; '.join(found.notes) or 'not listed'}); it may need a reset"
    chosen = [by_bus[b] for b in wanted]
    t0 = clock()
    while True:
        try:
            held = [
                g.pci_bus_id
                for g in chosen
                if pid
                in {
                    int(p.pid)
                    for p in nvml.call(
                        "nvmlDeviceGetComputeRunningProcesses", nvml.call("nvmlDeviceGetHandleByUUID", g.uuid)
                    )
                }
            ]
        except nvml.GPULost as e:
            return f"a GPU is lost ({e}); it may need a reset"
        except (nvml.NVMLUnavailable, nvml.MetricUnsupported) as e:
            return f"NVML cannot list the GPUs' processes ({e})"
        if not held:
            return None
        if clock() - t0 >= timeout_s:
            return f"the killed worker (pid {pid}) still held {', '.join(held)} after {timeout_s:.0f} s"
        sleep(0.5)


def casualty(info: dict, case: Case, end: WorkerEnd, log: Path, stall_s: float) -> dict:
    """``info`` of a case whose worker died or hung during it: status timeout, oom or error, with the log's tail."""
    tail = log_tail(log)
    if end.stalled:
        info.update(
            status="timeout",
            reason=(
                f"no progress for {stall_s:.0f} s (last: {end.phase or 'starting'}); worker killed "
                f"(a hung collective such as NCCL, or a stuck driver?{NCCL_HINT if multi_gpu(case) else ''}); "
                f"log {log}: {tail}"
            ),
        )
        return info
    rc = end.rc or 0
    how = f"exit code {rc}"
    if rc < 0:
        how = f"killed by signal {-rc}" + (" (SIGKILL: often the kernel's OOM killer)" if rc == -9 else "")
    oom = "out of memory" in tail.lower() or "oom" in tail.lower().split()
    info.update(
        status="oom" if oom else "error",
        reason=f"worker process died ({how}) during this case; log {log}: {tail}",
    )
    return info
