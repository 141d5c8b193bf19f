"""One device configuration in its own process: ``python -m bench.worker PLAN.json SPOOL.jsonl``.

The parent (``bench.runner``) starts one worker per device configuration, so visible and
logical devices are set before TensorFlow initialises, and an OOM-kill or crash loses only the
case in flight. Each finished case is appended to the spool as one JSON line (flushed and
fsynced); the parent owns the results file.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench import backends, protocol, stopping, storage, sweep
from bench.cases import Case
from bench.coordination import coordinator
from bench.protocol import WorkerPlan
from bench.rate_search import Unjudgeable
from bench.worker_probes import ProbeSteps
from bench.worker_serve import ServeSteps

SERVE_ROUNDS_SHARE = 4  # a serve case's timed rounds take a quarter of the profile's case budget

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


def _tail(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[-limit:]}"


class WorkerSession(ServeSteps, ProbeSteps):
    """Runs the cases of one plan; configured once per process.

    Progress goes to the spool as heartbeat lines (``{"heartbeat": {"case_id", "phase"}}``)
    between the case records: the parent's watchdog and progress bar read them. A heartbeat
    is never written inside a timed round.
    """

    def __init__(self, plan: WorkerPlan, spool: str | Path | None):
        self.plan = plan
        self.spool = protocol.SpoolWriter(spool)
        self.device = plan.device
        self.timing = plan.timing
        self.cases = {c.id: c for c in plan.cases}
        self.probes: dict[str, Any] = {}
        self._stopper: stopping.Stopper | None = None
        self._warm_step_s: float | None = None  # the last warm-up step of the case in hand (seconds)
        self._lifetime = 0  # JAX: the highest allocator peak of this worker so far (it cannot be reset)
        self.skip: set[str] = set()
        # a batch sweep's per-round throughput so far (earlier workers', then this one's): whether to climb on
        self.rounds: dict[str, list[float]] = {k: list(v) for k, v in plan.rounds.items()}
        self._floor = 0.0  # serve: the harness floor of the case in hand (ms)
        self.setup_error: str | None = None
        self.coord = coordinator(plan)  # alone, or one node of a cluster
        self.backend = plan.backend
        self.heartbeat(None, f"starting {backends.NAMES.get(self.backend, self.backend)}")
        try:
            self._setup()
        except Exception as e:  # every case of this worker fails with the reason, none is lost
            self.setup_error = f"worker setup failed: {_tail(e)}"
            self.coord.setup_failed(self.setup_error, self.fatal)

    def _setup(self) -> None:
        from bench import loop, telemetry
        from bench.backends.base import Backend
        from bench.backends.factory import make

        self.loop, self.telemetry = loop, telemetry
        gpu = dict(self.plan.gpu)
        self.be: Backend = make(self.backend, self.device, gpu, cluster=self.plan.cluster is not None)
        self.skip = self.coord.join(self.be, self.plan, lambda phase: self.heartbeat(None, phase), self.fatal)
        self.names = self.be.names
        self.host = telemetry.HostMonitor()
        if self.device.kind == "cpu":
            status = self.plan.nvml_status
            self.gpus: Any = telemetry.EmptyGPUs(f"CPU case, no GPU used (NVML: {status})")
            self.bus_ids: list[str] = []
            return
        # the case's GPUs (and only those) to NVML by PCI bus id: JAX names the ones it opened; for
        # TensorFlow, the plan's, probed for exactly the worker's CUDA ordinals (device_lib's listing
        # would name every GPU of the machine: it ignores set_visible_devices, gpu-review-2 finding 1)
        self.bus_ids = self.be.gpu_bus_ids() or list(gpu.get("pci_bus_ids") or [])
        if self.bus_ids:
            self.gpus = telemetry.open_gpus_by_bus_id(self.bus_ids)
        else:
            self.gpus = telemetry.open_gpus(list(range(1 if self.device.virtual else self.device.count)))

    def fatal(self, message: str) -> None:
        """Tell the parent (one line, exit 2 there) and leave at once."""
        self.spool.send(protocol.Fatal(message))
        os._exit(2)

    def close(self) -> None:
        """Before the process ends (in a cluster: a last barrier, so no worker leaves while another still needs it)."""
        if not self.setup_error:
            self.coord.close(lambda phase: self.heartbeat(None, phase))

    def heartbeat(self, case_id: str | None, phase: str) -> None:
        """Tell the parent what this worker is doing now (progress for its watchdog and bar)."""
        self.spool.send(protocol.Heartbeat(case_id, phase))

    def run(self, case_id: str, benchmark: Any) -> None:
        """Measure one case and emit its record; a failure is a record with status and reason."""
        import pytest

        from bench import records

        if case_id in self.skip:
            self.spool.send(protocol.Skipped(case_id))
            pytest.skip("measured in an earlier attempt of this run")
        case = self.cases[case_id]
        started = time.perf_counter()
        info = records.case_info(case, self.plan.run_id, self.plan.profile)
        answered = sweep.left_unmeasured(case_id, self.plan.climb, self.rounds) if not self.setup_error else None
        if answered:  # a higher point of a batch sweep whose crossings are answered below it: not needed
            info.update(status="skipped", reason=f"the sweep stopped climbing: {answered}")
            self.spool.send(protocol.Record(records.unmeasured(case, info)))
            pytest.skip(f"{case_id}: skipped: {info['reason']}")
        if self.setup_error:
            info.update(status="error", reason=self.setup_error)
            self.spool.send(protocol.Record(records.unmeasured(case, info)))
            pytest.fail(f"{case_id}: error: {self.setup_error}", pytrace=False)
        info.update(
            all_reduce=self.be.all_reduce,
            **self.be.threads(),
            devices=list(self.names),
            pci_bus_ids=list(self.bus_ids),
            framework=self.be.versions(),
        )
        try:
            info.update(self._measure(case, benchmark, info))
            info["status"] = "ok"
            if case.mode == "serve" and info.get("max_rate_at_slo") is None:  # measured; no rate meets the SLO
                info["status"] = info.get("serve_status") or "slo_missed"
                info["reason"] = info.get("serve_reason") or "no rate passed"
        except self.loop.NumericsError as e:
            info.update(status="numerics", reason=str(e))
        except Unjudgeable as u:  # no rate can be judged: measured, said, no rounds spent
            info.update(u.figures, status=u.status, reason=u.figures["serve_reason"])
        except Exception as e:  # a failing case is data; the run goes on
            if self.be.is_oom(e):
                info.update(status="oom", reason=_tail(e))
            elif self.coord.peer_failed(e):
                # another worker died: the cluster cannot recover (no rejoin). This case is the
                # casualty; the rest stay unrecorded, so --resume runs them.
                info.update(
                    status="error",
                    reason=f"a peer worker failed; rank {self.coord.rank} saw: {_tail(e)}",
                    peer_failure=True,
                )
                self.spool.send(protocol.Record(records.unmeasured(case, info)))
                os._exit(3)
            else:
                info.update(status="error", reason=_tail(e))
                info["traceback_tail"] = traceback.format_exc()[-2000:]
        finally:
            self.be.end_case()
            gc.collect()
        info["case_wall_s"] = time.perf_counter() - started  # where a run's time goes, case by case
        if info["status"] == "ok":  # a tenant's rounds are its own (no pytest-benchmark rounds): its entry's shape
            entry = benchmark.stats.as_dict(include_data=True) if benchmark.stats else records.unmeasured(case, info)
            record = records.measured(case, entry, info, list(self._round_times))
            self.rounds[case_id] = storage.CaseRecord.of(record).throughput_samples
        else:
            record = records.unmeasured(case, info)
        self.spool.send(protocol.Record(record))
        if info["status"] not in storage.NOT_FAILED and self.coord.leave_after_failure():
            # a cluster's other workers are still inside this case's collectives: going on to the
            # next case would desynchronise them. Leave; they see a peer failure and stop too.
            os._exit(3)
        if info["status"] != "ok" and info["status"] in storage.NOT_FAILED:  # answers, not failures
            pytest.skip(f"{case_id}: {info['status']}: {info['reason']}")
        if info["status"] != "ok":
            pytest.fail(f"{case_id}: {info['status']}: {info['reason']}", pytrace=False)

    def _measure(self, case: Case, benchmark: Any, info: dict) -> dict:
        """A case's phases in order, each a small step: peak, build, first step, warm-up, rounds, after."""
        if getattr(benchmark, "disabled", False):  # it would time nothing and return no statistics
            raise RuntimeError("pytest-benchmark is disabled in this worker (--benchmark-disable or xdist)")
        if case.mode == "serve":  # the harness's own floor first, before this case loads the machine
            from bench import serve

            self.heartbeat(case.id, "serve: the harness floor")
            self._floor = serve.harness_floor(serve.RealClock())
        # where the allocator's peak cannot be reset (JAX), the probe's matrices would be the case's
        # memory peak: the probe runs after the peak is read (gpu-review-2 finding 5)
        probe_last = not self.be.resets_memory_peak
        out = {} if probe_last else self._peak(case)
        info["math_mode"] = self.be.apply_precision(case.precision_spec, case.device_kind)
        built, first = self._build(case, out)
        if case.mode == "serve":
            self._precheck(case, built)
        out.update(self.be.check_placement(built, first))
        # an inference step has no gradients to reduce: saying the configured all-reduce would suggest
        # it ran (gpu-review-2 finding 13)
        info["all_reduce"] = self.be.all_reduce_used(built) if case.mode == "train" else "none (inference)"
        out.update(self._warm_up(case, built))
        timed = self._timed(case, built, benchmark)
        stopper = None if timed.stamps else self._stopper
        stop: dict[str, Any] = (
            stopper.record()
            if stopper
            else {"stop_reason": "fixed rounds (ranks in step)" if self.coord.lockstep else None}
        )
        out.update(self.loop.summarize(case, timed.round_times_s, timed.k, stop.get("ci_rank")), **stop)
        self._round_times = timed.round_times_s
        if timed.stamps:  # the parent lays the tenants' rounds side by side
            out.update(tenant_rounds=[list(s) for s in timed.stamps], tenant_pid=os.getpid())
        self.be.check_placement(built, timed.last)  # still where it was: nothing moved or recompiled in the rounds
        out.update(self._after(case, built, timed, out["samples_per_s"]))
        out.update(self._attributed(_peaks(self.be.memory_peaks(self._virtual_cpu), "device_peak_mem"), out))
        if probe_last:
            out.update(self._peak(case))
            self._lifetime = _total(self.be.memory_peaks(self._virtual_cpu))  # the probe's matrices too
        achieved = info["flops_per_sample"] * out["samples_per_s"] / 1e12
        out["achieved_tflops"] = achieved
        out["mfu_measured"] = achieved / out["peak_tflops_measured"] if out["peak_tflops_measured"] else None
        samples = case.global_batch * timed.k * timed.rounds
        out.update(self.telemetry.derive(timed.window, samples, self._idle_w()))
        out.update(self.coord.gather(out, samples))
        return out

    def _attributed(self, peaks: dict, out: dict) -> dict:
        """The case's own peak; where it cannot be reset (JAX), one above all earlier ones, else XLA's step estimate."""
        if self.be.resets_memory_peak or peaks["device_peak_mem_bytes"] is None:
            return peaks
        before, self._lifetime = self._lifetime, max(self._lifetime, peaks["device_peak_mem_bytes"])
        if peaks["device_peak_mem_bytes"] > before:
            return {**peaks, "device_peak_mem_source": "allocator"}
        est = out.get("xla_step_memory_estimate_bytes")
        why = f"an earlier case or the matmul probe in this worker peaked higher ({before / 2**30:.2f} GiB)"
        return dict(
            device_peak_mem_bytes=est,
            device_peak_mem_per_device_bytes=[est],
            device_peak_mem_source="xla estimate" if est is not None else None,
            device_peak_mem_note=f"not attributable: {why}; {'the XLA estimate' if est else 'no estimate'} instead",
        )

    def _build(self, case: Case, out: dict) -> tuple[Any, Any]:
        """Model, data and step; the first call timed as the compile (or the first step, when compiled ahead)."""
        be = self.be
        self.host.reset_peak()
        be.reset_memory()
        self.heartbeat(case.id, "building")
        built = be.build(case, self.plan.profile)
        out.update(params=built.params, xla_scope=built.xla_scope, **built.extra)
        self.heartbeat(case.id, "compiling" if built.compile_s is None else "first step")
        t0 = time.perf_counter()
        first = built.step()
        be.sync()
        if built.compile_s is None:  # compiled by the first call
            out["compile_s"] = time.perf_counter() - t0
        else:  # compiled ahead of time; the first call is only a (cold) step
            out["compile_s"], out["first_step_s"] = built.compile_s, time.perf_counter() - t0
        return built, first

    def _warm_up(self, case: Case, built: Any) -> dict:
        """Warm-up steps; the compile-time memory peak, then the allocator's peak reset for the steady state."""
        be = self.be
        self.heartbeat(case.id, "warm-up")
        # a cluster's ranks step together: each runs the count, whatever its own clock says
        bound = math.inf if self.coord.lockstep else self.timing.warmup_s
        n, self._warm_step_s = self.loop.warm_up(built.step, be.sync, self.timing.warmup_steps, bound)
        # the compile-time peak (autotune scratch, XLA's compiler) is its own figure; the
        # steady-state peak is measured from here on. Without a reset (JAX) both would be one
        # lifetime peak: only the case's peak is recorded
        out = _peaks(be.memory_peaks(self._virtual_cpu), "device_peak_mem_compile") if be.resets_memory_peak else {}
        out["warmup_steps"] = n
        if be.memory_note():
            out["device_peak_mem_note"] = be.memory_note()
        be.reset_memory()
        return out

    def _timed(self, case: Case, built: Any, benchmark: Any) -> Any:  # loop.Timed
        """Calibrate K steps per round, then the timed rounds inside one telemetry window."""
        be, cid = self.be, case.id
        self.heartbeat(cid, "calibrating")

        def step_and_sync() -> None:
            built.step()
            be.sync()

        timing = self.timing
        if case.mode == "serve":  # its rounds give only the capacity bound: the rate search is the figure
            timing = dataclasses.replace(timing, case_budget_s=timing.case_budget_s / SERVE_ROUNDS_SHARE)
        k, schedule = self.loop.plan_rounds(self.coord.calibrate(step_and_sync, timing, self._warm_step_s), timing)
        rounds = schedule.cap
        window = self.telemetry.Window(
            self.gpus, self.host, interval_s=self.plan.sampler_interval_s, threaded=self.plan.sampler
        )
        done = [0]
        # a cluster's ranks (or a DDP group's) must run the same rounds: no rank may stop on its own look
        self._stopper = (
            None
            if self.coord.lockstep
            else stopping.Stopper(schedule, timing.ci_target[case.device_kind], timing.schedule.cap)
        )

        def between_rounds() -> None:  # pytest-benchmark calls it before each round, untimed
            done[0] += 1
            self.heartbeat(cid, f"round {done[0]} of at most {rounds}")

        def enough() -> bool:  # after each round, untimed: the stopping rule's look
            if self._stopper is None:
                return False
            samples = case.global_batch * k
            thr = [samples / t for t in benchmark.stats.stats.data]
            return self._stopper.after_round(thr, stopping.Trend.worst(window.series()))

        tenant = self.plan.tenant
        stamps: tuple[tuple[float, float], ...] = ()
        k = int(tenant.get("k") or k) if tenant else k  # a latency tenant: one request per round
        if tenant:  # calibrated alone; all tenants start together on the parent's signal
            self.loop.wait_for_start(tenant["go"], lambda phase: self.heartbeat(cid, phase))
        window.begin()
        try:
            if tenant:  # over one wall-clock window, not a round count (bench.tenant_run)
                stamps, last = self.loop.window_rounds(built.step, be.sync, k, tenant["window_s"])
            else:
                last = self.loop.timed_rounds(
                    built.step,
                    be.sync,
                    k,
                    rounds,
                    benchmark.pedantic,
                    setup=between_rounds,
                    barrier=self.coord.round_barrier(case.step_mode),
                    enough=enough,
                )
                benchmark.has_error = False  # a stop at a look is no error: keep the entry in pytest-benchmark's JSON
        finally:
            window.stop()
        times = tuple(e - s for s, e in stamps) if stamps else tuple(benchmark.stats.stats.data)
        return self.loop.Timed(k, len(times), times, last, window.end(), stamps)

    def _after(self, case: Case, built: Any, timed: Any, rounds_rate: float | None = None) -> dict:
        """Training: the final loss must be finite. Inference: per-batch latency percentiles. Serve: the rate search."""
        from bench import stats

        if case.mode == "serve":
            return self._serve(case, built, rounds_rate)
        if case.mode == "train":
            loss = self.be.final_loss(timed.last)
            if not math.isfinite(loss):
                raise self.loop.NumericsError(f"loss is {loss} after the timed rounds")
            return {"loss_final": loss}
        if not self.timing.latency_steps:  # a second worker (bench.spread): its median is all it is for
            return {}
        self.heartbeat(case.id, "latency")
        # rounds of one step, each closed by its sync, alone (no barrier in them) are latencies already
        have = timed.round_times_s if timed.k == 1 and not self.coord.lockstep else ()
        lat = self.loop.latencies(
            built.step, self.be.sync, self.timing.latency_steps, self.coord.latency_budget_s(self.timing), have
        )
        return {  # a percentile its samples cannot resolve is None (stats.samples_to_resolve)
            "latency_p50_s": stats.resolved_percentile(lat, 50),
            "latency_p90_s": stats.resolved_percentile(lat, 90),
            "latency_p99_s": stats.resolved_percentile(lat, 99),
            "latency_samples": len(lat),
            "latency_from_rounds": len(have),
        }

    @property
    def _virtual_cpu(self) -> bool:
        return self.device.kind == "cpu" and self.device.virtual

    def _idle_w(self) -> float | None:
        idle = self.plan.idle_power_w
        vals = [idle.get(g.uuid) for g in getattr(self.gpus, "gpus", [])]
        known = [v for v in vals if v is not None]
        return sum(known) if vals and len(known) == len(vals) else None


