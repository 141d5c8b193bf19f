"""Real smoke runs in a subprocess: TensorFlow on this CPU, virtual devices, resume, kill -9."""

import statistics
import subprocess
import sys
from html import escape

import pytest

from bench import backends, capability, devices, storage
from bench.report import resources

pytestmark = pytest.mark.slow

# what this machine's CPU can run, by the same rules the planner uses (the CPU model differs
# from machine to machine: bf16 units or not)
CPU_BF16 = capability.cpu_precision("mixed_bfloat16", devices.cpu_info().flags).supported
PRECISIONS = ("fp32", "mixed_bfloat16") if CPU_BF16 else ("fp32",)


def test_smoke_run_measures_cpu_and_virtual_cases(smoke):
    _, path, r = smoke
    doc = storage.load(path)
    status = {storage.case_id_of(x): x["extra_info"]["status"] for x in storage.records(doc)}
    ok = {c for c, s in status.items() if s == "ok"}
    assert ok == {
        f"mlp-{m}-{d}-{p}{x}-b64"
        for m in ("train", "infer")
        for d in ("cpu", "cpu2-virtual")
        for p in PRECISIONS
        for x in ("", "-xla")
        if not (m == "infer" and d == "cpu2-virtual" and x)  # XLA inference over logical CPUs: unsupported
        and not (x and p == "mixed_bfloat16")  # left out by -k
    }
    assert status["mlp-train-gpu1-fp32-b64"] == "unsupported"
    assert status["mlp-infer-cpu2-virtual-fp32-xla-b64"] == "unsupported"
    assert status["mlp-train-cpu-mixed_bfloat16-b64"] == ("ok" if CPU_BF16 else "unsupported")
    assert len(status) == 18 and doc["run"]["status"] == "complete"
    # one worker per device configuration and XLA setting
    logs = sorted(p.name for p in path.with_suffix(".logs").iterdir())
    assert logs == ["cpu-1.log", "cpu-xla-1.log", "cpu2-virtual-1.log", "cpu2-virtual-xla-1.log"]
    # the console table and the report path were printed
    assert "mlp-train-cpu-fp32-b64" in r.stdout and "vs CPU fp32" in r.stdout
    assert "report: " in r.stdout


