"""torch's paths in their own processes: DDP's weights equal one process's, and a torch-only install's devices --check.

Apart from ``test_torch.py`` so the two files' runs go to different test workers.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).parent.parent


# -- DDP is data parallelism: two ranks on halves of a batch step as one process on all of it --

PARITY = r"""
import os, sys, json
os.environ["KERAS_BACKEND"] = "torch"
os.environ["KERAS_TORCH_DEVICE"] = "cpu"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
import torch
from bench.cases import DeviceConfig
from bench import torch_ddp

rank = int(os.environ.get(torch_ddp.RANK_VAR, "-1"))
if rank >= 0:  # one rank of two, joined before Keras is imported, as the worker's backend does
    group = torch_ddp.join(DeviceConfig("cpu", 2, True), command=[sys.executable, sys.argv[0]])
import keras
from workloads import WORKLOADS

w = WORKLOADS["mlp"]; size = w.sizes["smoke"]
keras.utils.set_random_seed(3)
model = w.build(size)
x, y = w.make_batch(size, 32, seed=5)
if rank >= 0:  # its half of the batch, under DDP
    x, y = x[16 * group.rank : 16 * (group.rank + 1)], y[16 * group.rank : 16 * (group.rank + 1)]
    net = group.wrap(model, torch.device("cpu"))
else:
    net = model
opt = keras.optimizers.SGD(0.01, momentum=0.9); opt.build(model.trainable_variables)
lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
for _ in range(3):
    loss = lossf(y, net(x, training=True))
    model.zero_grad(); loss.backward()
    with torch.no_grad():
        opt.apply([v.value.grad for v in model.trainable_variables], model.trainable_variables)
loss = group.mean(loss.detach()) if rank >= 0 else float(loss)  # the halves' mean: the whole batch's loss
out = {"loss": loss, "weights": [float(v.value.detach().sum()) for v in model.trainable_variables]}
if rank <= 0:
    json.dump(out, open(os.environ["PARITY_OUT"] + str(rank), "w"))
"""


@pytest.mark.slow
def test_ddp_over_gloo_steps_as_one_device_does(tmp_path):
    script = tmp_path / "parity.py"
    script.write_text(PARITY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PARITY_OUT": str(tmp_path / "out")}
    # one process beside the group (imports are mostly one core's work): rank 0 starts rank 1 itself
    # (bench.torch_ddp.join), as a worker does; here the "plan" is the script
    one = subprocess.Popen([sys.executable, str(script)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        two = subprocess.run(
            [sys.executable, str(script)],
            env={**env, "ACCELBENCH_DDP_RANK": "0"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        _, one_err = one.communicate(timeout=300)
    finally:
        one.kill()
    assert one.returncode == 0, one_err[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = (json.loads((tmp_path / f"out{r}").read_text()) for r in (-1, 0))
    assert b["weights"] == pytest.approx(a["weights"], rel=1e-4, abs=1e-4)  # the same weights after 3 steps
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)  # the mean over the ranks is the whole batch's loss


# -- a torch-only install (no TensorFlow, no JAX): devices --check runs torch's CPU paths ----------

# no TensorFlow, no JAX for Python's path finder: find_spec says None (torch's dynamo asks it, and
# expects None for a missing module, not an error) and an import fails as for a module not installed
HIDE = """
import sys


class _Hidden:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "jax", "jaxlib"):
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.finder, attr)


sys.meta_path[:] = [_Hidden(f) if getattr(f, "__name__", "") == "PathFinder" else f for f in sys.meta_path]
"""


@pytest.mark.slow
def test_devices_check_on_a_torch_only_install_passes_its_cpu_rows(tmp_path):
    from bench import capability
    from bench.devices import cpu_info

    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(HIDE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(ROOT)])}
    args = ["devices", "--check", "--json", "--results-dir", str(tmp_path / "check")]
    r = subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {row["path"]: row for row in json.loads(r.stdout)["rows"]}
    assert rows["TensorFlow"]["result"] == "not available" and "ran on torch" in rows["TensorFlow"]["detail"]
    for path in (
        "cpu fp32 (Keras on torch)",
        "cpu torch.compile (Keras on torch)",
        "cpu2-virtual DDP over gloo (Keras on torch)",
        "cpu fp32 (native torch)",
    ):
        assert rows[path]["result"] == "pass", rows[path]
    assert "DDP all-reduce (gloo, bucketed)" in rows["cpu2-virtual DDP over gloo (Keras on torch)"]["detail"]
    bf16 = capability.cpu_precision("mixed_bfloat16", cpu_info().flags, "torch").supported  # this CPU's flags
    assert rows["cpu mixed_bfloat16 (Keras on torch)"]["result"] == ("pass" if bf16 else "not available")
    assert "no NVIDIA GPU visible to torch" in rows["gpu1 fp32 (Keras on torch)"]["detail"]
    assert all(row["result"] != "FAIL" for row in rows.values())
