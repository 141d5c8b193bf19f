"""Running a tenant case: the alone baseline, then N workers at once on one device, started together.

Each worker builds, compiles, warms up and calibrates by itself, then heartbeats
``loop.TENANT_READY`` and waits; when every one is ready the parent creates the start file and
all run rounds for one fixed wall-clock window (``bench.loop.window_rounds``). Half-way through
the parent reads NVML (sharing mode, each process's memory). The baseline is the same worker
alone, with the same memory cap, just before. A tenant that dies, fails its case or stalls ends
the case (status and reason): the others are killed at once, so nothing stays on the device.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench import loop, protocol, tenants, watchdog
from bench.backends import MEM_FRACTION_VARS
from bench.cases import Case
from bench.protocol import WorkerPlan
from bench.watchdog import kill_worker, log_tail, start_worker


@dataclass
class Tenant:
    """One worker of a tenant case, as the parent sees it."""

    index: int
    proc: subprocess.Popen
    spool: Path
    log: Path
    last: float  # monotonic time of its last message
    offset: int = 0
    phase: str = "starting"
    ready: bool = False
    record: dict | None = None
    fatal: str | None = None


@dataclass
class Outcome:
    """The records of a group of tenants, or why the case failed (status, reason)."""

    records: list[dict] = field(default_factory=list)
    status: str = "ok"
    reason: str = ""
    observed: dict = field(default_factory=dict)


def tenant_plan(plan: WorkerPlan, case: Case, env: Mapping[str, str]) -> tuple[WorkerPlan, dict[str, str]]:
    """The plan and environment of every worker of the case (the baseline too): each capped at 0.9 x total / N."""
    env = dict(env)
    if case.device_kind != "gpu":
        return plan, env
    cap = tenants.memory_limit_mb(plan.gpu.get("memory_total_bytes"), case.tenants)
    if case.backend == "jax":
        var = next((v for v in MEM_FRACTION_VARS if v in os.environ), MEM_FRACTION_VARS[1])
        env[var] = f"{tenants.MEMORY_SHARE / case.tenants:.4f}"
        return plan, env
    return dataclasses.replace(plan, gpu={**plan.gpu, "memory_limit_mb": cap}), env


def run_group(
    plans: list[WorkerPlan],
    env: Mapping[str, str],
    logs: Path,
    stall_s: float,
    window_s: float,
    observe: Callable[[list[int]], dict] | None = None,
) -> Outcome:
    """A worker per plan (each one case), started together after each is ready; their records, or why not."""
    n = len(plans)
    with tempfile.TemporaryDirectory() as d:
        go = Path(d) / "go"
        group = [_launch(p, i, n, Path(d), go, logs, env, window_s, watchdog.WORKER) for i, p in enumerate(plans)]
        try:
            return _watch(group, go, stall_s, window_s, observe)
        finally:
            for t in group:
                if t.proc.poll() is None:
                    kill_worker(t.proc)


def _launch(
    plan: WorkerPlan,
    i: int,
    n: int,
    d: Path,
    go: Path,
    logs: Path,
    env: Mapping[str, str],
    window_s: float,
    cmd: list[str],
) -> Tenant:
    tenant = {"index": i, "of": n, "go": str(go), "window_s": window_s, **(plan.tenant or {})}
    mine = dataclasses.replace(plan, tenant=tenant)
    path, spool = d / f"plan{i}.json", d / f"spool{i}.jsonl"
    mine.write(path)
    log = logs.with_name(f"{logs.name}-{i}.log") if n > 1 else logs.with_name(f"{logs.name}.log")
    proc = start_worker(cmd, path, spool, log, env)
    return Tenant(i, proc, spool, log, time.monotonic())


def _read(t: Tenant) -> None:
    messages, t.offset = protocol.read_new(t.spool, t.offset)
    for msg in messages:
        t.last = time.monotonic()
        if isinstance(msg, protocol.Fatal):
            t.fatal = msg.message
        elif isinstance(msg, protocol.Heartbeat):
            t.phase = msg.phase
            t.ready = t.ready or msg.phase == loop.TENANT_READY
        elif isinstance(msg, protocol.Record):
            t.record = dict(msg.record)


def _failure(t: Tenant, n: int, stall_s: float) -> tuple[str, str] | None:
    """(status, reason) when this tenant ended its case, else None."""
    who = f"tenant {t.index + 1} of {n}" if n > 1 else "the alone baseline"
    if t.record is not None and t.record["extra_info"].get("status") != "ok":
        e = t.record["extra_info"]
        return e.get("status") or "error", f"{who}: {e.get('reason')}"
    if t.fatal:
        return "error", f"{who}: {t.fatal}"
    rc = t.proc.poll()
    if rc is not None and t.record is None:
        how = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
        return "error", f"{who} died ({how}) during '{t.phase}'; log {t.log}: {log_tail(t.log)}"
    if rc is None and time.monotonic() - t.last > stall_s:
        return (
            "timeout",
            f"{who}: no progress for {stall_s:.0f} s (last: {t.phase}); killed with the others; log {t.log}",
        )
    return None


def _watch(
    group: list[Tenant], go: Path, stall_s: float, window_s: float, observe: Callable[[list[int]], dict] | None
) -> Outcome:
    started: float | None = None
    out = Outcome()
    while True:
        for t in group:
            _read(t)
        for t in group:
            if (bad := _failure(t, len(group), stall_s)) is not None:
                out.status, out.reason = bad
                return out
        if all(t.proc.poll() is not None for t in group):
            for t in group:
                _read(t)
            out.records = [t.record for t in group if t.record is not None]
            return out
        if started is None and all(t.ready for t in group):
            go.write_text("")  # every tenant compiled and calibrated alone: start them together
            started = time.monotonic()
        if started is not None and observe and not out.observed and time.monotonic() - started > window_s / 2:
            out.observed = observe([t.proc.pid for t in group])
        time.sleep(0.02)


def measure(
    case: Case, plan: WorkerPlan, env: Mapping[str, str], logdir: Path, stall_s: float, window_s: float
) -> tuple[dict | None, str, str]:
    """The alone baseline, then the N tenants: (the case's record, "ok", "") or (None, status, reason).

    A mix case's first tenant is the case (one request per round: each round is a latency) and its
    second the noisy neighbour; the baseline is the first alone.
    """
    plan, env = tenant_plan(plan, case, env)
    if case.neighbour:
        plan = dataclasses.replace(plan, tenant={"k": 1})
        plans = [plan, dataclasses.replace(plan, cases=(case.neighbour_case(),), tenant=None)]
    else:
        plans = [plan] * case.tenants
    alone = run_group([plan], env, logdir / f"{case.id}-alone", stall_s, window_s)
    if alone.status != "ok" or not alone.records:
        return None, alone.status, alone.reason or "the alone baseline gave no record"
    bus = next(iter(plan.gpu.get("pci_bus_ids") or []), None)
    shared = run_group(plans, env, logdir / case.id, stall_s, window_s, lambda pids: tenants.observe(case, bus, pids))
    if shared.status != "ok" or len(shared.records) != case.tenants:
        return None, shared.status, shared.reason or "a tenant gave no record"
    try:
        return tenants.combine(case, alone.records[0], shared.records, shared.observed), "ok", ""
    except ValueError as e:
        return None, "error", str(e)
