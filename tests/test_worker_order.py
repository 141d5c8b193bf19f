"""The order of a case's phases where it decides a figure: the probe and the memory peak.

A backend that records what the worker asks of it stands in for the framework (no device is
touched); the worker's own steps around it (build, timed rounds, telemetry) are replaced by
recorders too, so only ``Worker._measure``'s order is under test.
"""

from types import SimpleNamespace

import pytest

from bench import coordination, loop, worker
from bench.backends.base import Backend
from bench.cases import Case
from bench.loop import Probe
from bench.profiles import timing


class Recorder(Backend):
    """Answers like a backend and records each call."""

    def __init__(self, resets: bool):
        self.calls: list[str] = []
        self.resets_memory_peak = resets
        self.held = 0  # bytes the allocator holds at its peak so far (the probe's matrices are large)

    def matmul_probe(self, spec, n, budget_s):
        self.calls.append("probe")
        self.held = max(self.held, 3 * n * n * 4)
        return Probe(100.0, n, "float32")

    def copy_probe(self, n_bytes, budget_s):
        self.calls.append("copy")
        self.held = max(self.held, 2 * n_bytes)  # its array and the pass's output
        return loop.CopyProbe(500.0, n_bytes)

    def memory_peaks(self, virtual_cpu):
        self.calls.append("peaks")
        return [self.held]

    def reset_memory(self):
        self.calls.append("reset")
        if self.resets_memory_peak:
            self.held = 0

    def apply_precision(self, spec, device_kind):
        return "fp32"

    def check_placement(self, built, out):
        return {}

    def all_reduce_used(self, built):
        return "none"

    def sync(self):
        pass


def _worker(be: Recorder) -> worker.WorkerSession:
    w = worker.WorkerSession.__new__(worker.WorkerSession)  # no process, no framework: the phases only
    w.be, w.probes, w.timing, w._stopper, w._lifetime = be, {}, timing("smoke"), None, 0
    w.plan = SimpleNamespace(probes={}, cluster=None)
    w.device = SimpleNamespace(kind="gpu")
    w.heartbeat = lambda *a: None

    def build(case, out):
        be.reset_memory()
        be.held = max(be.held, 1000)  # the case's own working set: 1000 bytes
        return SimpleNamespace(step=lambda: None), None

    w._build = build

    def timed(case, built, benchmark):
        be.held = max(be.held, 1000)  # the steady state holds the same working set
        return loop.Timed(1, 6, (1.0,) * 6, None, None)

    w._timed = timed
    w._after = lambda case, built, last, rate=None: {}
    w.loop = SimpleNamespace(
        summarize=lambda case, data, k, rank=None: {"samples_per_s": 50.0},
        Probe=Probe,
        warm_up=loop.warm_up,
        CopyProbe=loop.CopyProbe,
        COPY_BYTES=loop.COPY_BYTES,
    )
    w.telemetry = SimpleNamespace(derive=lambda window, samples, idle: {})
    w.coord = coordination.Solo()  # alone: the real coordinator of a one-process worker
    w._idle_w = lambda: None
    return w


CASE = Case("mlp", "train", "gpu", 1, False, "fp32", False, 64, backend="jax")


@pytest.mark.parametrize("resets", [False, True])
def test_the_probe_never_inflates_a_memory_peak_that_cannot_be_reset(resets):
    """gpu-review-2 finding 5: JAX's peak_bytes_in_use is the worker's lifetime peak; the probe ran first."""
    be = Recorder(resets)
    out = _worker(be)._measure(CASE, SimpleNamespace(disabled=False), {"flops_per_sample": 10})
    assert out["device_peak_mem_bytes"] == 1000  # the case's working set, not the probe's matrices
    assert out["mem_bw_gbps_per_device"] == 500.0 and out["copy_probe_bytes"] == loop.COPY_BYTES
    assert out["peak_tflops_measured"] == 100.0 and out["mfu_measured"] == pytest.approx(50.0 * 10 / 1e12 / 100.0)
    calls = be.calls
    if resets:  # TensorFlow: probe first, the peak reset before the build, both peaks kept
        assert calls.index("probe") < calls.index("reset") and "device_peak_mem_compile_bytes" in out
    else:  # JAX: every peak is read before the probe runs, and one peak is recorded, not two
        # the one read after the probe is the worker's lifetime peak (for the next case), never this case's
        assert calls[-3:] == ["probe", "copy", "peaks"] and calls.count("peaks") == 2
        assert "device_peak_mem_compile_bytes" not in out


def test_a_shared_jax_gpu_worker_attributes_a_peak_only_above_every_earlier_one():
    """Cases share a JAX GPU worker smallest first: a lifetime peak above the earlier ones is the case's own;
    one below (here after the probe's matrices) is not, and XLA's estimate of the step stands in, said so."""
    be = Recorder(False)
    w = _worker(be)
    first = w._measure(CASE, SimpleNamespace(disabled=False), {"flops_per_sample": 10})
    assert first["device_peak_mem_bytes"] == 1000 and first["device_peak_mem_source"] == "allocator"
    assert w._lifetime == 3 * timing("smoke").probe_n["gpu"] ** 2 * 4  # the probe's matrices, read after it
    second = Case("mlp", "infer", "gpu", 1, False, "fp32", False, 64, backend="jax")
    w._build = lambda case, out: (
        out.update(xla_step_memory_estimate_bytes=900),
        (SimpleNamespace(step=lambda: None), None),
    )[1]
    out = w._measure(second, SimpleNamespace(disabled=False), {"flops_per_sample": 10})
    assert out["device_peak_mem_bytes"] == 900 and out["device_peak_mem_source"] == "xla estimate"
    assert out["device_peak_mem_note"].startswith("not attributable: an earlier case or the matmul probe")
    assert be.calls.count("probe") == 1  # the second case's peak came from the first one's probe


def test_a_jax_gpu_group_runs_smallest_first_and_shares_one_worker():
    from bench import runner

    small = Case("mlp", "infer", "gpu", 1, False, "fp32", False, 64, backend="jax")
    big = Case("cnn", "train", "gpu", 1, False, "fp32", False, 64, backend="jax")
    assert runner.group_key(small) == runner.group_key(big)
    assert runner.run_order([big, small], "standard") == [small, big]
    tf = Case("cnn", "train", "gpu", 1, False, "fp32", False, 64)
    assert runner.run_order([tf, small], "standard") == [tf, small]  # TensorFlow groups keep the plan's order
