"""The largest batch that fits: doubling, then bisection, each probe in a fresh worker.

``accelbench maxbatch --workloads cnn --modes train --devices gpu:1 --precisions mixed_bfloat16``.
Frameworks do not recover reliably from an out-of-memory error in-process (tensorflow#4735,
keras#434, Lightning#8028: ``../shared/design/sweeps.md`` 3.3), so every probe is a one-case run
in its own worker process, as DeepSpeed's autotuner, OTX and torchbench do: the case at that
batch, compiled, warmed up and stepped for a few short rounds. The worker tells an OOM (the
backend's own error: TensorFlow's ``ResourceExhaustedError``, JAX's ``RESOURCE_EXHAUSTED``) from
other failures, and the watchdog names a worker the kernel killed; an error that is not an OOM
ends the search (it cannot say where memory runs out). On a CPU the limit is ``--memory-limit``:
a probe whose peak resident memory passes it counts as out of memory (so CI can find a batch
without exhausting the machine). Each search is recorded with its probes, the allocator
settings and the versions in ``<results-dir>/maxbatch.json``, keyed so that a repeated search
reads it back instead of probing again (``--fresh`` probes anew). The safe batch leaves headroom:
the largest that fit whose peak stays within 90% of the limit or the device's memory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cases import MAX_KNOB, Case
from bench.errors import UserError

RESOLUTION = 8  # bisect until the bracket is within 1/8 of the batch that fit
HEADROOM = 0.9  # the safe batch's peak stays within this share of the limit


@dataclass(frozen=True)
class Outcome:
    """One probe: the batch, ok / oom / error / timeout, why, and the peaks it reached (bytes)."""

    batch: int
    status: str
    reason: str = ""
    device_peak_bytes: int | None = None
    host_peak_bytes: int | None = None

    @property
    def ok(self) -> bool:
        """The step ran at this batch."""
        return self.status == "ok"

    @property
    def oom(self) -> bool:
        """Out of memory: the backend said so, the limit was passed, or the kernel killed the worker."""
        return self.status in ("oom", "oom-suspect")


@dataclass(frozen=True)
class Search:
    """A search's answer: the largest batch that fit, the first that did not, and every probe in order."""

    max_ok: int | None
    first_fail: int | None
    probes: tuple[Outcome, ...]
    stopped: str  # "bracketed", "limit" (fit up to the largest batch tried), "error", "nothing fits"

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "max_ok": self.max_ok,
            "first_fail": self.first_fail,
            "stopped": self.stopped,
            "probes": [dataclasses.asdict(p) for p in self.probes],
        }


