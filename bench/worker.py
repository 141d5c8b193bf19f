"""One device configuration in its own process: ``python -m bench.worker PLAN.json SPOOL.jsonl``.

The parent (``bench.runner``) starts one worker per device configuration, so visible and
logical devices are set before TensorFlow initialises, and an OOM-kill or crash loses only the
case in flight. Each finished case is appended to the spool as one JSON line (flushed and
fsynced); the parent owns the results file.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import protocol
from bench.precision import PrecisionSpec
from bench.protocol import WorkerPlan

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


def _tail(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[-limit:]}"


class WorkerSession:
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
        self.skip: set[str] = set()
        self.setup_error: str | None = None
        self.cluster: Mapping[str, Any] = plan.cluster or {}  # empty: not a cluster run
        self.backend = plan.backend
        self.heartbeat(None, f"starting {'JAX' if self.backend == 'jax' else 'TensorFlow'}")
        try:
            self._setup()
        except Exception as e:  # every case of this worker fails with the reason, none is lost
            self.setup_error = f"worker setup failed: {_tail(e)}"
            if self.cluster:  # the other nodes cannot go on without this one: stop the run here
                self.fatal(f"rank {self.cluster['rank']}: {self.setup_error}")

    def _setup(self) -> None:
        from bench import loop, telemetry
        from bench.backends.base import Backend

        self.loop, self.telemetry = loop, telemetry
        gpu = dict(self.plan.gpu)
        self.be: Backend
        if self.backend == "jax":  # never imports TensorFlow
            from bench.backends.jax_backend import JaxBackend

            self.be = JaxBackend(self.device, gpu)
        else:
            from bench.backends.tf_backend import TFBackend

            self.be = TFBackend(self.device, gpu, cluster=bool(self.cluster))
        if self.cluster:
            self._setup_cluster()
        self.names = self.be.names
        self.host = telemetry.HostMonitor()
        if self.device.kind == "cpu":
            status = self.plan.nvml_status
            self.gpus: Any = telemetry.EmptyGPUs(f"CPU case, no GPU used (NVML: {status})")
            self.bus_ids: list[str] = []
            return
        # map TensorFlow's GPUs to NVML by the PCI bus ids TensorFlow itself reports
        self.bus_ids = self.be.gpu_bus_ids() or list(gpu.get("pci_bus_ids") or [])
        if self.bus_ids:
            self.gpus = telemetry.open_gpus_by_bus_id(self.bus_ids)
        else:
            self.gpus = telemetry.open_gpus(list(range(1 if self.device.virtual else self.device.count)))

    def _setup_cluster(self) -> None:
        """MultiWorkerMirroredStrategy from TF_CONFIG, created before anything else runs; plans compared."""
        from bench import multiworker

        self.heartbeat(None, f"joining the cluster as rank {self.cluster['rank']} of {self.cluster['world']}")
        self.strategy, all_reduce = multiworker.make_strategy(self.device)
        self.mw = multiworker
        self.be.set_strategy(self.strategy, all_reduce, self.strategy.extended.worker_devices)  # type: ignore[attr-defined]
        ids = self.plan.ids
        v = self.be.versions()
        mine = self.plan.fingerprint((v["tensorflow"], v["keras"]))
        seen = [int(v) for v in multiworker.gather_rows(self.strategy, [float(mine)])[:, 0]]
        if len(set(seen)) > 1:
            odd = [r for r, v in enumerate(seen) if v != seen[0]]
            self.fatal(
                f"nodes disagree on the plan (cases, profile, timing, devices or TensorFlow/Keras versions): "
                f"rank(s) {odd} differ from rank 0; run the same accelbench command and versions on every node"
            )
        # on --resume only rank 0 knows which cases an earlier attempt finished: agree on its list
        mine_skip = set(self.plan.skip)
        agreed = multiworker.gather_rows(self.strategy, [1.0 if i in mine_skip else 0.0 for i in ids])[0]
        self.skip = {i for i, m in zip(ids, agreed) if m == 1.0}

    def fatal(self, message: str) -> None:
        """Tell the parent (one line, exit 2 there) and leave at once."""
        self.spool.send(protocol.Fatal(message))
        os._exit(2)

    def close(self) -> None:
        """In a cluster: a last barrier, so no worker leaves while another still needs it."""
        if self.cluster and not self.setup_error:
            self.heartbeat(None, "final barrier")
            self.mw.barrier(self.strategy)

    def heartbeat(self, case_id: str | None, phase: str) -> None:
        """Tell the parent what this worker is doing now (progress for its watchdog and bar)."""
        self.spool.send(protocol.Heartbeat(case_id, phase))

    def _probe(self, case_id: str, spec: PrecisionSpec):
        if spec.name not in self.probes:
            self.heartbeat(case_id, f"measuring the {spec.name} matmul peak")
            self.probes[spec.name] = self.be.matmul_probe(
                spec, self.timing.probe_n[self.device.kind], self.timing.probe_budget_s
            )
        return self.probes[spec.name]

    def run(self, case_id: str, benchmark: Any) -> None:
        """Measure one case and emit its record; a failure is a record with status and reason."""
        import pytest

        from bench import records
        from workloads import WORKLOADS

        if case_id in self.skip:
            self.spool.send(protocol.Skipped(case_id))
            pytest.skip("measured in an earlier attempt of this run")
        case = self.cases[case_id]
        w = WORKLOADS[case.workload]
        info = records.base_info(case, self.plan.run_id, w.flops_per_sample(w.size(self.plan.profile), case.mode))
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
        except self.loop.NumericsError as e:
            info.update(status="numerics", reason=str(e))
        except Exception as e:  # a failing case is data; the run goes on
            if self.be.is_oom(e):
                info.update(status="oom", reason=_tail(e))
            elif self.cluster and self.mw.is_peer_failure(e):
                # another worker died: the cluster cannot recover (no rejoin). This case is the
                # casualty; the rest stay unrecorded, so --resume runs them.
                info.update(
                    status="error",
                    reason=f"a peer worker failed; rank {self.cluster['rank']} saw: {_tail(e)}",
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
        if info["status"] == "ok":
            record = records.measured(
                case, benchmark.stats.as_dict(include_data=True), info, benchmark.stats.stats.data
            )
        else:
            record = records.unmeasured(case, info)
        self.spool.send(protocol.Record(record))
        if self.cluster and info["status"] != "ok":
            # the other workers are still inside this case's collectives: going on to the next
            # case would desynchronise them. Leave; they see a peer failure and stop too.
            os._exit(3)
        if info["status"] != "ok":
            pytest.fail(f"{case_id}: {info['status']}: {info['reason']}", pytrace=False)

    def _measure(self, case: Any, benchmark: Any, info: dict) -> dict:
        from bench import stats

        be, loop, cid = self.be, self.loop, case.id
        if getattr(benchmark, "disabled", False):  # it would time nothing and return no statistics
            raise RuntimeError("pytest-benchmark is disabled in this worker (--benchmark-disable or xdist)")
        spec = case.precision_spec  # derived once: policy, TF32, probe dtype, loss scaling
        probe = self._probe(cid, spec)
        # the peak of every chip of the case, on every node: the throughput it is set against is global
        out: dict = {
            "peak_tflops_per_device": probe.tflops,
            "peak_tflops_measured": probe.tflops * case.physical_devices,
            "probe_n": probe.n,
            "probe_dtype": probe.dtype,
        }
        info["math_mode"] = be.apply_precision(spec, case.device_kind)
        self.host.reset_peak()
        be.reset_memory()
        self.heartbeat(cid, "building")
        built = be.build(case, self.plan.profile)
        out["params"] = built.params
        out["xla_scope"] = built.xla_scope
        out.update(built.extra)

        self.heartbeat(cid, "compiling" if built.compile_s is None else "first step")
        t0 = time.perf_counter()
        first = built.step()
        be.sync()
        if built.compile_s is None:  # compiled by the first call
            out["compile_s"] = time.perf_counter() - t0
        else:  # compiled ahead of time; the first call is only a (cold) step
            out["compile_s"], out["first_step_s"] = built.compile_s, time.perf_counter() - t0
        out.update(be.check_placement(built, first))
        info["all_reduce"] = be.all_reduce_used(built)

        self.heartbeat(cid, "warm-up")
        for _ in range(self.timing.warmup_steps):
            built.step()
        be.sync()
        # the compile-time peak (autotune scratch, XLA's compiler) is its own figure; the
        # steady-state peak is measured from here on
        out.update(_peaks(be.memory_peaks(self._virtual_cpu), "device_peak_mem_compile"))
        if be.memory_note():
            out["device_peak_mem_note"] = be.memory_note()
        be.reset_memory()

        self.heartbeat(cid, "calibrating")
        n, t0 = 0, time.perf_counter()
        if self.cluster:  # a step count every worker shares, then the slowest worker's step time
            for _ in range(5):
                built.step()
                be.sync()
            n = 5
            step_s = self.mw.agree_max(self.strategy, (time.perf_counter() - t0) / n)
        else:
            while n < 2 or (time.perf_counter() - t0 < min(0.2, self.timing.min_round_s) and n < 1000):
                built.step()
                be.sync()
                n += 1
            step_s = (time.perf_counter() - t0) / n
        k, rounds = loop.plan_rounds(step_s, self.timing)

        window = self.telemetry.Window(
            self.gpus,
            self.host,
            interval_s=self.plan.sampler_interval_s,
            threaded=self.plan.sampler,
        )
        done = [0]

        def between_rounds() -> None:  # pytest-benchmark calls it before each round, untimed
            done[0] += 1
            self.heartbeat(cid, f"round {done[0]} of {rounds}")

        window.begin()
        try:
            barrier = (lambda: self.mw.barrier(self.strategy)) if self.cluster and case.mode == "infer" else None
            last = loop.timed_rounds(
                built.step, be.sync, k, rounds, benchmark.pedantic, setup=between_rounds, barrier=barrier
            )
        finally:
            window.stop()
        meas = window.end()
        out.update(loop.summarize(case, benchmark.stats.stats.data, k))
        be.check_placement(built, last)  # still where it was: nothing moved or recompiled in the rounds

        if case.mode == "train":
            loss = be.final_loss(last)
            out["loss_final"] = loss
            if not math.isfinite(loss):
                raise loop.NumericsError(f"loss is {loss} after the timed rounds")
        else:
            self.heartbeat(cid, "latency")
            # a fixed count in a cluster (no collective here, but every worker leaves together)
            budget = float("inf") if self.cluster else self.timing.case_budget_s / 4
            lat = loop.latencies(built.step, be.sync, self.timing.latency_steps, budget)
            out.update(
                latency_p50_s=stats.percentile(lat, 50),
                latency_p90_s=stats.percentile(lat, 90),
                latency_p99_s=stats.percentile(lat, 99),
                latency_samples=len(lat),
            )

        out.update(_peaks(be.memory_peaks(self._virtual_cpu), "device_peak_mem"))
        achieved = info["flops_per_sample"] * out["samples_per_s"] / 1e12
        out["achieved_tflops"] = achieved
        out["mfu_measured"] = achieved / out["peak_tflops_measured"] if out["peak_tflops_measured"] else None
        samples = case.global_batch * k * rounds
        out.update(self.telemetry.derive(meas, samples, self._idle_w()))
        if self.cluster:
            out.update(self._gather_nodes(out, samples))
        return out

    def _gather_nodes(self, out: dict, samples: int) -> dict:
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
            "cluster_rank": self.cluster["rank"],
            "cluster_world": self.cluster["world"],
            "cluster_hosts": sorted(set(h.rsplit(":", 1)[0] for h in self.cluster["workers"])),
        }

    @property
    def _virtual_cpu(self) -> bool:
        return self.device.kind == "cpu" and self.device.virtual

    def _idle_w(self) -> float | None:
        idle = self.plan.idle_power_w
        vals = [idle.get(g.uuid) for g in getattr(self.gpus, "gpus", [])]
        known = [v for v in vals if v is not None]
        return sum(known) if vals and len(known) == len(vals) else None


def _peaks(per_device: list[int | None], name: str) -> dict:
    """``{name}_per_device_bytes`` and their sum ``{name}_bytes`` (None unless one is known)."""
    known = [p for p in per_device if p is not None]
    return {f"{name}_per_device_bytes": per_device, f"{name}_bytes": sum(known) if known else None}


def main(argv: list[str] | None = None) -> int:
    """Run pytest on the suite for one plan; the exit code is pytest's."""
    import pytest

    argv = sys.argv[1:] if argv is None else argv
    plan, spool = argv[0], argv[1]
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
