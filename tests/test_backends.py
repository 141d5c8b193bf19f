"""The backend axis without importing JAX: planner rules, ids, worker environments, precision mapping, layouts."""

import dataclasses
import importlib.metadata
import json
import subprocess
import sys

import pytest

from bench import backends, capability, runner
from bench.backends import hiding
from bench.backends.layouts import bias_follows_kernel, layout_for
from bench.cases import BACKENDS, Case, DeviceConfig
from bench.devices import CPUInfo, Machine
from bench.errors import UserError
from bench.planning import RunOptions, plan
from bench.telemetry.gpus import Discovery, GPUInfo

NATIVE_BF16 = ("avx2", "avx512f", "avx512_bf16")
AVX2_ONLY = ("avx2", "fma")


def machine(jax_gpus=0, tf=True, jax=True, flags=NATIVE_BF16):
    """A machine as the probes would describe it; the GPUs (NVML and JAX's view) are the hardware boundary."""
    nv = [
        GPUInfo(i, "NVIDIA H200", f"GPU-uuid-{i}", f"0000:{0x10 + i:02x}:00.0", 141 * 2**30, (9, 0))
        for i in range(jax_gpus)
    ]
    jax_view = {
        "jax": "0.10.2",
        "gpus": [{"jax_index": i, "name": "NVIDIA H200", "compute_capability": [9, 0]} for i in range(jax_gpus)],
    }
    return Machine(
        CPUInfo("Test CPU", 2, 1, 2, flags),
        Discovery(nv, "570", "12.8", None if jax_gpus else "NVML library not found"),
        {"gpus": [], "built_with_cuda": True} if tf else {},
        jax_view if jax else {},
    )


def verdicts(machine_, **opts):
    base = dict(profile="smoke", workloads=("mlp",), modes=("train",))
    return {c.id: (c, s) for c, s in plan(RunOptions(**{**base, **opts}), machine_)}


def test_ids_keep_tensorflow_form_and_name_other_backends():
    tf = Case("mlp", "train", "gpu", 1, False, "tf32", True, 1024)
    jx = Case("mlp", "train", "gpu", 1, False, "tf32", True, 1024, backend="jax")
    mp = Case("mlp", "train", "gpu", 2, False, "fp32", True, 64, backend="jax", parallelism="model")
    assert tf.id == "mlp-train-gpu1-tf32-xla-b1024"
    assert jx.id == "mlp-train-gpu1-jax-tf32-b1024"  # JAX always compiles: no -xla
    assert mp.id == "mlp-train-gpu2-jax-mp-fp32-b64"
    # model parallel keeps one data-parallel replica: the global batch of one device
    assert mp.global_batch == 64
    assert Case("mlp", "train", "gpu", 2, False, "fp32", True, 64, backend="jax").global_batch == 128
    old = {k: v for k, v in tf.to_dict().items() if k not in ("backend", "parallelism")}
    assert Case.from_dict(old) == tf  # results written before the backend axis read as TensorFlow, data parallel


def test_backend_all_plans_each_probed_backend_and_jax_once_whatever_xla():
    v = verdicts(machine(), devices=("cpu",), precisions=("fp32",), backend="all", xla="both")
    assert set(v) == {"mlp-train-cpu-fp32-b64", "mlp-train-cpu-fp32-xla-b64", "mlp-train-cpu-jax-fp32-b64"}
    case, sup = v["mlp-train-cpu-jax-fp32-b64"]
    assert sup.supported and case.xla and case.backend == "jax"
    only_tf = verdicts(machine(jax=False), devices=("cpu",), precisions=("fp32",), backend="all")
    assert set(only_tf) == {"mlp-train-cpu-fp32-b64"}


