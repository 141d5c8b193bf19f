"""``accelbench devices --check``: one tiny measured step of every path the machine supports.

Each path (a device configuration, precision, XLA setting) is one smoke-profile MLP training
case run by the real runner and worker, so what passes here is what a benchmark run uses:
device setup, virtual splits, MirroredStrategy with the real all-reduce, XLA, loss scaling,
placement checks, telemetry. A path the hardware cannot run is listed "not available" with the
reason; a supported path that fails makes the check exit 1 with the path named. Then a 10 s NVML
window under a GPU load compares the energy counter with integrated instant power.

The parent never imports TensorFlow: the NVML window is sampled here while a child process
(``python -m bench.check LOAD_SECONDS``) keeps the GPU busy with matmuls.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import planning, runner, storage
from bench.cases import PRECISIONS, Case
from bench.devices import Machine
from bench.report import analysis, published, reference
from bench.telemetry import energy_check
from bench.telemetry.energy_check import AGREEMENT, load_env, sampled_window
from bench.telemetry.gpus import EmptyGPUs, NvidiaGPUs, open_gpus_by_bus_id

BATCH = 64  # the smoke MLP's batch
LOAD = [sys.executable, "-m", "bench.check"]  # + SECONDS: a matmul load on GPU:0 (TensorFlow, else JAX)
WINDOW_S = 10.0


@dataclass(frozen=True)
class Row:
    """One line of the check: the path, ``pass`` / ``FAIL`` / ``not available``, and why."""

    path: str
    result: str
    detail: str


NAMES = {"jax": "JAX", "torch": "torch", "tensorflow": "TensorFlow"}


def backend_of(machine: Machine) -> str:
    """The backend the check runs on first: TensorFlow where it is installed, else JAX, else torch."""
    return "tensorflow" if machine.tf else "jax" if machine.jax else "torch"


def _case(kind: str, count: int, precision: str, xla: bool, virtual: bool = False, backend: str = "tensorflow") -> Case:
    return Case("mlp", "train", kind, count, virtual, precision, xla, BATCH, backend=backend)


def paths(machine: Machine) -> list[tuple[str, Case]]:
    """Every path worth checking on any machine, named for people; the planner says which run.

    The first backend's (TensorFlow, else JAX), then torch's where torch is installed.
    """
    extra = torch_paths(machine) if machine.torch else []
    if backend_of(machine) == "torch":
        return extra
    if backend_of(machine) == "jax":
        return jax_paths(machine) + extra
    n = machine.tf_gpu_count
    out = [(f"cpu {p}", _case("cpu", 1, p, False)) for p in ("fp32", "mixed_bfloat16")]
    out += [
        ("cpu XLA", _case("cpu", 1, "fp32", True)),
        ("cpu2-virtual MirroredStrategy", _case("cpu", 2, "fp32", False, True)),
        ("cpu2-virtual XLA", _case("cpu", 2, "fp32", True, True)),
    ]
    out += [(f"gpu1 {p}", _case("gpu", 1, p, False)) for p in PRECISIONS]
    out += [(f"gpu1 XLA {p}", _case("gpu", 1, p, True)) for p in ("fp32", "mixed_float16")]
    k = max(n, 2)
    out += [
        (f"gpu{k} all GPUs, all-reduce", _case("gpu", k, "fp32", False)),
        (f"gpu{k} all GPUs, XLA + loss scaling", _case("gpu", k, "mixed_float16", True)),
        ("gpu2-virtual split", _case("gpu", 2, "fp32", False, True)),
    ]
    return out + extra


def jax_paths(machine: Machine) -> list[tuple[str, Case]]:
    """The paths of a JAX-only machine (JAX always compiles: no XLA axis; no virtual GPUs)."""
    n = machine.gpu_count("jax")

    def case(kind: str, count: int, precision: str, virtual: bool = False) -> Case:
        return _case(kind, count, precision, True, virtual, "jax")

    out = [(f"cpu {p} (JAX)", case("cpu", 1, p)) for p in ("fp32", "mixed_bfloat16")]
    out += [("cpu2-virtual data parallel (JAX)", case("cpu", 2, "fp32", True))]
    out += [(f"gpu1 {p} (JAX)", case("gpu", 1, p)) for p in PRECISIONS]
    k = max(n, 2)
    out += [
        (f"gpu{k} all GPUs, data parallel (JAX)", case("gpu", k, "fp32")),
        (f"gpu{k} all GPUs, loss scaling (JAX)", case("gpu", k, "mixed_float16")),
    ]
    return out


def torch_paths(machine: Machine) -> list[tuple[str, Case]]:
    """The torch paths: Keras on torch eager and compiled, DDP over gloo and NCCL, the TF32 switches; native torch."""
    n = machine.gpu_count("torch")

    def case(
        kind: str, count: int, precision: str, compiled: bool = False, virtual: bool = False, be: str = "torch"
    ) -> Case:
        return _case(kind, count, precision, compiled, virtual, be)

    out = [(f"cpu {p} (Keras on torch)", case("cpu", 1, p)) for p in ("fp32", "mixed_bfloat16")]
    out += [
        ("cpu torch.compile (Keras on torch)", case("cpu", 1, "fp32", True)),
        ("cpu2-virtual DDP over gloo (Keras on torch)", case("cpu", 2, "fp32", virtual=True)),
        ("cpu fp32 (native torch)", case("cpu", 1, "fp32", be="torch-native")),
    ]
    out += [(f"gpu1 {p} (Keras on torch)", case("gpu", 1, p)) for p in PRECISIONS]
    out += [
        ("gpu1 torch.compile mixed_bfloat16 (native torch)", case("gpu", 1, "mixed_bfloat16", True, be="torch-native")),
        (f"gpu{max(n, 2)} all GPUs, DDP over NCCL (Keras on torch)", case("gpu", max(n, 2), "fp32")),
    ]
    return out


def run_paths(machine: Machine, results_dir: Path, progress: Callable[..., Any] | None = None) -> list[Row]:
    """Run every supported path through the runner and its workers; one Row per path."""
    named = paths(machine)
    opts = planning.RunOptions(
        repeats=0,  # a path check: no second workers
        profile="smoke",
        workloads=("mlp",),
        modes=("train",),
        devices=("cpu",),
        backend=backend_of(machine),
    )
    run = runner.Run.new(opts, machine, results_dir, ["devices", "--check"], progress=progress)
    run.plan = [(c, planning.support(c, machine)) for _, c in named]
    recs = {r.id: r.info for r in storage.case_records(storage.load(run.execute()))}
    rows = []
    for name, case in named:
        e = recs[case.id]
        if e["status"] == "ok":
            how = f", {e.get('all_reduce')}" if case.device_count > 1 else ""
            rows.append(Row(name, "pass", f"{e['samples_per_s']:.4g} samples/s{how}"))
        elif e["status"] == "unsupported":
            rows.append(Row(name, "not available", e["reason"]))
        else:
            rows.append(Row(name, "FAIL", f"{e['status']}: {e['reason']}"))
    return rows


@contextlib.contextmanager
def gpu_load(seconds: float, uuid: str) -> Iterator[None]:
    """A child process running TensorFlow matmuls on the GPU ``uuid`` (its only GPU:0) while the window is open."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([*LOAD, str(seconds + 30)], stdout=log, stderr=subprocess.STDOUT, env=load_env(uuid))
        try:
            time.sleep(min(15.0, seconds))  # TensorFlow starts and the clocks ramp up
            if proc.poll() is not None:
                log.seek(0)
                last = (log.read().decode(errors="replace").strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"the TensorFlow load exited early: {last[-200:]}")
            yield
        finally:
            proc.kill()
            proc.wait()


