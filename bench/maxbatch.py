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
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.batchsearch import Outcome, outcome, safe_batch, search
from bench.batchsearch import key as search_key
from bench.cases import MAX_KNOB, Case
from bench.errors import UserError


def add_parser(sub, as_list: Callable[[str], tuple[str, ...]]) -> None:
    """Register ``maxbatch`` on the main parser (``as_list``: the command line's comma-list type)."""
    m = sub.add_parser("maxbatch", help="the largest batch that fits, per workload, mode, precision and device")
    m.add_argument("--profile", default="standard", help="smoke | standard (default) | large: the model sizes")
    m.add_argument(
        "--workloads", type=as_list, default=("mlp",), help="comma list of mlp, cnn, transformer (default mlp)"
    )
    m.add_argument("--modes", type=as_list, default=("train",), help="comma list of train, infer (default train)")
    m.add_argument("--devices", type=as_list, default=("cpu",), help="comma list of cpu, gpu:K (default cpu)")
    m.add_argument("--precisions", type=as_list, default=("fp32",), help="comma list of precisions (default fp32)")
    m.add_argument("--backend", default="tensorflow", help="tensorflow (default) | jax")
    m.add_argument("--start", type=int, default=None, help="first batch tried (default: the profile's)")
    m.add_argument("--max", type=int, default=MAX_KNOB, help=f"largest batch tried (default {MAX_KNOB})")
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
    base = RunOptions(
        profile=a.profile,
        workloads=a.workloads,
        modes=a.modes,
        devices=a.devices,
        precisions=a.precisions,
        backend=a.backend,
        repeats=0,
        probe=True,
    )
    if set(base.modes) - {"train", "infer"}:
        raise UserError("maxbatch searches train and infer (a serve case's batch is its batcher's)")
    for flag, v in (("--start", a.start), ("--max", a.max)):
        if v is not None and not 1 <= v <= MAX_KNOB:
            raise UserError(f"{flag} must be from 1 to {MAX_KNOB}; got {v}")
    from bench import backends

    machine = devices.discover(backends=backends.resolve(a.backend))
    results = Path(a.results_dir)
    store_path = results / "maxbatch.json"
    store = json.loads(store_path.read_text()) if store_path.exists() else {}
    runs_dir = results / "maxbatch-probes"
    for case, support in plan(base, machine):
        what = case.id_without("batch")  # what the search is about
        if not support.supported:
            print(f"{what}: unsupported here: {support.reason}")
            continue
        one = dataclasses.replace(
            base,
            workloads=(case.workload,),
            modes=(case.mode,),
            devices=(case.device.spec,),
            precisions=(case.precision,),
            keyword="",
        )
        k = search_key(
            case, a.profile, limit, storage.machine_fingerprint({"machine_info": machine_info(machine)}), a.max
        )
        if k in store and not a.fresh:
            e = store[k]
            print(
                f"{what}: max batch {e['max_ok']} (safe {e['safe_batch']}; recorded {e['when']}, --fresh to probe again)"
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
        s = search(probe, start, a.max)
        pool = limit or _device_memory(machine, case)
        safe = safe_batch(s, pool)
        store[k] = {**s.to_dict(), "safe_batch": safe, "case": case.id, "pool_bytes": pool, "when": now()}
        storage.write_bytes_atomic(store_path, json.dumps(store, indent=1).encode())
        print(
            f"{what}: max batch {s.max_ok} (first failure {s.first_fail}, {s.stopped}; safe {safe}) in {len(s.probes)} probes"
        )
    return 0


def _device_memory(machine: Any, case: Case) -> float | None:
    """A GPU case's memory per device (bytes), for the headroom; None on a CPU without a limit."""
    if case.device_kind != "gpu":
        return None
    mem = [g.memory_total_bytes for g in machine.nvml.gpus[: case.device_count] if g.memory_total_bytes]
    return float(min(mem)) if mem else None
