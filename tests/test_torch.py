"""The torch backends: Keras on torch and native torch, compiled or not, DDP over gloo, on the CPU for real.

One shared run (``torch_run``) measures both backends' paths; the native models are held against
the Keras builds by parameter count and by the FLOPs torch's own counter sees.
"""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from run_bench import run_bench
from test_capability import machine

from bench.cases import Case, parse_id
from bench.errors import UserError
from bench.planning import RunOptions, plan
from workloads import WORKLOADS
from workloads.cnn import RESNET50

torch = pytest.importorskip("torch")
ROOT = Path(__file__).parent.parent


# -- ids and planning (no framework started) -------------------------------------------------


def test_torch_ids_say_compile_never_xla_and_read_back():
    c = Case("cnn", "train", "gpu", 1, False, "mixed_bfloat16", True, 64, backend="torch")
    assert c.id == "cnn-train-gpu1-torch-mixed_bfloat16-compile-b64"
    n = c.related(backend="torch-native", xla=False, workload="mlp", mode="infer", per_replica_batch=1024)
    assert n.id == "mlp-infer-gpu1-torch-native-mixed_bfloat16-b1024"
    assert parse_id(c.id)["backend"] == "torch" and parse_id(c.id)["xla"] == "compile"
    assert parse_id("mlp-train-cpu2-virtual-torch-native-fp32-compile-b64")["backend"] == "torch-native"
    assert c.baseline().id == "cnn-train-cpu-torch-fp32-b64"  # the eager CPU fp32 step
    tf = c.related(backend="tensorflow")
    assert tf.id == "cnn-train-gpu1-mixed_bfloat16-xla-b64"  # TensorFlow ids unchanged


def test_torch_plans_compile_on_off_ddp_on_virtual_cpus_and_says_what_it_cannot():
    m = machine()
    m.torch = {
        "torch": "2.13.0",
        "gpus": [],
        "gpu_reason": "this torch is a CPU-only build (torch.version.cuda is None)",
    }
    opts = RunOptions(
        profile="smoke",
        workloads=("mlp",),
        modes=("train",),
        backend="torch,torch-native",
        xla="both",
        virtual_devices=2,
        parallelism="both",
    )
    verdict = {c.id: s for c, s in plan(opts, m)}
    assert verdict["mlp-train-cpu-torch-fp32-compile-b64"].supported
    assert verdict["mlp-train-cpu2-virtual-torch-native-fp32-b64"].supported  # DDP over gloo
    assert (
        "no NVIDIA GPU visible to torch (this torch is a CPU-only build"
        in verdict["mlp-train-gpu1-torch-fp32-b64"].reason
    )
    assert "keras-team/keras#23418" in verdict["mlp-train-cpu2-virtual-torch-mp-fp32-b64"].reason
    assert "torch's CPU fp16 is not offered" in verdict["mlp-train-cpu-torch-native-mixed_float16-b64"].reason
    with pytest.raises(UserError, match="--backend takes"):
        RunOptions(backend="torch,pytorch")


# -- the native models are the Keras models' shapes -------------------------------------------


@pytest.mark.parametrize("workload", ["mlp", "cnn", "transformer"])
def test_native_models_have_the_keras_parameters_and_flops(workload):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from bench.backends.torch_native import build_model, make_batch

    w = WORKLOADS[workload]
    size = w.sizes["smoke"]
    native, _ = build_model(workload, size)
    keras_model = w.build(size)
    trainable = sum(int(torch.tensor(v.shape).prod()) for v in keras_model.trainable_weights)
    assert sum(p.numel() for p in native.parameters()) == trainable
    x, _ = make_batch(workload, size, w.input_shape(size), w.num_classes(size), 2, seed=0)
    # train mode and SDPA's plain-math kernel: eval's fused encoder kernel and the CPU flash kernel
    # hide the attention matmuls from the counter (the same math)
    with FlopCounterMode(display=False) as fc, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        native.train()(x)
    # torch counts matmuls and convolutions (no bias adds, which the analytic count has: < 1%)
    assert fc.get_total_flops() / 2 == pytest.approx(w.forward_flops(size), rel=0.01)


