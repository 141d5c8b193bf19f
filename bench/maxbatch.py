"""The largest batch that fits: doubling, then bisection, each probe in a fresh worker.

``accelbench maxbatch --workloads cnn --modes train --devices gpu:1 --precisions mixed_bfloat16``.
Frameworks do not recover reliably from an out-of-memory error in-process (tensorflow#4735,
keras#434, Lightning#8028: ``../shared/design/sweeps.md`` 3.3), so every probe is a one-case run
in its own worker process, as DeepSpeed's autotuner, OTX and torchbench do: the case at that
batch, compiled, warmed up and stepped for a few short rounds (the matmul peak and the copy
probe once per search: its first probe measures them, the later ones take its figures). The worker tells an OOM (the
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

from bench.batchsearch import HEADROOM, Outcome, outcome, safe_batch, search
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
    from bench import backends, devices
    from bench.planning import RunOptions, plan

    limit = _limit_bytes(a.memory_limit)
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
    machine = devices.discover(backends=backends.resolve(a.backend), keep=True)
    searcher = Searcher(base, machine, Path(a.results_dir), limit, a.max, a.fresh)
    for case, support in plan(base, machine):
        what = case.id_without("batch")  # what the search is about
        if not support.supported:
            print(f"{what}: unsupported here: {support.reason}")
            continue
        e, recorded = searcher.find(case, a.start)
        if recorded:
            print(
                f"{what}: max batch {e['max_ok']} (safe {e['safe_batch']}; recorded {e['when']}, --fresh to probe again)"
            )
        else:
            print(
                f"{what}: max batch {e['max_ok']} (first failure {e['first_fail']}, {e['stopped']}; "
                f"safe {e['safe_batch']}) in {len(e['probes'])} probes"
            )
    return 0


def _limit_bytes(gib: float | None) -> float | None:
    limit = gib * 2**30 if gib else None
    if limit is not None and not 0 < limit < 2**50:
        raise UserError(f"--memory-limit must be a positive number of GiB; got {gib}")
    return limit


def probe_options(case: Case, base: Any, batch: int) -> Any:
    """The run options of one probe: exactly ``case`` at ``batch``.

    Its backend, compile switch and knobs as the case has them, measured to its first look
    (``probe``), no second workers.
    """
    return dataclasses.replace(
        base,
        workloads=(case.workload,),
        modes=(case.mode,),
        devices=(case.device.spec,),
        precisions=(case.precision,),
        backend=case.backend,
        xla="on" if case.xla else "off",
        parallelism=case.parallelism,
        sweeps=tuple(f"{k}={v}" for k, v in case.knobs),
        grid="full",  # the knobs together, as the case has them
        batch_size=batch,
        keyword=case.related(per_replica_batch=batch).id,
        tenants=(),
        tenant_mix=False,
        repeats=0,
        probe=True,
        max_batches=(),
    )


class Searcher:
    """Searches (or reads back) the largest batch of cases, recording each in ``<results>/maxbatch.json``."""

    def __init__(
        self, base: Any, machine: Any, results: Path, limit: float | None, cap: int = MAX_KNOB, fresh: bool = False
    ):
        from bench.fingerprint import machine_fingerprint
        from bench.provenance import machine_info

        self.base, self.machine, self.limit, self.cap, self.fresh = base, machine, limit, cap, fresh
        self.store_path, self.runs_dir = results / "maxbatch.json", results / "maxbatch-probes"
        self.store = json.loads(self.store_path.read_text()) if self.store_path.exists() else {}
        self.fingerprint = machine_fingerprint({"machine_info": machine_info(machine)})

    def find(self, case: Case, start: int | None = None) -> tuple[dict, bool]:
        """The search's record for ``case`` (any batch), and whether it was read back rather than probed."""
        from bench import storage
        from bench.provenance import now
        from bench.runner import Run
        from workloads import WORKLOADS

        k = search_key(case, self.base.profile, self.limit, self.fingerprint, self.cap)
        if not self.fresh:
            known = self._recorded(k)
            if known is not None:
                return known, True

        earlier: list[storage.CaseRecord] = []

        def probe(b: int) -> Outcome:
            opts = probe_options(case, self.base, b)
            run = Run.new(opts, self.machine, self.runs_dir, ["maxbatch", f"batch={b}"])
            run.probes_from = earlier  # the matmul peak and copy probe of the search's first probe, measured once
            (rec,) = storage.case_records(storage.load(run.execute()))
            earlier.append(rec)
            info = dict(rec.info)
            out = outcome(b, info, self.limit)
            print(f"  {info.get('case_id')}: {out.status} {out.reason[:100]}", file=sys.stderr)
            return out

        s = search(probe, start or WORKLOADS[case.workload].batch[self.base.profile], self.cap)
        pool = self.limit or _device_memory(self.machine, case)
        safe = safe_batch(s, pool)
        e = {**s.to_dict(), "safe_batch": safe, "case": case.id, "pool_bytes": pool, "when": now()}
        self.store[k] = e
        storage.write_bytes_atomic(self.store_path, json.dumps(self.store, indent=1).encode())
        return e, False

    def _recorded(self, k: str) -> dict | None:
        """The stored answer for key ``k``, or one that bracketed the limit below this search's cap.

        A search that found its first failure at or below this one's largest batch tried answers the
        same question: its answer does not depend on how far it could have climbed.
        """
        if k in self.store:
            return self.store[k]
        want = json.loads(k)
        cap = want.pop("max_batch_tried")
        for other, e in self.store.items():
            o = json.loads(other)
            o.pop("max_batch_tried", None)
            if o == want and e.get("stopped") == "bracketed" and e.get("first_fail") and e["first_fail"] <= cap:
                return e
        return None