def nvml_row(
    source: NvidiaGPUs | EmptyGPUs,
    load: Callable[[], contextlib.AbstractContextManager[Any]],
    seconds: float = WINDOW_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Row:
    """A ``seconds`` NVML window under ``load``: counter energy vs integrated instant power."""
    name = f"NVML {seconds:.0f} s window under load"
    if isinstance(source, EmptyGPUs):
        return Row(name, "not available", source.reason)
    try:
        with load():
            m = sampled_window(source, seconds, clock, sleep)
    except Exception as e:  # the load failed to start: the path is broken
        return Row(name, "FAIL", f"{type(e).__name__}: {e}")
    a = energy_check.agreement(m.gpus)
    return Row(name, "pass" if a.ok(AGREEMENT) else "FAIL", a.describe())


def reference_cases(gpu_name: str, backend: str) -> list[Case]:
    """One-GPU ResNet-50 cases at the configurations published for exactly this GPU (JAX: the XLA ones)."""
    out: list[Case] = []
    for p in published.for_gpu(gpu_name):
        if p.model != REFERENCE_MODEL or (backend == "jax" and not p.xla):
            continue
        c = Case("cnn", p.mode, "gpu", 1, False, p.precision, p.xla, p.batch, backend=backend)
        if c not in out:
            out.append(c)
    return out


REFERENCE_MODEL = "resnet50_v1.5"  # the cnn at the standard profile's size
REFERENCE_PROFILE = "standard"
REFERENCE_ROW = "published figures"


def run_reference(machine: Machine, results_dir: Path, progress: Callable[..., Any] | None = None) -> list[Row]:
    """Run the published configurations of this machine's GPU; one Row per case, measured / published.

    Only the extremes are verdicts (below 0.5x: "check this machine", which fails the check; above
    1.2x: the configurations differ); the results file stays in ``results_dir`` for ``report``.
    """
    be = backend_of(machine)
    if not machine.gpu_count(be):
        return [Row(REFERENCE_ROW, "not available", machine.no_gpu_reason(be))]
    name = machine.gpu_name(be)
    cases = reference_cases(name, be)
    if not cases:
        why = "no published figure for this GPU" if not published.for_gpu(name) else f"none {be} can match"
        return [Row(REFERENCE_ROW, "not available", f"{why} ({name})")]
    opts = planning.RunOptions(
        repeats=0,  # a path check: no second workers
        profile=REFERENCE_PROFILE,
        workloads=("cnn",),
        modes=("train", "infer"),
        devices=("gpu:1",),
        backend=be,
    )
    run = runner.Run.new(opts, machine, results_dir, ["devices", "--check", "--reference"], progress=progress)
    run.plan = [(c, planning.support(c, machine)) for c in cases]
    path = run.execute()
    doc = storage.load(path)
    rows = []
    for rec in storage.case_records(doc):  # what did not run, and why
        if not rec.ok:
            bad = "not available" if rec.status == "unsupported" else "FAIL"
            rows.append(Row(f"{REFERENCE_ROW}: {rec.id}", bad, f"{rec.status}: {rec.info.get('reason')}"))
    for c in reference.comparisons(doc, analysis.load_run(doc).table):  # the report's own comparison
        low = c.verdict == "check this machine"
        said = f": {c.verdict.upper()}" + (f" ({c.machine})" if low else "") if c.verdict else ""
        rows.append(
            Row(f"{REFERENCE_ROW}: {reference.config(c.row)}", "FAIL" if low else "pass",
                f"{c.measured:.4g} img/s, {c.sentence()}{said}")
        )  # fmt: skip
    return [*rows, Row(REFERENCE_ROW, "results", f"{path} (accelbench report {path})")]


def check(
    machine: Machine,
    results_dir: Path,
    progress: Callable[..., Any] | None = None,
    reference_dir: Path | None = None,
) -> list[Row]:
    """Every path, then the NVML window (on the first GPU TensorFlow uses).

    With ``reference_dir``, also the published configurations of the GPU (their results file kept there).
    """
    rows = run_paths(machine, results_dir, progress)
    if reference_dir is not None:
        rows += run_reference(machine, reference_dir, progress)
    if not machine.tf:  # a JAX-only or torch-only install: said, not failed
        rows.insert(
            0, Row("TensorFlow", "not available", f"not installed; the paths below ran on {NAMES[backend_of(machine)]}")
        )
    be = backend_of(machine)
    if not machine.gpu_count(be):
        rows.append(Row(f"NVML {WINDOW_S:.0f} s window under load", "not available", machine.no_gpu_reason(be)))
        return rows
    plan = machine.gpu_plan("gpu", 1, False) if be == "tensorflow" else machine.jax_gpu_plan("gpu", 1)
    buses = plan["pci_bus_ids"]
    src = open_gpus_by_bus_id(buses) if buses else EmptyGPUs(f"{be} reported no PCI bus id for GPU 0")
    # the load runs on the very GPU sampled (gpu-review-2 finding 7: it ran on CUDA's device 0,
    # FASTEST_FIRST by default, while the window sampled the first GPU in bus order)
    uuid = src.gpus[0].uuid if isinstance(src, NvidiaGPUs) and src.gpus else ""
    rows.append(nvml_row(src, lambda: gpu_load(WINDOW_S, uuid)))
    return rows


def main() -> int:
    """The load: ``python -m bench.check SECONDS`` runs fp32 matmuls on GPU:0 (TensorFlow, else JAX, else torch)."""
    seconds = float(sys.argv[1])
    try:
        import tensorflow as tf
    except ImportError:  # a JAX-only or torch-only install
        try:
            import jax
        except ImportError:
            return _torch_load(seconds)

        x = jax.device_put(jax.random.normal(jax.random.PRNGKey(0), (8192, 8192)), jax.devices("gpu")[0])
        mm = jax.jit(lambda a: a @ a)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(10):
                y = mm(x)
            y.block_until_ready()  # one sync per 10 matmuls
        return 0
    with tf.device("/GPU:0"):
        a = tf.random.normal((8192, 8192))
        b = tf.random.normal((8192, 8192))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(10):
                c = tf.matmul(a, b)
            float(c[0, 0])  # one sync per 10 matmuls
    return 0


def _torch_load(seconds: float) -> int:
    import torch

    a = torch.randn(8192, 8192, device="cuda")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):
            c = a @ a
        torch.cuda.synchronize()  # one sync per 10 matmuls
    del c
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