def test_native_resnet50_is_resnet50_v1_5_with_torchvisions_layout():
    from bench.backends.torch_native import _ResNet

    own = _ResNet(RESNET50)
    assert sum(p.numel() for p in own.parameters()) == 25_557_032
    assert own.layers[1][0].conv2.stride == (2, 2) and own.layers[1][0].conv1.stride == (1, 1)  # v1.5: 3x3 strides
    tv = pytest.importorskip("torchvision")  # where it is installed, the backend uses torchvision's own
    theirs = tv.models.resnet50(weights=None)
    assert sorted(tuple(v.shape) for v in own.state_dict().values()) == sorted(
        tuple(v.shape) for v in theirs.state_dict().values()
    )


# -- a real run of both torch backends --------------------------------------------------------

# every workload in training, MLP and CNN inference (eval mode), the MLP compiled and over DDP
KEEP = "torch and (not compile or (mlp-train and not virtual)) and (not virtual or mlp-train) and not transformer-infer"


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch")
    args = ["run", "--profile", "smoke", "--backend", "torch,torch-native", "--devices", "cpu"]
    args += ["--virtual-devices", "2", "--precisions", "fp32", "--xla", "both", "--repeats", "0", "-k", KEEP]
    r = run_bench(args, out)
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = (out / "results").glob("*.json")
    doc = json.loads(path.read_text())
    recs = {b["extra_info"]["case_id"]: b["extra_info"] for b in doc["benchmarks"]}
    return out, path, recs


@pytest.mark.slow
def test_both_torch_backends_measure_every_workload_eager_compiled_and_over_ddp(torch_run):
    _, _, recs = torch_run
    assert {i: r["status"] for i, r in recs.items() if r["status"] != "ok"} == {}
    for w in ("mlp", "cnn", "transformer"):
        for mode in ("train", "infer") if w != "transformer" else ("train",):
            b = WORKLOADS[w].batch["smoke"]
            keras_id, native_id = f"{w}-{mode}-cpu-torch-fp32-b{b}", f"{w}-{mode}-cpu-torch-native-fp32-b{b}"
            assert recs[keras_id]["params"] == recs[native_id]["params"]  # the same model, twice
            assert recs[keras_id]["compile_s"] == 0.0 and recs[keras_id]["xla_scope"] is None  # eager: nothing compiled
            assert recs[native_id]["framework"]["torch"] == torch.__version__
    # fp32 is true fp32: torch's TF32 switches off for matmul and cuDNN, read back
    assert recs["cnn-train-cpu-torch-native-fp32-b16"]["math_mode"] == "fp32 (torch TF32: matmul off, cuDNN off)"
    assert recs["mlp-train-cpu-torch-fp32-b64"]["math_mode"] == "fp32 (torch TF32: matmul off, cuDNN off)"
    native = recs["mlp-train-cpu-torch-native-fp32-compile-b64"]
    assert native["torch_compile_graphs"] == 1 and native["torch_compile_graph_breaks"] == 0  # fullgraph
    keras = recs["mlp-train-cpu-torch-fp32-compile-b64"]
    assert keras["torch_compile_graphs"] >= 1 and keras["compile_s"] > 0
    assert "torch.compile" in keras["xla_scope"] and "optimizer eager" in keras["xla_scope"]
    for be in ("torch", "torch-native"):
        ddp = recs[f"mlp-train-cpu2-virtual-{be}-fp32-b64"]
        assert ddp["all_reduce"] == "DDP all-reduce (gloo, bucketed)" and ddp["ddp_world"] == 2
        assert ddp["global_batch"] == 128 and ddp["stop_reason"] == "fixed rounds (ranks in step)"


@pytest.mark.slow
def test_the_csv_holds_the_torch_backends_and_the_report_sets_them_side_by_side(torch_run):
    out, path, _ = torch_run
    r = subprocess.run(
        [sys.executable, "-m", "bench", "export", str(path), "--format", "csv", "--out", str(out / "t.csv")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out / "t.csv")
    assert set(df["backend"]) == {"torch", "torch-native"}
    (html,) = (out / "reports").glob("*/index.html")
    text = html.read_text()
    assert "native PyTorch" in text and "Keras on torch" in text
