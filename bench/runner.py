"""Running a plan: one worker process per device configuration, results rewritten atomically.

The parent never imports TensorFlow. It writes ``results/<run-id>.json`` after every finished
case (so ``kill -9`` at any moment leaves a valid file with every finished case), restarts a
worker that died for the cases it had left, and records the case it died on as ``error``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import __version__, records, storage
from bench.cases import Case, DeviceConfig
from bench.devices import Machine
from bench.errors import UserError
from bench.planning import RunOptions, plan
from bench.telemetry import gpus as nvml
from workloads import WORKLOADS

WORKER = [sys.executable, "-m", "bench.worker"]  # + PLAN SPOOL
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")


def new_run_id() -> str:
    """``YYYYmmdd-HHMMSS-xxxx`` (UTC, random suffix)."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def results_path(results_dir: str | Path, run_id: str) -> Path:
    """Where a run's results live; rejects ids that are not plain names."""
    if not RUN_ID_RE.match(run_id):
        raise UserError(f"run id must be letters, digits, '.', '_' or '-'; got {run_id!r}")
    return Path(results_dir) / f"{run_id}.json"


def machine_info(machine: Machine) -> dict:
    """pytest-benchmark's machine_info plus the accelbench block."""
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

    info = pytest_benchmark_generate_machine_info()
    info["accelbench"] = machine.to_dict()
    return info


def commit_info() -> dict:
    """pytest-benchmark's commit_info of the current folder."""
    from pytest_benchmark.utils import get_commit_info

    return get_commit_info()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _info_for(case: Case, run_id: str, profile: str) -> dict:
    w = WORKLOADS[case.workload]
    return records.base_info(case, run_id, w.flops_per_sample(w.size(profile), case.mode))


class Run:
    """One run (new or resumed) writing one results file."""

    def __init__(
        self,
        opts: RunOptions,
        machine: Machine,
        results_dir: str | Path,
        argv: list[str],
        resume: str | None = None,
        progress: Callable[..., Any] | None = None,
    ):
        self.opts, self.machine, self.argv = opts, machine, argv
        if resume:
            self.path = results_path(results_dir, resume)
            self.doc = storage.load(self.path)
            self.opts = RunOptions.from_dict(self.doc["run"]["options"])
            self.run_id = resume
        else:
            self.run_id = new_run_id()
            self.path = results_path(results_dir, self.run_id)
            self.doc = storage.new_document(
                run={
                    "id": self.run_id,
                    "profile": opts.profile,
                    "argv": argv,
                    "start": _now(),
                    "end": None,
                    "status": "running",
                    "options": opts.to_dict(),
                    "planned": [],
                },
                machine_info=machine_info(machine),
                commit_info=commit_info(),
                datetime_iso=_now(),
                version=__version__,
            )
        self.plan = plan(self.opts, machine)
        self.progress = progress

    def _save(self) -> None:
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
                info = _info_for(case, self.run_id, self.opts.profile)
                info.update(status="unsupported", reason=sup.reason)
                storage.add_record(self.doc, records.unmeasured(case, info))
            else:
                todo.append(case)
        self.doc["run"]["status"] = "running"
        self._save()
        idle = self._idle_power(todo)
        bar = self.progress(total=len(todo)) if self.progress else None
        try:
            by_config: dict[DeviceConfig, list[Case]] = {}
            for c in todo:
                by_config.setdefault(c.device, []).append(c)
            for device, cases in by_config.items():
                self._run_config(device, cases, idle, bar)
            self.doc["run"]["status"] = "complete"
        except KeyboardInterrupt:
            self.doc["run"]["status"] = "interrupted"
            raise
        finally:
            self.doc["run"]["end"] = _now()
            self._save()
            if bar is not None:
                bar.close()
        return self.path

    def _idle_power(self, todo: list[Case]) -> dict:
        """Idle power per GPU, once per run, before any worker starts (nothing runs on them)."""
        if not any(c.device_kind == "gpu" for c in todo):
            return {}
        found = nvml.discover()
        if found.reason:
            return {}
        idle = nvml.idle_power_w(found.gpus, seconds=1.0)
        self.doc["run"]["idle_power_w"] = idle
        return idle

    def _run_config(self, device: DeviceConfig, cases: list[Case], idle: dict, bar) -> None:
        remaining = list(cases)
        logdir = self.path.with_suffix(".logs")
        logdir.mkdir(parents=True, exist_ok=True)
        attempt = 0
        while remaining:
            attempt += 1
            with tempfile.TemporaryDirectory() as d:
                plan_path, spool = Path(d) / "plan.json", Path(d) / "spool.jsonl"
                plan_path.write_text(
                    json.dumps(
                        {
                            "run_id": self.run_id,
                            "profile": self.opts.profile,
                            "device": {"kind": device.kind, "count": device.count, "virtual": device.virtual},
                            "timing": self.opts.timing.to_dict(),
                            "cases": [{"case_id": c.id, **c.to_dict()} for c in remaining],
                            "idle_power_w": idle,
                            "sampler_interval_s": self.opts.sampler_interval_s,
                            "sampler": self.opts.sampler,
                            "nvml_status": self.machine.nvml.reason or "ok",
                        }
                    )
                )
                log = logdir / f"{device.label}-{attempt}.log"
                rc = self._watch_worker(plan_path, spool, log, remaining, bar)
            if remaining and rc is not None:
                # the worker died while running remaining[0]: that case is the casualty
                case = remaining.pop(0)
                info = _info_for(case, self.run_id, self.opts.profile)
                tail = _log_tail(log)
                how = f"exit code {rc}"
                if rc < 0:
                    how = f"killed by signal {-rc}" + (" (SIGKILL: often the kernel's OOM killer)" if rc == -9 else "")
                oom = "out of memory" in tail.lower() or "oom" in tail.lower().split()
                info.update(
                    status="oom" if oom else "error",
                    reason=f"worker process died ({how}) during this case; log {log}: {tail}",
                )
                storage.add_record(self.doc, records.unmeasured(case, info))
                self._save()
                if bar is not None:
                    bar.update(1)

    def _watch_worker(self, plan_path: Path, spool: Path, log: Path, remaining: list[Case], bar) -> int | None:
        """Run one worker; merge its records as they arrive. Returns its exit code."""
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", PYTHONUNBUFFERED="1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        with open(log, "w") as logf:
            proc = subprocess.Popen(
                [*WORKER, str(plan_path), str(spool)],
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
            )
            offset = 0
            try:
                while True:
                    rc = proc.poll()
                    offset = self._merge(spool, offset, remaining, bar)
                    if rc is not None:
                        self._merge(spool, offset, remaining, bar)
                        return rc
                    time.sleep(0.2)
            except BaseException:
                proc.kill()
                proc.wait()
                raise

    def _merge(self, spool: Path, offset: int, remaining: list[Case], bar) -> int:
        if not spool.exists():
            return offset
        with open(spool) as f:
            f.seek(offset)
            data = f.read()
        lines = data.split("\n")
        complete, rest = lines[:-1], lines[-1]
        for line in complete:
            rec = json.loads(line)
            storage.add_record(self.doc, rec)
            cid = storage.case_id_of(rec)
            remaining[:] = [c for c in remaining if c.id != cid]
            self._save()
            if bar is not None:
                bar.set_postfix_str(f"{cid}: {rec['extra_info']['status']}", refresh=False)
                bar.update(1)
        return offset + len(data) - len(rest)


def _log_tail(log: Path, n: int = 3) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    keep = [ln for ln in lines if not ln.startswith(("WARNING", "I0000", "W0000"))]
    return " | ".join(keep[-n:])[-400:] or "no output"
