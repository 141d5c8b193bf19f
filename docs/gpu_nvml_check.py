"""NVML through accelbench's own code on a GPU machine without TensorFlow (issue 7, item 5).

    python docs/gpu_nvml_check.py OUT.json [--seconds 10]

Prepared for the H200 machine (PyTorch, JAX and nvidia-ml-py, no TensorFlow): runs discovery,
idle power (the 1 s window of old and today's settle + 5 s), the energy counter's step size
(polled at ~1 kHz under load), and a 10 s window under a PyTorch (else JAX) matmul load in a child
process, comparing counter energy with integrated instant power; P-states and clock events are
recorded. Everything goes to OUT.json and a summary to stdout. Never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.telemetry import energy_check, gpus, nvml  # noqa: E402  (needs nvidia-ml-py only, not psutil)
from bench.telemetry.base import HostReading  # noqa: E402
from bench.telemetry.idle import idle_power  # noqa: E402


class NoHost:
    """The window's host source on a GPU box without the project's dependencies: nothing measured."""

    def begin(self, t: float) -> None:
        """Nothing to open."""

    def sample(self, t: float) -> None:
        """Nothing to sample."""

    def end(self, t: float) -> HostReading:
        """No host figures."""
        return HostReading(0.0, None, None, None, None, None, "not measured here", "none")

LOAD = r"""
import sys, time
seconds = float(sys.argv[1])
try:
    import torch
    a = torch.randn(8192, 8192, device="cuda"); b = torch.randn(8192, 8192, device="cuda")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):
            c = a @ b
        torch.cuda.synchronize()
    print("load: torch", flush=True)
except ImportError:
    import jax, jax.numpy as jnp
    a = jax.random.normal(jax.random.PRNGKey(0), (8192, 8192)); b = a.T
    f = jax.jit(lambda a, b: a @ b)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):
            c = f(a, b)
        c.block_until_ready()
    print("load: jax", flush=True)
"""


@contextlib.contextmanager
def load(seconds: float, uuid: str) -> Iterator[subprocess.Popen]:
    """A child process keeping the GPU ``uuid`` (the one sampled) busy with matmuls; started, ramped up, killed after."""
    proc = subprocess.Popen([sys.executable, "-c", LOAD, str(seconds + 60)], env=energy_check.load_env(uuid))
    try:
        time.sleep(8.0)  # framework start-up and clock ramp
        if proc.poll() is not None:
            raise RuntimeError(f"the load exited early with code {proc.returncode}")
        yield proc
    finally:
        proc.kill()
        proc.wait()


def counter_steps(handle, seconds: float = 2.0) -> dict:
    """Poll the energy counter as fast as possible; how often its value changes."""
    changes, last, t_last, n = [], None, None, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        v = nvml.call("nvmlDeviceGetTotalEnergyConsumption", handle)
        t = time.monotonic()
        n += 1
        if last is not None and v != last:
            if t_last is not None:
                changes.append(t - t_last)
            t_last = t
        elif last is None:
            t_last = t
        last = v
    changes.sort()
    return {
        "polls": n,
        "changes": len(changes),
        "step_ms_median": 1000 * changes[len(changes) // 2] if changes else None,
        "step_ms_min": 1000 * changes[0] if changes else None,
        "step_ms_max": 1000 * changes[-1] if changes else None,
    }


def main() -> int:
    """Run every check and write OUT.json."""
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--seconds", type=float, default=10.0)
    a = p.parse_args()
    out: dict = {"binding": nvml.binding_version(), "binding_problem": nvml.binding_problem()}
    found = gpus.discover()
    out["discovery"] = found.to_dict()
    if found.reason or not found.gpus:
        print(f"no GPU to check: {found.reason or 'NVML lists none'}")
        Path(a.out).write_text(json.dumps(out, indent=1))
        return 1
    g0 = found.gpus[0]
    out["idle_1s_counter_w"] = _one_second_idle(g0)
    out["idle"] = {u: i.to_dict() for u, i in idle_power([g0]).items()}
    src = gpus.open_gpus_by_bus_id([g0.pci_bus_id])
    with load(a.seconds + 10, g0.uuid):
        out["counter_steps_under_load"] = counter_steps(src.handles[0]) if isinstance(src, gpus.NvidiaGPUs) else None
        m = energy_check.sampled_window(src, a.seconds, host=NoHost())  # as `accelbench devices --check` samples
    reading = m.gpus[0].to_dict() if m.gpus else None
    agree = energy_check.agreement(m.gpus)
    out["window"] = reading
    out["agreement"] = {
        "counter_j": agree.counter_j,
        "integrated_j": agree.integrated_j,
        "difference": agree.difference,
        "describe": agree.describe(),
        "check_result": "pass" if agree.ok(energy_check.AGREEMENT) else "FAIL",
    }
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    print(
        json.dumps({k: out[k] for k in ("binding", "idle", "idle_1s_counter_w", "counter_steps_under_load")}, indent=1)
    )
    print("window:", agree.describe())
    return 0


def _one_second_idle(g: gpus.GPUInfo) -> float | None:
    """The old method (a 1 s counter delta), for comparison with today's settle + 5 s."""
    src = gpus.NvidiaGPUs([g])
    t0 = time.monotonic()
    src.begin(t0)
    time.sleep(1.0)
    (r,) = src.end(time.monotonic())
    return r.power_mean_w


if __name__ == "__main__":
    raise SystemExit(main())