def search(probe: Callable[[int], Outcome], start: int, limit: int = MAX_KNOB) -> Search:
    """Double from ``start`` until a probe runs out of memory (halve where ``start`` does), then bisect.

    The bracket ends within ``1/RESOLUTION`` of the batch that fit (or at adjacent batches). An
    error that is not out of memory ends the search where it is.
    """
    probes: list[Outcome] = []

    def run(b: int) -> Outcome:
        out = probe(b)
        probes.append(out)
        return out

    lo = hi = None
    b = max(1, min(start, limit))
    while True:
        out = run(b)
        if out.ok:
            lo = b
            if b >= limit:
                return Search(lo, None, tuple(probes), "limit")
            if hi is not None:
                break
            b = min(2 * b, limit)
        elif out.oom:
            hi = b
            if lo is not None:
                break
            if b == 1:
                return Search(None, 1, tuple(probes), "nothing fits")
            b //= 2
        else:
            return Search(lo, hi, tuple(probes), "error")
    assert lo is not None and hi is not None
    while hi - lo > max(1, lo // RESOLUTION):
        mid = (lo + hi) // 2
        out = run(mid)
        if out.ok:
            lo = mid
        elif out.oom:
            hi = mid
        else:
            return Search(lo, hi, tuple(probes), "error")
    return Search(lo, hi, tuple(probes), "bracketed")


def safe_batch(s: Search, limit_bytes: float | None) -> int | None:
    """The largest batch that fit with its peak within HEADROOM of ``limit_bytes`` (the largest that fit, without one)."""
    fits = [p for p in s.probes if p.ok]
    if limit_bytes:
        fits = [p for p in fits if (p.device_peak_bytes or p.host_peak_bytes or 0) <= HEADROOM * limit_bytes]
    return max((p.batch for p in fits), default=None)


def outcome(batch: int, info: dict, memory_limit_bytes: float | None) -> Outcome:
    """A probe's outcome from its record's ``extra_info``; over the CPU limit counts as out of memory."""
    status, reason = str(info.get("status") or "error"), str(info.get("reason") or "")
    dev, host = info.get("device_peak_mem_bytes"), info.get("host_peak_rss_bytes")
    if status == "error" and "SIGKILL" in reason:
        status = "oom-suspect"  # the kernel's OOM killer, most often
    if status == "ok" and memory_limit_bytes and info.get("device_kind") == "cpu" and (host or 0) > memory_limit_bytes:
        status, reason = (
            "oom",
            f"peak resident memory {float(host or 0) / 2**30:.2f} GiB passed the limit of {memory_limit_bytes / 2**30:.2f} GiB",
        )
    return Outcome(batch, status, reason[-300:], int(dev) if dev else None, int(host) if host else None)


def key(case: Case, profile: str, memory_limit_bytes: float | None, machine_info: dict) -> str:
    """What a search's answer depends on: the case without its batch, profile, limit, device, versions, allocator."""
    parts = case.id_parts()
    parts["batch"] = ""
    env = {k: os.environ.get(k, "") for k in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_FLAGS", "TF_GPU_ALLOCATOR")}
    return json.dumps(
        {
            "case": "-".join(v for v in parts.values() if v),
            "profile": profile,
            "memory_limit_bytes": memory_limit_bytes,
            "machine": machine_info,
            "env": env,
        },
        sort_keys=True,
    )


def add_parser(sub) -> None:
    """Register ``maxbatch`` on the main parser."""
    m = sub.add_parser("maxbatch", help="the largest batch that fits, per workload, mode, precision and device")
    m.add_argument("--profile", default="standard", help="smoke | standard (default) | large: the model sizes")
    m.add_argument("--workloads", default="mlp", help="comma list of mlp, cnn, transformer (default mlp)")
    m.add_argument("--modes", default="train", help="comma list of train, infer (default train)")
    m.add_argument("--devices", default="cpu", help="comma list of cpu, gpu:K (default cpu)")
    m.add_argument("--precisions", default="fp32", help="comma list of precisions (default fp32)")
    m.add_argument("--backend", default="tensorflow", help="tensorflow (default) | jax")
    m.add_argument("--start", type=int, default=None, help="first batch tried (default: the profile's)")
    m.add_argument(
        "--memory-limit", type=float, default=None, metavar="GIB", help="on a CPU: the memory the peak may use"
    )
    m.add_argument("--results-dir", default="results", help="the probes' runs and maxbatch.json go here")
    m.add_argument("--fresh", action="store_true", help="probe again even where maxbatch.json has the answer")


def command(a: Any) -> int:
    """``accelbench maxbatch``: search each combination, print and record the answers."""
    from bench import devices, storage
    from bench.planning import RunOptions, plan
    from bench.provenance import machine_info, now
    from bench.runner import Run
    from workloads import WORKLOADS

    limit = a.memory_limit * 2**30 if a.memory_limit else None
    if limit is not None and not 0 < limit < 2**50:
        raise UserError(f"--memory-limit must be a positive number of GiB; got {a.memory_limit}")
    split = lambda s: tuple(x.strip() for x in s.split(",") if x.strip())  # noqa: E731
    base = RunOptions(
        profile=a.profile,
        workloads=split(a.workloads),
        modes=split(a.modes),
        devices=split(a.devices),
        precisions=split(a.precisions),
        backend=a.backend,
        repeats=0,
        probe=True,
    )
    if set(base.modes) - {"train", "infer"}:
        raise UserError("maxbatch searches train and infer (a serve case's batch is its batcher's)")
    if a.start is not None and not 1 <= a.start <= MAX_KNOB:
        raise UserError(f"--start must be from 1 to {MAX_KNOB}; got {a.start}")
    from bench import backends

    machine = devices.discover(backends=backends.resolve(a.backend))
    results = Path(a.results_dir)
    store_path = results / "maxbatch.json"
    store = json.loads(store_path.read_text()) if store_path.exists() else {}
    runs_dir = results / "maxbatch-probes"
    for case, support in plan(base, machine):
        if not support.supported:
            print(f"{case.id}: unsupported here: {support.reason}")
            continue
        one = dataclasses.replace(
            base,
            workloads=(case.workload,),
            modes=(case.mode,),
            devices=(case.device.spec,),
            precisions=(case.precision,),
            keyword="",
        )
        k = key(case, a.profile, limit, storage.machine_fingerprint({"machine_info": machine_info(machine)}))
        if k in store and not a.fresh:
            e = store[k]
            print(
                f"{case.id}: max batch {e['max_ok']} (safe {e['safe_batch']}; recorded {e['when']}, --fresh to probe again)"
            )
            continue

        def probe(b: int, one: RunOptions = one) -> Outcome:
            opts = dataclasses.replace(one, batch_size=b)
            path = Run.new(opts, machine, runs_dir, ["maxbatch", f"batch={b}"]).execute()
            (info,) = [r["extra_info"] for r in storage.records(storage.load(path))]
            out = outcome(b, info, limit)
            print(f"  {info.get('case_id')}: {out.status} {out.reason[:100]}", file=sys.stderr)
            return out

        start = a.start or WORKLOADS[case.workload].batch[a.profile]
        s = search(probe, start)
        pool = limit or _device_memory(machine, case)
        safe = safe_batch(s, pool)
        store[k] = {**s.to_dict(), "safe_batch": safe, "case": case.id, "pool_bytes": pool, "when": now()}
        storage.write_bytes_atomic(store_path, json.dumps(store, indent=1).encode())
        print(
            f"{case.id}: max batch {s.max_ok} (first failure {s.first_fail}, {s.stopped}; safe {safe}) in {len(s.probes)} probes"
        )
    return 0


def _device_memory(machine: Any, case: Case) -> float | None:
    """A GPU case's memory per device (bytes), for the headroom; None on a CPU without a limit."""
    if case.device_kind != "gpu":
        return None
    mem = [g.memory_total_bytes for g in machine.nvml.gpus[: case.device_count] if g.memory_total_bytes]
    return float(min(mem)) if mem else None
