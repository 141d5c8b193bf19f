"""The JAX backend for real, on this CPU (skipped only where JAX cannot be installed).

One smoke run on ``--backend jax`` covers every workload, data parallel over 2 virtual CPU
devices and model parallel; it is then reported together with the TensorFlow smoke run of the
session (the same MLP case on both backends). Expectations about bf16 come from the capability
rules for this CPU's flags, never from the machine the test was written on.
"""

import json
import math
import os
import subprocess
import sys

import pytest

from bench import capability, storage
from bench.devices import cpu_info

pytest.importorskip("jax")
pytestmark = pytest.mark.slow

# 12 cases, about a minute on 2 cores: every workload in both modes (fp32), bf16 training, data
# parallel, model parallel for the MLP (both modes) and the transformer (attention split), MLP serving
SELECT = (
    "(cpu-jax-fp32 and not serve) or mlp-train-cpu-jax-mixed_bfloat16 or mlp-train-cpu2-virtual-jax-fp32"
    " or (mlp and cpu2-virtual-jax-mp-fp32 and not serve) or transformer-train-cpu2-virtual-jax-mp-fp32"
    " or mlp-serve-cpu-jax-fp32"
)


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("jax")
    args = [
        *("run", "--backend", "jax", "--profile", "smoke", "--workloads", "mlp,cnn,transformer"),
        *("--devices", "cpu", "--virtual-devices", "2", "--parallelism", "both"),
        *("--precisions", "fp32,mixed_bfloat16", "--modes", "train,infer,serve", "-k", SELECT),
        *("--results-dir", str(d / "results"), "--no-report", "--compile-cache", str(d / "cache")),
        *("--repeats", "1"),  # a rotating share in second workers (the tests' default is none)
    ]
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}  # the runner must set the worker's backend itself
    r = subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = (d / "results").glob("*.json")
    doc = storage.load(path)
    return d, path, doc, {x["extra_info"]["case_id"]: x["extra_info"] for x in storage.records(doc)}


def test_every_workload_trains_and_infers_on_jax(jax_run):
    _, _, doc, cases = jax_run
    bf16 = capability.cpu_precision("mixed_bfloat16", cpu_info().flags, "jax")
    assert len(cases) == 12
    for cid, e in cases.items():
        if e["mode"] == "serve":
            continue  # test_serving_on_jax
        assert e["backend"] == "jax" and e["xla"] is True and "-xla" not in cid
        if "mixed_bfloat16" in cid and not bf16.supported:
            assert e["status"] == "unsupported" and e["reason"] == bf16.reason
            continue
        assert e["status"] == "ok", (cid, e.get("reason"))
        assert e["samples_per_s"] > 0 and e["compile_s"] > 0 and e["first_step_s"] > 0
        assert e["xla_scope"].startswith("whole step (jax.jit")
        assert e["framework"]["jax"] and "tensorflow" not in e["framework"]
        assert e["device_peak_mem_bytes"] is None and "no memory statistics" in e["device_peak_mem_note"]
        if e["mode"] == "train":
            assert math.isfinite(e["loss_final"]) and e["loss_final"] > 0
        # the same words as TensorFlow's for the same math (CPU: no TF32 to say anything about)
        assert e["math_mode"] == ("fp32" if e["precision"] == "fp32" else "bf16 compute, float32 variables")
    assert doc["machine_info"]["accelbench"]["jax"]
    assert doc["machine_info"]["accelbench"]["tensorflow"] is None  # JAX only: TensorFlow never probed


def test_serving_on_jax(jax_run):
    e = jax_run[3]["mlp-serve-cpu-jax-fp32-b64-slo10ms"]
    # measured either way; a loaded CI machine may find no rate under the 10 ms SLO: slo_missed, with why
    assert e["status"] == ("ok" if e["max_rate_at_slo"] is not None else "slo_missed"), e.get("reason")
    assert e["xla_scope"] == "forward (jax.jit, one executable per bucket size)" and e["compile_s"] > 0
    assert e["capacity_rate"] > 0 and e["buckets"] == [1, 2, 4, 8, 16, 32, 64] and e["serve_trials"]
    if e["max_rate_at_slo"] is not None:  # (a loaded CI machine may find none, and say why)
        assert e["serve_p99_ms"] <= 10.0 and e["max_rate_at_slo"] < e["capacity_rate"]
    else:
        assert e["serve_reason"]