@pytest.mark.parametrize("flags", [NATIVE_BF16, AVX2_ONLY])
def test_jax_cpu_precisions_follow_the_same_capability_rules(flags):
    v = verdicts(machine(flags=flags), devices=("cpu",), backend="jax")
    for p in ("fp32", "tf32", "mixed_float16", "mixed_bfloat16"):
        _, sup = v[f"mlp-train-cpu-jax-{p}-b64"]
        assert sup == capability.cpu_precision(p, flags, "jax")
    assert "XLA's CPU backend emulates fp16" in v["mlp-train-cpu-jax-mixed_float16-b64"][1].reason
    assert v["mlp-train-cpu-jax-mixed_bfloat16-b64"][1].supported is ("avx512_bf16" in flags)


def test_jax_gpu_rules_virtual_split_refused_real_gpus_counted_by_jax():
    m = machine(jax_gpus=2, tf=False)
    v = verdicts(m, devices=("gpu:1", "gpu:2"), precisions=("fp32", "tf32"), backend="jax", virtual_devices=2)
    assert v["mlp-train-gpu2-jax-tf32-b64"][1].supported  # JAX sees 2 GPUs though TensorFlow was never probed
    assert v["mlp-train-gpu2-virtual-jax-fp32-b64"][1].reason == capability.JAX_VIRTUAL_GPU
    none = verdicts(machine(jax_gpus=0, tf=False), devices=("gpu:1",), precisions=("fp32",), backend="jax")
    assert "no NVIDIA GPU visible to JAX" in none["mlp-train-gpu1-jax-fp32-b64"][1].reason


def test_model_parallelism_is_jax_only_and_needs_several_devices():
    v = verdicts(
        machine(), backend="all", parallelism="both", devices=("cpu",), precisions=("fp32",), virtual_devices=2
    )
    assert v["mlp-train-cpu2-virtual-mp-fp32-b64"][1].reason == capability.MODEL_PARALLEL_TF
    assert v["mlp-train-cpu2-virtual-jax-mp-fp32-b64"][1].supported
    assert not any(cid.startswith("mlp-train-cpu-") and "-mp-" in cid for cid in v)  # one device: no split
    with pytest.raises(UserError, match="needs several devices"):
        verdicts(machine(), backend="jax", parallelism="model", devices=("cpu",))
    with pytest.raises(UserError, match="--backend tensorflow"):
        RunOptions(backend="jax", nodes=2)
    with pytest.raises(UserError, match="--parallelism must be"):
        RunOptions(parallelism="pipeline")


def test_resolve_names_the_missing_install(monkeypatch):
    monkeypatch.setattr(backends, "installed", lambda b: b == "tensorflow")
    assert backends.resolve("all") == ("tensorflow",)
    with pytest.raises(UserError, match=r"jax is not installed \(pip install 'accelbench\[jax\]'\)"):
        backends.resolve("jax")
    with pytest.raises(UserError, match=r"torch-native: torch is not installed \(pip install 'accelbench\[torch\]'\)"):
        backends.resolve("tensorflow,torch-native")
    with pytest.raises(UserError, match="--backend takes tensorflow, jax, torch, torch-native, a comma list"):
        backends.resolve("pytorch")
    assert backends.names("torch-native, jax") == ("jax", "torch-native")  # the suite's order, whatever was typed