def default_cpu_limit_gib() -> float:
    """Half the memory that is free now: a CPU's largest-batch search must not reach the kernel's OOM killer."""
    import psutil

    return round(psutil.virtual_memory().available / 2**30 / 2, 2)


def resolve(opts: Any, machine: Any, results: Path, say: Callable[[str], None] = print) -> Any:
    """``opts`` with every case asked at ``max`` (``--batch-size max``, ``--sweep batch=...,max``) given its safe batch.

    Each is searched as ``accelbench maxbatch`` would (or read back from ``maxbatch.json``); a case
    where nothing fits, or whose search met an error, keeps the reason and is planned unsupported.
    A resumed run keeps the answers it stored.
    """
    import dataclasses as dc

    from bench.planning import max_cases

    if not opts.wants_max or opts.max_batches:
        return opts
    cases = max_cases(opts, machine)
    cpu_gib = opts.memory_limit_gib
    if cpu_gib is None and any(c.device_kind == "cpu" for c in cases):
        cpu_gib = default_cpu_limit_gib()
        say(
            f"batch max: CPU cases search under {cpu_gib} GiB of peak resident memory (half of what is free; --memory-limit)"
        )
    searchers: dict[str, Searcher] = {}
    found: list[tuple[str, int | None, int | None, int | None, str]] = []
    for c in cases:
        kind = c.device_kind
        if kind not in searchers:
            limit = _limit_bytes(cpu_gib) if kind == "cpu" else None
            searchers[kind] = Searcher(opts, machine, results, limit)
        e, recorded = searchers[kind].find(c)
        safe = e.get("safe_batch")
        how = "recorded " + str(e.get("when")) if recorded else f"{len(e['probes'])} probes"
        if safe:
            why = f"largest that fits {e['max_ok']}, first failure {e['first_fail']}, safe {safe} ({how})"
        elif e.get("max_ok"):
            why = (
                f"largest that fits {e['max_ok']}, but no batch tried kept its peak within "
                f"{HEADROOM:.0%} of the limit ({how}; a larger --memory-limit, or --batch-size N)"
            )
        else:
            last = e["probes"][-1]["reason"] if e.get("probes") else ""
            why = f"no batch found ({e['stopped']}; {how}){': ' + last[:200] if last else ''}"
        say(f"{c.id_without('batch')}: batch max -> {safe or 'none'}: {why}")
        found.append((c.id_without("batch"), safe, e.get("max_ok"), e.get("first_fail"), why))
    return dc.replace(opts, max_batches=tuple(found), memory_limit_gib=cpu_gib)


def _device_memory(machine: Any, case: Case) -> float | None:
    """A GPU case's memory per device (bytes), for the headroom; None on a CPU without a limit."""
    if case.device_kind != "gpu":
        return None
    mem = [g.memory_total_bytes for g in machine.nvml.gpus[: case.device_count] if g.memory_total_bytes]
    return float(min(mem)) if mem else None