def _total(per_device: list[int | None]) -> int:
    return sum(p for p in per_device if p is not None)


def _peaks(per_device: list[int | None], name: str) -> dict:
    """``{name}_per_device_bytes`` and their sum ``{name}_bytes`` (None unless one is known)."""
    known = [p for p in per_device if p is not None]
    return {f"{name}_per_device_bytes": per_device, f"{name}_bytes": sum(known) if known else None}


def main(argv: list[str] | None = None) -> int:
    """Run pytest on the suite for one plan; the exit code is pytest's."""
    import pytest

    argv = sys.argv[1:] if argv is None else argv
    plan, spool = argv[0], argv[1]
    os.environ["ACCELBENCH_WORKER_PLAN"] = os.path.abspath(plan)  # a DDP rank 0 starts its other ranks with it
    # pytest-benchmark turns itself off when it believes it runs in a pytest-xdist worker (the
    # variable is inherited when accelbench is started from one, e.g. the project's own tests)
    for k in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
        del os.environ[k]
    extra = argv[2:]
    suite = Path(__file__).with_name("suite.py")
    with tempfile.TemporaryDirectory() as d:
        ini = Path(d) / "pytest.ini"
        ini.write_text("[pytest]\n")
        return int(
            pytest.main(
                [
                    str(suite),
                    "-c",
                    str(ini),
                    "--rootdir",
                    d,
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-p",
                    "bench.pytest_plugin",
                    f"--accelbench-plan={plan}",
                    f"--accelbench-spool={spool}",
                    "--benchmark-columns=min,median,max,rounds",
                    *extra,
                ]
            )
        )


if __name__ == "__main__":
    raise SystemExit(main())