def test_torch_workers_see_only_their_devices_and_keras_runs_on_torch():
    cpu = backends.worker_env("torch-native", DeviceConfig("cpu", 2, True), {"uuids": ["GPU-a"]})
    assert cpu == {
        "KERAS_BACKEND": "torch",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "",
        "KERAS_TORCH_DEVICE": "cpu",
    }
    gpu = backends.worker_env("torch", DeviceConfig("gpu", 2), {"uuids": ["GPU-a", "GPU-b", "GPU-c"]})
    assert gpu["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b" and gpu["KERAS_BACKEND"] == "torch"


def test_worker_environment_per_backend():
    assert backends.worker_env("tensorflow", DeviceConfig("cpu", 2, True), user_env={}) == {
        "KERAS_BACKEND": "tensorflow",  # a user's KERAS_BACKEND=jax cannot turn a TF worker into a JAX one
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "TF_CPU_ALLOCATOR_USE_BFC": "true",  # the CPU's allocator peak, on every CPU (a user's setting is kept)
    }
    kept = backends.worker_env("tensorflow", DeviceConfig("cpu"), user_env={"TF_CPU_ALLOCATOR_USE_BFC": "false"})
    assert kept["TF_CPU_ALLOCATOR_USE_BFC"] == "false"
    # what the workers run with, as recorded (TensorFlow's bool: 1 / true on, anything else off)
    for user, allocator in (
        ({}, "bfc"),
        ({"TF_CPU_ALLOCATOR_USE_BFC": " TRUE"}, "bfc"),
        ({"TF_CPU_ALLOCATOR_USE_BFC": "1"}, "bfc"),
    ):
        assert backends.tf_cpu_allocator(user) == allocator, user
    for value in ("false", "0", "no"):
        assert backends.tf_cpu_allocator({"TF_CPU_ALLOCATOR_USE_BFC": value}) == "default", value
    cpu = backends.worker_env("jax", DeviceConfig("cpu", 2, True))
    assert cpu["KERAS_BACKEND"] == "jax" and cpu["JAX_PLATFORMS"] == "cpu" and cpu["JAX_NUM_CPU_DEVICES"] == "2"
    assert backends.worker_env("jax", DeviceConfig("cpu"))["JAX_NUM_CPU_DEVICES"] == "1"
    plan_ = machine(jax_gpus=3).jax_gpu_plan("gpu", 2)
    gpu = backends.worker_env("jax", DeviceConfig("gpu", 2), plan_)
    assert gpu["CUDA_VISIBLE_DEVICES"] == "GPU-uuid-0,GPU-uuid-1"
    assert gpu["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" and "JAX_NUM_CPU_DEVICES" not in gpu
    assert plan_["pci_bus_ids"] == ["0000:10:00.0", "0000:11:00.0"]


def test_a_jax_worker_gets_only_the_gpus_cuda_visible_devices_allows():
    """gpu-review-2 finding 2: with CUDA_VISIBLE_DEVICES=2,3 the gpu:2 worker was given GPUs 0 and 1."""
    m = machine(jax_gpus=4)
    for spec, want in (("2,3", ["GPU-uuid-2", "GPU-uuid-3"]), ("3,1", ["GPU-uuid-3", "GPU-uuid-1"])):
        plan_ = m.jax_gpu_plan("gpu", 2, env={"CUDA_VISIBLE_DEVICES": spec})
        env = backends.worker_env("jax", DeviceConfig("gpu", 2), plan_)
        assert env["CUDA_VISIBLE_DEVICES"].split(",") == want  # the user's GPUs, in the user's order
        assert plan_["pci_bus_ids"] == [f"0000:{0x10 + int(u[-1]):02x}:00.0" for u in want]
    by_uuid = m.jax_gpu_plan("gpu", 1, env={"CUDA_VISIBLE_DEVICES": "GPU-uuid-2"})
    assert by_uuid["uuids"] == ["GPU-uuid-2"]
    # a MIG-enabled GPU is not a whole GPU for a worker
    mig = machine(jax_gpus=3)
    mig.nvml.gpus[0] = dataclasses.replace(mig.nvml.gpus[0], mig=True)
    assert mig.jax_gpu_plan("gpu", 2, env={})["uuids"] == ["GPU-uuid-1", "GPU-uuid-2"]


def test_jax_gpu_workers_may_pool_most_of_the_gpu_unless_the_user_says_otherwise():
    """gpu-review-2 finding 4: without preallocation XLA still caps its pool at 75% of the GPU."""
    plan_ = machine(jax_gpus=1).jax_gpu_plan("gpu", 1, env={})
    env = backends.worker_env("jax", DeviceConfig("gpu", 1), plan_, user_env={})
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.95" and env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "XLA_CLIENT_MEM_FRACTION" not in env  # never both spellings
    for var in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"):  # the user's own, either spelling
        env = backends.worker_env("jax", DeviceConfig("gpu", 1), plan_, user_env={var: "0.5"})
        assert "XLA_CLIENT_MEM_FRACTION" not in env and "XLA_PYTHON_CLIENT_MEM_FRACTION" not in env
    assert "XLA_CLIENT_MEM_FRACTION" not in backends.worker_env("jax", DeviceConfig("cpu"), user_env={})
    assert "XLA_CLIENT_MEM_FRACTION" not in backends.worker_env(
        "tensorflow", DeviceConfig("gpu", 1), plan_, user_env={}
    )


def test_jax_gpu_cases_share_a_worker_per_tf32_setting_and_backends_never_share_one():
    def case(backend, kind, precision="fp32"):
        return Case("mlp", "train", kind, 1, False, precision, backend == "jax", 64, backend=backend)

    a, b = case("jax", "gpu"), case("jax", "gpu", "tf32")
    assert runner.group_key(a) != runner.group_key(b)  # TF32 off and on: apart, as TensorFlow's
    assert runner.group_key(b) == runner.group_key(case("jax", "gpu", "mixed_bfloat16"))
    assert runner.group_label(runner.group_key(a)) == "gpu1-tf32off-jax"
    assert runner.group_key(a) != runner.group_key(case("tensorflow", "gpu"))
    assert runner.group_key(case("jax", "cpu")) == runner.group_key(case("jax", "cpu", "mixed_bfloat16"))
    assert runner.group_key(case("jax", "cpu")) != runner.group_key(case("tensorflow", "cpu"))
    assert runner.group_label(runner.group_key(case("jax", "cpu"))) == "cpu-jax"
    eager = Case("mlp", "train", "cpu", 1, False, "fp32", False, 64, backend="torch")
    assert runner.group_key(eager) == runner.group_key(eager.related(xla=True))  # torch.compile: one worker
    assert runner.group_key(eager) != runner.group_key(eager.related(backend="torch-native"))


@pytest.mark.parametrize(
    "path, shape, n, want",
    [
        ("dense_0/kernel", (64, 128), 2, (None, "model")),
        ("dense_0/bias", (128,), 2, ("model",)),
        ("logits/kernel", (128, 10), 4, None),  # 10 classes do not split 4 ways
        ("block0_attn/query/kernel", (64, 4, 16), 2, (None, "model", None)),
        ("block0_attn/query/bias", (4, 16), 2, ("model", None)),
        ("block0_attn/attention_output/kernel", (4, 16, 64), 2, ("model", None, None)),
        ("block0_attn/attention_output/bias", (64,), 2, None),
        ("stem_conv/kernel", (7, 7, 3, 64), 2, None),  # convolutions stay whole
        ("block0_ln1/gamma", (64,), 2, None),
    ],
)
def test_model_parallel_layouts(path, shape, n, want):
    assert layout_for(path, shape, n) == want


def test_a_bias_stays_whole_where_its_kernel_does():
    shapes = {"logits/kernel": (128, 10), "logits/bias": (10,)}
    assert layout_for("logits/bias", (10,), 2) == ("model",)
    assert not bias_follows_kernel("logits/bias", shapes, 4)
    assert bias_follows_kernel("logits/bias", shapes, 2)


HIDDEN = """
import importlib.metadata, importlib.util, sys
from bench.backends.hiding import hide_unused
print(hide_unused(sys.argv[1]), hide_unused(sys.argv[1]))
for name in ("jax", "pandas"):
    try:
        __import__(name)
        print(name, "imported")
    except ImportError:
        print(name, "hidden", importlib.util.find_spec(name), importlib.metadata.version(name))
import numpy
print("tensorflow findable", importlib.util.find_spec("tensorflow") is not None)
"""


def test_a_worker_cannot_import_what_its_backend_never_uses_and_still_reads_its_version():
    # Keras and tf.lite import JAX, pandas and matplotlib where installed, each optional: a worker hides
    # them so they are skipped (a quicker start); versions, read from the installed metadata, stay
    r = subprocess.run([sys.executable, "-c", HIDDEN, "tensorflow"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "('jax', 'jaxlib', 'matplotlib', 'pandas', 'torch') ()"  # the second call: nothing more
    jax_version = importlib.metadata.version("jax")
    assert lines[1] == f"jax hidden None {jax_version}" and lines[2].startswith("pandas hidden None ")
    assert lines[3] == "tensorflow findable True"  # its own framework, never hidden
    assert set(hiding.UNUSED) == set(BACKENDS)
    assert all(backends.MODULE[b] not in hiding.UNUSED[b] for b in BACKENDS)


def test_the_parent_side_imports_no_framework():
    import subprocess

    code = (
        "import sys, bench.cli, bench.runner, bench.backends, bench.planning, bench.report.render;"
        "bad=[m for m in ('tensorflow','jax') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


TF_GPU1_METERING = """
import json, sys
sys.path.insert(0, "tests")
from fake_nvml import Clock, FakeGPU, FakeNVML
import bench.telemetry.nvml as n
gpus = [FakeGPU(uuid=f"GPU-{i}", bus_id=f"00000000:{0x10 + i:02X}:00.0") for i in range(4)]
n.pynvml = FakeNVML(gpus, Clock(0.0))  # the hardware boundary: a 4-GPU box
import bench.tfprobe as tp
# what TensorFlow's device_lib says on such a box whatever set_visible_devices chose: every GPU
tp.tf_gpu_descs = lambda: [
    {"cuda_ordinal": i, "name": g.name, "pci_bus_id": g.bus_id, "compute_capability": [9, 0]}
    for i, g in enumerate(gpus)
]
from bench.cases import Case, DeviceConfig
from bench.profiles import timing
from bench.protocol import WorkerPlan
from bench.worker import WorkerSession
case = Case("mlp", "train", "gpu", 1, False, "fp32", False, 64)
plan = WorkerPlan("r", "smoke", DeviceConfig("gpu", 1), timing("smoke"), (case,),
    gpu={"cuda_ordinals": [2], "pci_bus_ids": [gpus[2].bus_id], "memory_total_bytes": gpus[2].memory_total})
s = WorkerSession(plan, None)
print(json.dumps({"error": s.setup_error, "bus_ids": s.bus_ids, "metered": [g.pci_bus_id for g in s.gpus.gpus]}))
"""


@pytest.mark.slow
def test_a_tensorflow_gpu1_worker_meters_its_one_gpu_not_the_machines_four():
    """gpu-review-2 finding 1: the bus ids came from device_lib, which lists every GPU of the machine."""
    r = subprocess.run([sys.executable, "-c", TF_GPU1_METERING], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["error"] is None
    assert out["bus_ids"] == ["00000000:12:00.0"] and out["metered"] == ["0000:12:00.0"]  # the plan's GPU only


GROWTH_PROBE = """
import json
from tensorflow.python.client import device_lib
import bench.tfprobe as tp
seen = []
real = device_lib.list_local_devices
def spy(session_config=None):  # the real call, its config remembered
    seen.append(session_config)
    return real(session_config=session_config)
device_lib.list_local_devices = spy
descs = tp.tf_gpu_descs()
cfg = seen[0]
print(json.dumps({"descs": descs, "growth": cfg is not None and cfg.gpu_options.allow_growth}))
"""


@pytest.mark.slow
def test_the_probe_lists_gpus_with_allocators_that_grow_on_demand():
    """gpu-review-2 finding 9: the default config made the first tensor take a GPU's free memory."""
    r = subprocess.run([sys.executable, "-c", GROWTH_PROBE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"descs": [], "growth": True}  # this machine has no GPU; the config is what matters
