"""The order of a case's phases where it decides a figure: the probe and the memory peak.

A backend that records what the worker asks of it stands in for the framework (no device is
touched); the worker's own steps around it (build, timed rounds, telemetry) are replaced by
recorders too, so only ``Worker._measure``'s order is under test.
"""

from types import SimpleNamespace

import pytest

from bench import loop, worker
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
    w.be, w.probes, w.timing, w._stopper = be, {}, timing("smoke"), None
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
    w.loop = SimpleNamespace(summarize=lambda case, data, k, rank=None: {"samples_per_s": 50.0}, Probe=Probe)
    w.telemetry = SimpleNamespace(derive=lambda window, samples, idle: {})
    w.coord = SimpleNamespace(gather=lambda out, samples: {})
    w._idle_w = lambda: None
    return w


CASE = Case("mlp", "train", "gpu", 1, False, "fp32", False, 64, backend="jax")


@pytest.mark.parametrize("resets", [False, True])
def test_the_probe_never_inflates_a_memory_peak_that_cannot_be_reset(resets):
    """gpu-review-2 finding 5: JAX's peak_bytes_in_use is the worker's lifetime peak; the probe ran first."""
    be = Recorder(resets)
    out = _worker(be)._measure(CASE, SimpleNamespace(disabled=False), {"flops_per_sample": 10})
    assert out["device_peak_mem_bytes"] == 1000  # the case's working set, not the probe's matrices
    assert out["peak_tflops_measured"] == 100.0 and out["mfu_measured"] == pytest.approx(50.0 * 10 / 1e12 / 100.0)
    calls = be.calls
    if resets:  # TensorFlow: probe first, the peak reset before the build, both peaks kept
        assert calls.index("probe") < calls.index("reset") and "device_peak_mem_compile_bytes" in out
    else:  # JAX: every peak is read before the probe runs, and one peak is recorded, not two
        assert calls[-1] == "probe" and "peaks" not in calls[calls.index("probe") :]
        assert "device_peak_mem_compile_bytes" not in out
