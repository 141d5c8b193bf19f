"""One device configuration in its own process: ``python -m bench.worker PLAN.json SPOOL.jsonl``.

The parent (``bench.runner``) starts one worker per device configuration, so visible and
logical devices are set before TensorFlow initialises, and an OOM-kill or crash loses only the
case in flight. Each finished case is appended to the spool as one JSON line (flushed and
fsynced); the parent owns the results file.
"""

from __future__ import annotations

import gc
import json
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

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

    def __init__(self, plan: dict, spool: str | None):
        from bench.cases import Case, DeviceConfig
        from bench.profiles import Timing

        self.plan = plan
        self.spool = Path(spool) if spool else None
        self.device = DeviceConfig(**plan["device"])
        self.timing = Timing(**plan["timing"])
        self.cases = {c["case_id"]: Case.from_dict(c) for c in plan["cases"]}
        self.probes: dict[str, Any] = {}
        self.setup_error: str | None = None
        self.heartbeat(None, "starting TensorFlow")
        try:
            self._setup()
        except Exception as e:  # every case of this worker fails with the reason, none is lost
            self.setup_error = f"worker setup failed: {_tail(e)}"

    def _setup(self) -> None:
        import tensorflow as tf

        from bench import measure, telemetry

        self.tf, self.measure, self.telemetry = tf, measure, telemetry
        gpu = self.plan.get("gpu") or {}
        self.names = measure.configure_devices(self.device, gpu.get("memory_total_bytes"), gpu.get("cuda_ordinals"))
        self.strategy, self.all_reduce = measure.make_strategy(self.device, self.names)
        self.host = telemetry.HostMonitor()
        if self.device.kind == "cpu":
            status = self.plan.get("nvml_status", "not checked")
            self.gpus: Any = telemetry.EmptyGPUs(f"CPU case, no GPU used (NVML: {status})")
            self.bus_ids: list[str] = []
            return
        # map TensorFlow's GPUs to NVML by the PCI bus ids TensorFlow itself reports
        self.bus_ids = measure.gpu_bus_ids() or list(gpu.get("pci_bus_ids") or [])
        if self.bus_ids:
            self.gpus = telemetry.open_gpus_by_bus_id(self.bus_ids)
        else:
            self.gpus = telemetry.open_gpus(list(range(1 if self.device.virtual else self.device.count)))

    def close(self) -> None:
        """Nothing to release beyond what the process exit frees."""

    def _write(self, record: dict, durable: bool) -> None:
        if self.spool is None:
            return
        with open(self.spool, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()
            if durable:
                os.fsync(f.fileno())

    def heartbeat(self, case_id: str | None, phase: str) -> None:
        """Tell the parent what this worker is doing now (progress for its watchdog and bar)."""
        self._write({"heartbeat": {"case_id": case_id, "phase": phase, "t": time.time()}}, durable=False)

    def _probe(self, case_id: str, precision: str):
        if precision not in self.probes:
            self.heartbeat(case_id, f"measuring the {precision} matmul peak")
            self.probes[precision] = self.measure.matmul_probe(
                self.names[0], precision, self.timing.probe_n[self.device.kind], self.timing.probe_budget_s
            )
        return self.probes[precision]

    def run(self, case_id: str, benchmark: Any) -> None:
        """Measure one case and emit its record; a failure is a record with status and reason."""
        import pytest

        from bench import records
        from workloads import WORKLOADS

        case = self.cases[case_id]
        w = WORKLOADS[case.workload]
        info = records.base_info(case, self.plan["run_id"], w.flops_per_sample(w.size(self.plan["profile"]), case.mode))
        if self.setup_error:
            info.update(status="error", reason=self.setup_error)
            self._write(records.unmeasured(case, info), durable=True)
            pytest.fail(f"{case_id}: error: {self.setup_error}", pytrace=False)
        tf = self.tf
        info.update(
            all_reduce=self.all_reduce,
            intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
            inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
            devices=list(self.names),
            pci_bus_ids=list(self.bus_ids),
        )
        try:
            info.update(self._measure(case, benchmark, info))
            info["status"] = "ok"
        except tf.errors.ResourceExhaustedError as e:
            info.update(status="oom", reason=_tail(e))
        except self.measure.NumericsError as e:
            info.update(status="numerics", reason=str(e))
        except Exception as e:  # a failing case is data; the run goes on
            info.update(status="error", reason=_tail(e))
            info["traceback_tail"] = traceback.format_exc()[-2000:]
        finally:
            self.measure.keras.config.set_dtype_policy("float32")
            self.measure.keras.backend.clear_session()
            gc.collect()
        if info["status"] == "ok":
            record = benchmark.stats.as_dict(include_data=True)
            record["extra_info"] = info
        else:
            record = records.unmeasured(case, info)
        self._write(record, durable=True)
        if info["status"] != "ok":
            pytest.fail(f"{case_id}: {info['status']}: {info['reason']}", pytrace=False)

    def _measure(self, case: Any, benchmark: Any, info: dict) -> dict:
        m, cid = self.measure, case.id
        probe = self._probe(cid, case.precision)
        physical = 1 if self.device.virtual else self.device.count
        out: dict = {"peak_tflops_measured": probe.tflops * physical, "probe_n": probe.n, "probe_dtype": probe.dtype}
        info["math_mode"] = m.apply_precision(case.precision, case.device_kind)
        self.host.reset_peak()
        m.reset_memory(self.names)
        self.heartbeat(cid, "building")
        built = m.build_case(case, self.plan["profile"], self.strategy, self.names)
        out["params"] = built.params
        out["xla_scope"] = built.xla_scope

        self.heartbeat(cid, "compiling")
        t0 = time.perf_counter()
        first = built.step()
        m.sync()
        out["compile_s"] = time.perf_counter() - t0
        m.check_placement(self.strategy, built, first, self.names, self.device.virtual)
        info["all_reduce"] = (
            m.all_reduce_used(built.graph_ops(), self.all_reduce) if len(self.names) > 1 else self.all_reduce
        )

        self.heartbeat(cid, "warm-up")
        for _ in range(self.timing.warmup_steps):
            built.step()
        m.sync()
        # the compile-time peak (autotune scratch, XLA's compiler) is its own figure; the
        # steady-state peak is measured from here on
        out.update(_peaks(m.memory_peaks(self.names, self._virtual_cpu), "device_peak_mem_compile"))
        m.reset_memory(self.names)

        self.heartbeat(cid, "calibrating")
        n, t0 = 0, time.perf_counter()
        while n < 2 or (time.perf_counter() - t0 < min(0.2, self.timing.min_round_s) and n < 1000):
            built.step()
            m.sync()
            n += 1
        k, rounds = m.plan_rounds((time.perf_counter() - t0) / n, self.timing)

        window = self.telemetry.Window(
            self.gpus,
            self.host,
            interval_s=self.plan.get("sampler_interval_s", 0.1),
            threaded=self.plan.get("sampler", True),
        )
        done = [0]

        def between_rounds() -> None:  # pytest-benchmark calls it before each round, untimed
            done[0] += 1
            self.heartbeat(cid, f"round {done[0]} of {rounds}")

        window.begin()
        try:
            last = m.timed_rounds(built.step, k, rounds, benchmark.pedantic, setup=between_rounds)
        finally:
            window.stop()
        meas = window.end()
        out.update(m.summarize(case, benchmark.stats.stats.data, k))

        if case.mode == "train":
            loss = m.final_loss(self.strategy, last)
            out["loss_final"] = loss
            if not math.isfinite(loss):
                raise m.NumericsError(f"loss is {loss} after the timed rounds")
        else:
            self.heartbeat(cid, "latency")
            lat = m.latencies(built.step, self.timing.latency_steps, self.timing.case_budget_s / 4)
            out.update(
                latency_p50_s=m.stats.percentile(lat, 50),
                latency_p90_s=m.stats.percentile(lat, 90),
                latency_p99_s=m.stats.percentile(lat, 99),
                latency_samples=len(lat),
            )

        out.update(_peaks(m.memory_peaks(self.names, self._virtual_cpu), "device_peak_mem"))
        achieved = info["flops_per_sample"] * out["samples_per_s"] / 1e12
        out["achieved_tflops"] = achieved
        out["mfu_measured"] = achieved / out["peak_tflops_measured"] if out["peak_tflops_measured"] else None
        samples = case.global_batch * k * rounds
        out.update(self.telemetry.derive(meas, samples, self._idle_w()))
        return out

    @property
    def _virtual_cpu(self) -> bool:
        return self.device.kind == "cpu" and self.device.virtual

    def _idle_w(self) -> float | None:
        idle = self.plan.get("idle_power_w") or {}
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