def test_smoke_figures_are_sane_and_measured_right(smoke):
    doc = storage.load(smoke[1])
    for rec in doc["benchmarks"]:
        e = rec["extra_info"]
        assert e["rounds"] >= 6 and len(rec["stats"]["data"]) == e["rounds"]
        # pytest-benchmark's stats are per sample: ops is samples/s (what tools reading the file chart)
        assert rec["stats"]["iterations"] == e["global_batch"] * e["steps_per_round"]
        # exact relations, not a noise bound (a busy CI machine moves the mean away from the median):
        # samples/s is the median round's, ops is pytest-benchmark's 1/mean, both per sample
        st = rec["stats"]
        assert rec["stats"]["ops"] == pytest.approx(1 / st["mean"], rel=1e-9)
        assert st["min"] <= st["median"] <= st["max"]
        assert e["samples_per_s"] == pytest.approx(statistics.median(1 / t for t in st["data"]), rel=1e-9)
        assert 1 / st["max"] <= st["ops"] <= 1 / st["min"]
        if not e["unstable"]:  # rounds within 10% CV: the mean-based ops charts within 15% of samples/s
            assert abs(st["ops"] / e["samples_per_s"] - 1) < 0.15
        assert rec["fullname"] == f"bench/suite.py::test_case[{e['case_id']}]"
        # the busy-machine witness is measured on every case (the tests may run beside others: no bound)
        assert 0 <= e["other_cpu_pct"] <= 100 and isinstance(e["busy"], bool)
        assert e["other_gpu_processes"] is None  # a CPU case: no GPU to share
        assert e["samples_per_s_ci_low"] <= e["samples_per_s"] <= e["samples_per_s_ci_high"]
        assert e["compile_s"] > 0 and e["peak_tflops_measured"] > 0 and e["mfu_measured"] > 0
        # one device compiles the whole training step; several, forward and backward (gpu-review-2 finding 8)
        train_scope = "whole step" if e["device_count"] == 1 else "forward+backward"
        assert e["xla_scope"] == ((train_scope if e["mode"] == "train" else "forward") if e["xla"] else None)
        # the steady-state allocator peak is measured after compile and warm-up; the compile peak apart
        assert e["device_peak_mem_compile_bytes"] > 0 and e["device_peak_mem_bytes"] > 0
        assert e["math_mode"] == ("fp32" if e["precision"] == "fp32" else "bf16 compute, float32 variables")
        assert e["virtual"] == ("virtual" in e["case_id"])
        assert e["global_batch"] == 64 * e["device_count"]
        if e["mode"] == "infer":
            # rounds of one step are latencies already and count; a p99 needs 100 samples, the smoke profile takes 20
            assert e["latency_from_rounds"] == (e["rounds"] if e["steps_per_round"] == 1 else 0)
            assert e["latency_samples"] >= max(10, e["latency_from_rounds"]) and e["latency_p50_s"] > 0
            assert (e["latency_p99_s"] is None) == (e["latency_samples"] < 100)
            assert e["latency_p99_s"] is None or e["latency_p50_s"] <= e["latency_p99_s"]
            assert (e["step_time_p90_s"] is None) == (e["rounds"] < 10)
        else:
            assert e["loss_final"] > 0
        # telemetry on a CPU-only machine: host filled, GPU empty with the reason
        assert e["host_peak_rss_bytes"] > 100 * 2**20 and e["host_cpu_util_pct"] > 0 and e["device_peak_mem_bytes"] > 0
        assert e["energy_j"] is None and e["power_mean_w"] is None
        assert e["gpu_telemetry"].startswith("unavailable: CPU case")
        assert e["cpu_energy_j"] is None and e["cpu_energy_reason"]
    unsupported = [x for x in doc["unmeasured"] if x["extra_info"]["status"] == "unsupported"]
    assert all(x["extra_info"]["reason"] for x in unsupported)


def test_resume_runs_only_missing_cases(smoke, tmp_path):
    path = tmp_path / "results" / smoke[1].name  # a copy: the smoke run is shared with other tests
    path.parent.mkdir()
    path.write_bytes(smoke[1].read_bytes())
    doc = storage.load(path)
    keep = {storage.case_id_of(x): x["stats"]["data"] for x in doc["benchmarks"]}
    gone = "mlp-infer-cpu-fp32-b64"
    doc["benchmarks"] = [x for x in doc["benchmarks"] if storage.case_id_of(x) != gone]
    storage.write_atomic(path, doc)
    r = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--resume", path.stem, "--results-dir", str(path.parent), "--no-report"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    after = storage.load(path)
    data = {storage.case_id_of(x): x["stats"]["data"] for x in after["benchmarks"]}
    assert set(data) == set(keep)
    assert all(data[c] == keep[c] for c in keep if c != gone)  # untouched
    assert data[gone] != keep[gone]  # measured again


def test_report_of_the_cpu_smoke_run(smoke):
    d, path, r = smoke
    html = (d / "reports" / path.stem / "index.html").read_text()
    assert "mlp-train-cpu-mixed_bfloat16-b64" in html and "mlp-train-gpu1-fp32-b64" in html
    assert "no NVIDIA GPU" in html  # the unsupported GPU cases with their reason
    assert "TensorFlow / Keras" in html and "virtual devices: shared silicon" in html
    # the CPU allocator the TensorFlow workers ran with (the test's environment sets none: BFC), said
    allocator = storage.load(path)["machine_info"]["accelbench"]["tf_cpu_allocator"]
    assert allocator == backends.tf_cpu_allocator() and escape(resources.CPU_ALLOCATORS[allocator]) in html
    assert "not measured (unavailable: CPU case" in html
    # the XLA table says what XLA compiled: the whole step on one CPU, forward and backward over two
    xla = html.split("Compiled vs not: TensorFlow XLA, torch.compile", 1)[1].split("</table>", 1)[0]
    assert "XLA compiled" in xla and "whole step" in xla and "forward+backward" in xla
    md = (d / "reports" / path.stem / "report.md").read_text()
    assert "| mlp        | train" in md