def test_data_parallel_over_two_virtual_cpus(jax_run):
    e = jax_run[3]["mlp-train-cpu2-virtual-jax-fp32-b64"]
    assert e["status"] == "ok" and e["global_batch"] == 128 and e["devices"] == ["cpu:0", "cpu:1"]
    sh = e["data_sharding"]  # each device its half of the batch, the other axes whole
    assert sh[0] == "batch" and not any(sh[1:])
    assert e["all_reduce"] == "XLA SPMD collectives (in-process CPU)"
    assert "model_parallel_split" not in e


def test_model_parallel_splits_the_dense_and_attention_kernels(jax_run):
    cases = jax_run[3]
    mlp = cases["mlp-train-cpu2-virtual-jax-mp-fp32-b64"]
    assert mlp["status"] == "ok" and mlp["parallelism"] == "model" and mlp["global_batch"] == 64
    assert {"dense_0/kernel", "dense_0/bias", "logits/kernel"} <= set(mlp["model_parallel_split"])
    assert mlp["model_parallel_split_fraction"] == 1.0
    assert cases["mlp-infer-cpu2-virtual-jax-mp-fp32-b64"]["status"] == "ok"
    tr = cases["transformer-train-cpu2-virtual-jax-mp-fp32-b16"]
    assert tr["status"] == "ok"
    split = set(tr["model_parallel_split"])
    for k in ("query", "key", "value", "attention_output"):
        assert f"block0_attn/{k}/kernel" in split
    assert {"block0_ffn1/kernel", "block0_ffn2/kernel"} <= split
    assert not any("ln" in p or "attention_output/bias" in p for p in split)
    assert 0.5 < tr["model_parallel_split_fraction"] < 1.0  # norms and the output bias stay whole


