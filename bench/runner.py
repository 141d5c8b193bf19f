"""Running a plan: one worker process per group of cases, results rewritten atomically.

Groups (``bench.groups``): a device configuration, its TF32 setting on GPUs, XLA on or off. The
parent never imports TensorFlow. It writes
``results/<run-id>.json`` after every finished case (so ``kill -9`` at any moment leaves a
valid file with every finished case), restarts a worker that died for the cases it had left,
and records the case it died on as ``error``. A worker that reports no progress (heartbeats
name its phase) within the profile's bound is killed and its case recorded as ``timeout``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from bench import __version__, backends, compile_cache, protocol, records, spread, storage, sweep, tenant_run, watchdog
from bench.cases import Case
from bench.cluster import Cluster
from bench.devices import Machine
from bench.errors import UserError
from bench.groups import GroupKey, climbing_order, group_key, group_label, run_order
from bench.planning import RunOptions, plan
from bench.protocol import WorkerPlan
from bench.provenance import ci_context, commit_info, machine_info, new_run_id, now, results_path
from bench.telemetry.idle import run_idle_power
from bench.watchdog import (
    NCCL_HINT,
    RELEASE_WAIT_S,
    STALLS_IN_A_ROW,
    ClusterFailed,
    WorkerEnd,
    casualty,
    kill_worker,
    multi_gpu,
    start_worker,
)


class Run:
    """One run writing one results file: :meth:`new` starts one, :meth:`resume` continues a stored one."""

    def __init__(
        self,
        opts: RunOptions,
        machine: Machine,
        path: Path,
        doc: dict,
        progress: Callable[..., Any] | None = None,
        cluster: Cluster | None = None,
    ):
        self.opts, self.machine, self.path, self.doc = opts, machine, path, doc
        self.run_id: str = doc["run"]["id"]
        self.cluster = cluster
        self.repeat = 0  # in the passes of further workers (bench.spread), which one: records go beside the first ones
        # records of earlier runs whose probes this run takes as its own (a largest-batch search's probes: bench.maxbatch)
        self.probes_from: list[storage.CaseRecord] = []
        # in a cluster only rank 0 owns the results file and the report; other ranks keep logs
        self.owner = cluster is None or cluster.rank == 0
        self.plan = plan(self.opts, machine)
        if cluster is not None and cluster.tasks_here > 1 and any(c.device_kind == "gpu" for c, _ in self.plan):
            # every task of a node would open the same first K GPUs (NCCL: "Duplicate GPU detected"), and
            # the node's energy would be counted once per task (gpu-review-2 finding 6)
            raise UserError(
                f"{cluster.tasks_here} tasks on this node ({cluster.hosts[cluster.rank]}) with GPU cases: accelbench "
                "runs one task per node that drives all its GPUs; launch with --ntasks-per-node=1"
            )
        self.progress = progress
        # a batch sweep's pairs of lines, whose higher points a worker leaves out once answered (not in a cluster:
        # its ranks must run the same cases)
        asked = "batch" in [a.name for a in opts.axes] and not opts.every_point and cluster is None
        self.climbs = sweep.climbs([c for c, sup in self.plan if sup.supported]) if asked else []

    @classmethod
    def new(
        cls,
        opts: RunOptions,
        machine: Machine,
        results_dir: str | Path,
        argv: list[str],
        *,
        progress: Callable[..., Any] | None = None,
        cluster: Cluster | None = None,
        run_id: str | None = None,
    ) -> Run:
        """A new results document (written on the first save); a given ``run_id`` must be unused."""
        rid = run_id or new_run_id()
        path = results_path(results_dir, rid)
        if run_id and (cluster is None or cluster.rank == 0) and path.exists():
            raise UserError(f"{path} exists: pick another --run-id, or --resume {run_id}")
        doc = storage.new_document(
            run={
                "id": rid,
                "profile": opts.profile,
                "argv": argv,
                "start": now(),
                "end": None,
                "status": "running",
                "options": opts.to_dict(),
                "planned": [],
                "shard": opts.shard or None,
                "cluster": cluster.to_dict() if cluster else None,
                **ci_context(),
            },
            machine_info=machine_info(machine),
            commit_info=commit_info(),
            datetime_iso=now(),
            version=__version__,
        )
        return cls(opts, machine, path, doc, progress, cluster)

    @classmethod
    def resume(
        cls,
        run_id: str,
        opts: RunOptions,
        machine: Machine,
        results_dir: str | Path,
        argv: list[str],
        *,
        progress: Callable[..., Any] | None = None,
        cluster: Cluster | None = None,
    ) -> Run:
        """The stored run ``run_id``, planned with its stored options, to run its missing cases.

        In a cluster only rank 0 has the file; the other ranks plan from ``opts`` (the command line),
        so rank 0 checks that they are the stored ones.
        """
        if cluster is not None and cluster.rank > 0:
            return cls.new(opts, machine, results_dir, argv, progress=progress, cluster=cluster, run_id=run_id)
        path = results_path(results_dir, run_id)
        doc = storage.load(path)
        stored = RunOptions.from_dict(doc["run"]["options"])
        if cluster and stored != opts:
            raise UserError(f"--resume {run_id} --cluster: give the same options as the first attempt of the run")
        return cls(stored, machine, path, doc, progress, cluster)

    def _save(self) -> None:
        if self.owner:
            storage.write_atomic(self.path, self.doc)

    def execute(self) -> Path:
        """Run every missing case; returns the results path."""
        self.doc["run"]["planned"] = [c.id for c, _ in self.plan]
        done = storage.case_ids(self.doc)
        todo: list[Case] = []
        for case, sup in self.plan:
            if case.id in done:
                continue
            if not sup.supported:
                info = records.case_info(case, self.run_id, self.opts.profile)
                info.update(status="unsupported", reason=sup.reason)
                storage.add_record(self.doc, records.unmeasured(case, info))
            else:
                todo.append(case)
        self.doc["run"]["status"] = "running"
        self._save()
        bar = self.progress(total=len(todo)) if self.progress else None
        try:
            idle = run_idle_power(self.doc["run"], any(c.device_kind == "gpu" for c in todo))
            groups: dict[GroupKey, list[Case]] = {}
            skip: set[str] = set()
            if self.cluster:
                # every rank starts the same workers for the same cases (only rank 0 knows what
                # an earlier attempt finished: the workers agree on rank 0's list and skip it);
                # a case a peer's failure cut short runs again
                kept = {r.id for r in storage.case_records(self.doc) if not r.get("peer_failure")}
                skip = {c.id for c, sup in self.plan if sup.supported and c.id in kept}
                todo = [c for c, sup in self.plan if sup.supported]
            for c in todo:
                if c.tenants == 1:
                    groups.setdefault(group_key(c), []).append(c)
            if self.climbs:
                groups = climbing_order(groups)
            for key, cases in groups.items():
                self._run_group(key, run_order(cases, self.opts.profile), idle, bar, skip)
            self._repeat_workers(groups, idle, bar)
            for c in todo:  # after the ordinary cases: N workers at once on one device
                if c.tenants > 1:
                    self._run_tenants(c, idle, bar)
            self.doc["run"]["between_worker_spread"] = spread.annotate(
                [r["extra_info"] for r in storage.records(self.doc)]
            )
            self.doc["run"]["status"] = "complete"
        except KeyboardInterrupt:
            self.doc["run"]["status"] = "interrupted"
            raise
        except (ClusterFailed, UserError):
            self.doc["run"]["status"] = "failed"
            raise
        finally:
            self.doc["run"]["end"] = now()
            self._save()
            if bar is not None:
                bar.close()
        return self.path

    def _repeat_workers(self, groups: dict[GroupKey, list[Case]], idle: dict, bar) -> None:
        """The same cases again in fresh workers (fresh process, compile cache off): the run-level spread."""
        info = {storage.case_id_of(r): r["extra_info"] for r in storage.records(self.doc)}
        done = [c.id for cs in groups.values() for c in cs if c.id in info and spread.eligible(info[c.id])]
        walls = {cid: info[cid].get("case_wall_s") for cid in done}
        again = set(spread.chosen(self.run_id, done, self.opts.repeats, walls))
        if self.cluster or not again:
            return
        if bar is not None:
            bar.total += len(again) * max(1, self.opts.repeats - 1)
        try:
            for n in range(1, max(2, self.opts.repeats)):
                self.repeat = n
                for key, cases in groups.items():
                    if [c for c in cases if c.id in again]:
                        self._run_group(key, [c for c in cases if c.id in again], idle, bar)
        finally:
            self.repeat = 0

    def _add(self, record: dict) -> None:
        """A record of this run: a repeat worker's goes beside the case's first (never over it)."""
        (storage.add_repeat if self.repeat else storage.add_record)(self.doc, record)

    def _cache_env(self, key: GroupKey) -> dict[str, str]:
        """A JAX worker's compile cache: its folder under ``--compile-cache`` for this stack and device."""
        if key[3] != "jax":
            return {}
        if self.repeat:  # a repeat worker compiles afresh: the spread it measures includes XLA's autotuning
            return compile_cache.jax_env(None)
        folder = compile_cache.folder_for(self.opts.compile_cache, key[0].kind, self.machine)
        self.doc["run"]["compile_cache"] = str(folder.parent) if folder else compile_cache.OFF
        return compile_cache.jax_env(folder)

    def _plan_for(self, key: GroupKey, cases: list[Case], idle: dict, skip: Collection[str]) -> WorkerPlan:
        device, backend = key[0], key[3]
        ids = {c.id for c in cases}
        mine = [c for c in self.climbs if c.ids & ids] if not self.repeat else []  # a repeat measures what it is given
        wanted = set().union(*(c.ids for c in mine))
        done = storage.case_records(self.doc)
        gpu = (
            self.machine.jax_gpu_plan(device.kind, device.count)
            if backend != "tensorflow"  # JAX and torch name their GPUs by NVML UUID
            else self.machine.gpu_plan(device.kind, device.count, device.virtual)
        )
        return WorkerPlan(
            run_id=self.run_id,
            profile=self.opts.profile,
            backend=backend,
            device=device,
            timing=spread.repeat_timing(self.opts.timing) if self.repeat else self.opts.timing,
            cases=tuple(cases),
            gpu=gpu,
            idle_power_w=idle,
            sampler_interval_s=self.opts.sampler_interval_s,
            sampler=self.opts.sampler,
            nvml_status=self.machine.nvml.reason or "ok",
            cluster=self.cluster.to_dict() if self.cluster else None,
            skip=tuple(sorted(skip)),
            # probed once per run, device kind and precision; a cluster's nodes each probe their own
            probes={} if self.cluster else records.probes_of([*self.probes_from, *done], device.kind, self.opts.timing),
            climb=tuple(mine),
            rounds={r.id: r.throughput_samples for r in done if r.ok and r.id in wanted},
        )

    def _run_group(self, key: GroupKey, cases: list[Case], idle: dict, bar, skip: Collection[str] = ()) -> None:
        remaining = [c for c in cases if c.id not in skip]
        logdir = self.path.with_suffix(".logs")
        logdir.mkdir(parents=True, exist_ok=True)
        attempt, stalls = 0, 0  # stalls: of consecutive workers that measured nothing before they hung
        while remaining or (self.cluster and attempt == 0):  # a cluster worker starts on every rank
            attempt += 1
            with tempfile.TemporaryDirectory() as d:
                plan_path, spool = Path(d) / "plan.json", Path(d) / "spool.jsonl"
                plan = self._plan_for(key, cases if self.cluster else remaining, idle, skip)
                plan.write(plan_path)
                log = logdir / f"{group_label(key)}{f'-repeat{self.repeat}' if self.repeat else ''}-{attempt}.log"
                if self.cluster and self.cluster.rank > 0:
                    log = logdir / f"rank{self.cluster.rank}.log"
                env = {**backends.worker_env(key[3], key[0], plan.gpu), **self._cache_env(key)}
                before = len(remaining)
                end = self._watch_worker(plan_path, spool, log, remaining, bar, env)
            if end.fatal:
                raise UserError(end.fatal)
            if self.cluster and (remaining or end.rc):
                # a cluster cannot restart one worker (no rejoin): the case in flight is the
                # casualty (unless its worker recorded it), the rest stay for --resume
                hit = [c for c in remaining if c.id == end.case_id]
                if hit and end.rc:
                    info = self._casualty(hit[0], end, log)
                    info["peer_failure"] = True
                    self._add(records.unmeasured(hit[0], info))
                    self._save()
                raise ClusterFailed(
                    f"rank {self.cluster.rank}: the cluster broke "
                    f"({'during ' + end.case_id if end.case_id else 'at start-up'}; worker exit {end.rc}); "
                    f"finished cases are saved, --resume {self.run_id} runs the rest; log {log}"
                )
            if remaining and (end.rc is not None or end.stalled):
                # the worker died or hung while running a case: that case is the casualty
                hit = [c for c in remaining if c.id == end.case_id]
                case = hit[0] if hit else remaining[0]
                remaining.remove(case)
                info = self._casualty(case, end, log)
                stalls = stalls + 1 if end.stalled and len(remaining) + 1 == before else int(end.stalled)
                if end.stalled and remaining:
                    # the next worker starts when the GPUs are free again, or the record says why not
                    held = self._released(plan.gpu, end)
                    if held:
                        info["reason"] += f"; before the next worker: {held}"
                self._add(records.unmeasured(case, info))
                self._save()
                if bar is not None:
                    bar.update(1)
                if stalls >= STALLS_IN_A_ROW and remaining:
                    self._give_up(remaining, stalls, end, log, bar)
                    remaining.clear()

    def _run_tenants(self, case: Case, idle: dict, bar) -> None:
        """A tenant case (bench.tenant_run): its record, or its failure as data."""
        key = group_key(case)
        plan = self._plan_for(key, [case], idle, ())
        # tenants never fill the compile cache: an autotune under contention would pin a slow kernel
        env = {
            **backends.worker_env(key[3], key[0], plan.gpu),
            **(compile_cache.jax_env(None) if key[3] == "jax" else {}),
        }
        logdir = self.path.with_suffix(".logs")
        logdir.mkdir(parents=True, exist_ok=True)
        if bar is not None:
            bar.set_postfix_str(f"{case.id}: alone, then {case.tenants} tenants", refresh=True)
        rec, status, reason = tenant_run.measure(
            case, plan, env, logdir, self.opts.stall_s, self.opts.timing.case_budget_s
        )
        if rec is None:
            info = records.case_info(case, self.run_id, self.opts.profile)
            info.update(status=status, reason=reason)
            rec = records.unmeasured(case, info)
        storage.add_record(self.doc, rec)
        self._save()
        if bar is not None:
            bar.update(1)

    def _released(self, gpu: Mapping[str, Any], end: WorkerEnd) -> str | None:
        """After a stall on GPUs: wait (bounded) until NVML no longer lists the killed worker; why not, if not."""
        if end.unkillable:
            return f"the worker (pid {end.pid}) did not die within {watchdog.KILL_WAIT_S:.0f} s of SIGKILL (a GPU/driver hang? see dmesg for Xid)"
        buses = list(gpu.get("pci_bus_ids") or [])
        if not buses or end.pid is None:
            return None
        try:
            return watchdog.wait_released(buses, end.pid, RELEASE_WAIT_S)
        except Exception as e:  # telemetry must never cost the run
            return f"could not check the GPUs were released ({type(e).__name__}: {e})"

    def _give_up(self, remaining: list[Case], stalls: int, end: WorkerEnd, log: Path, bar) -> None:
        """A hang that persists: record the rest of the group as timeout instead of one stall bound each."""
        for case in remaining:
            info = records.case_info(case, self.run_id, self.opts.profile)
            info.update(
                status="timeout",
                reason=(
                    f"not run: {stalls} workers of this group hung in a row (last: {end.phase or 'starting'}), "
                    f"so the hang persists and each case would cost another {self.opts.stall_s:.0f} s"
                    f"{NCCL_HINT if multi_gpu(case) else ''}; log {log}"
                ),
            )
            self._add(records.unmeasured(case, info))
            if bar is not None:
                bar.update(1)
        self._save()

    def _casualty(self, case: Case, end: WorkerEnd, log: Path) -> dict:
        return casualty(records.case_info(case, self.run_id, self.opts.profile), case, end, log, self.opts.stall_s)

    def _watch_worker(
        self, plan_path: Path, spool: Path, log: Path, remaining: list[Case], bar, worker_env: Mapping[str, str]
    ) -> WorkerEnd:
        """Run one worker with its backend's environment; merge its records as they arrive; kill it when it stalls."""
        env = dict(worker_env)
        if self.cluster:
            env["TF_CONFIG"] = self.cluster.tf_config()  # one code path for every launcher
        end = WorkerEnd()
        proc = start_worker(watchdog.WORKER, plan_path, spool, log, env)
        offset, last = 0, time.monotonic()
        try:
            while True:
                rc = proc.poll()
                new = self._merge(spool, offset, remaining, bar, end)
                if new != offset:
                    offset, last = new, time.monotonic()
                if rc is not None:
                    self._merge(spool, offset, remaining, bar, end)
                    end.rc = rc
                    return end
                if time.monotonic() - last > self.opts.stall_s:
                    end.stalled, end.pid = True, proc.pid
                    end.rc = kill_worker(proc)
                    end.unkillable = end.rc is None
                    return end
                time.sleep(0.2)
        except BaseException:
            kill_worker(proc)
            raise

    def _merge(self, spool: Path, offset: int, remaining: list[Case], bar, end: WorkerEnd) -> int:
        messages, offset = protocol.read_new(spool, offset)
        for msg in messages:
            if isinstance(msg, protocol.Fatal):
                end.fatal = msg.message
            elif isinstance(msg, protocol.Skipped):  # measured in an earlier attempt (cluster resume)
                remaining[:] = [c for c in remaining if c.id != msg.case_id]
            elif isinstance(msg, protocol.Heartbeat):
                end.case_id, end.phase = msg.case_id, msg.phase
                if bar is not None:
                    bar.set_postfix_str(f"{end.case_id or 'worker'}: {end.phase}", refresh=True)
            else:
                self._add(dict(msg.record))
                remaining[:] = [c for c in remaining if c.id != msg.case_id]
                self._save()
                if bar is not None:
                    bar.set_postfix_str(f"{msg.case_id}: {msg.status}", refresh=False)
                    bar.update(1)
        return offset