def test_a_tensorflow_and_a_jax_run_render_one_report_with_the_backend_comparison(jax_run, smoke, tmp_path):
    _, jax_path, _, _ = jax_run
    _, tf_path, _ = smoke
    out = tmp_path / "report"
    r = subprocess.run(
        [sys.executable, "-m", "bench", "report", str(tf_path), str(jax_path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    page = (out / "index.html").read_text()
    section = page[page.index("Backends side by side - " + json.loads(jax_path.read_text())["run"]["id"]) :]
    section = section[: section.index("Model vs data parallel")]
    assert "mlp-train-cpu-jax-fp32-b64" in section and "mlp-train-cpu-fp32-b64" in section
    assert "mlp-train-cpu-fp32-xla-b64" in section  # the smoke run has TF with XLA too: both pairs shown
    assert "x [" in section  # a ratio with its CI
    assert "mlp-train-cpu2-virtual-jax-mp-fp32-b64" in page[page.index("Model vs data parallel") :]
    csv = subprocess.run(
        [sys.executable, "-m", "bench", "export", str(jax_path)], capture_output=True, text=True, check=True
    ).stdout
    header = csv.splitlines()[0].split(",")
    assert header[14:17] == ["nodes", "backend", "parallelism"]


FP16_SCRIPT = """
import math
from bench.backends.jax_backend import JaxBackend
from bench.cases import Case, DeviceConfig
be = JaxBackend(DeviceConfig("cpu"))
case = Case("mlp", "train", "cpu", 1, False, "mixed_float16", True, 64, backend="jax")
print(be.apply_precision(case.precision_spec, "cpu"))
b = be.build(case, "smoke")
for _ in range(6):
    loss = b.step()
be.sync()
at = [i for i, v in enumerate(b.native.optimizer.variables) if v.path.endswith("dynamic_scale")]
print(be.final_loss(loss), len(at), float(b.native.state[2][at[0]]))  # the live state: variables were donated
"""


def test_mixed_float16_trains_with_loss_scaling_on_jax():
    """The planner leaves fp16 out on CPUs (emulated); the backend's loss scaling is checked directly."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "1"}
    r = subprocess.run([sys.executable, "-c", FP16_SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    mode, last = r.stdout.strip().splitlines()[-2:]
    assert mode.startswith("fp16 compute, float32 variables, loss scaling")
    loss, n_scale, scale = last.split()
    assert math.isfinite(float(loss)) and int(n_scale) == 1 and float(scale) > 0


def test_executed_flops_are_the_dots_and_convolutions_of_xlas_step(jax_run):
    """Each case's FLOPs per sample against the dots and convolutions of its own lowered XLA step (the
    analytic count adds the bias adds: within 1%); the 3 x forward convention counts the data input's
    gradient, which the step does not compute."""
    _, _, _, cases = jax_run
    checked = set()
    for cid, e in cases.items():
        if e["status"] != "ok" or e["mode"] == "serve":
            continue
        per_sample = e["hlo_dot_flops_per_step"] / e["global_batch"]
        assert e["flops_per_sample"] == pytest.approx(per_sample, rel=0.01), cid
        if e["mode"] == "train" and e["workload"] != "cnn":  # the CNN's stem gradient is 1.2% of its step
            assert e["model_flops_per_sample"] != pytest.approx(per_sample, rel=0.01), cid
        checked.add((e["workload"], e["mode"]))
    assert {("mlp", "train"), ("transformer", "train"), ("cnn", "train"), ("mlp", "infer")} <= checked


def test_every_case_says_why_its_rounds_stopped_and_the_peak_is_probed_once(jax_run):
    """The stopping rule's record on every measured case; one matmul probe per precision and one copy probe for the run."""
    _, _, _, cases = jax_run
    measured = {cid: e for cid, e in cases.items() if e["status"] == "ok" and e["mode"] != "serve"}
    probes: dict[str, set] = {}
    copies = {(e["copy_probe_case"], e["mem_bw_gbps_per_device"], e["copy_probe_bytes"]) for e in measured.values()}
    ((by, gbps, n_bytes),) = copies  # the memory roof: measured once, by a case of this run, beyond any cache
    assert by in measured and gbps > 0 and n_bytes == 256 * 2**20
    for cid, e in measured.items():
        # the smoke looks, or those a slow step's budget reaches (at least the first)
        assert e["ci_method"] == "median RCI (sign walk)" and e["ci_looks"] in ([6], [6, 10]), cid
        assert e["stop_reason"] in ("target_met", "cap_reached", "budget_spent") or e["stop_reason"].startswith(
            "guard_failed:"
        ), cid
        assert e["rounds"] in e["ci_looks"] and e["target_missed"] == (e["stop_reason"] != "target_met"), cid
        lo, hi, mid = e["samples_per_s_ci_low"], e["samples_per_s_ci_high"], e["samples_per_s"]
        assert e["ci_achieved_rel"] == pytest.approx((hi - lo) / (2 * mid), rel=1e-6), cid
        probes.setdefault(e["precision"], set()).add((e["probe_case"], e["peak_tflops_per_device"], e["probe_n"]))
    # the cpu and cpu2-virtual workers of this run share the first fp32 case's probe
    (fp32,) = probes["fp32"]
    assert fp32[0] in measured and fp32[2] == 2048


def test_a_second_run_loads_the_steps_from_the_compile_cache(jax_run):
    """The run above filled its cache folder (every step a miss); the same case again is a hit."""
    d, path, doc, cases = jax_run
    first = cases["mlp-train-cpu-jax-fp32-b64"]
    assert first["compile_cache"] == "miss" and first["cold_compile_s"] == first["compile_s"]
    assert doc["run"]["compile_cache"] == str(d / "cache")
    args = [
        *("run", "--backend", "jax", "--profile", "smoke", "--workloads", "mlp", "--devices", "cpu"),
        *("--precisions", "fp32", "--modes", "train", "--no-report", "--compile-cache", str(d / "cache")),
        *("--results-dir", str(d / "again")),
    ]
    r = subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (again,) = (d / "again").glob("*.json")
    (e,) = [x["extra_info"] for x in storage.records(storage.load(again))]
    assert e["status"] == "ok" and e["compile_cache"] == "hit" and e["compile_cache_misses"] == 0
    assert e["compile_cache_load_s"] > 0 and e["probe_case"] == e["case_id"]  # a new run probes anew
    # the run's second workers compiled afresh (the cache off for them): the spread they measure includes XLA's compile
    again = [w for e in cases.values() for w in e.get("repeat_workers") or []]
    assert again and all(w["compile_cache"] == "off" for w in again if w["status"] == "ok")
    assert doc["run"]["between_worker_spread"]["cpu"]["cases"] >= 1
