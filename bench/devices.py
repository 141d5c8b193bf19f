"""What the machine has: the CPU, NVIDIA GPUs (NVML) and what TensorFlow sees (in a child)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench import probe_cache
from bench.backends import tf_cpu_allocator
from bench.capability import CPU_FLAGS_OF_INTEREST
from bench.cases import TORCH_BACKENDS
from bench.errors import UserError
from bench.telemetry import gpus as nvml
from bench.telemetry.host import Rapl


@dataclass(frozen=True)
class CPUInfo:
    """The host CPU; ``flags`` holds the ones that decide precision support."""

    model: str
    logical_cores: int
    physical_cores: int | None
    affinity_cores: int
    flags: tuple[str, ...]

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {
            "model": self.model,
            "logical_cores": self.logical_cores,
            "physical_cores": self.physical_cores,
            "affinity_cores": self.affinity_cores,
            "flags": list(self.flags),
        }


def cpu_info(cpuinfo: str | Path = "/proc/cpuinfo") -> CPUInfo:
    """Read the CPU model and the flags of interest."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name":
                model = value.strip()
            elif key == "flags":
                flags.update(value.split())
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 1
    return CPUInfo(
        model=model,
        logical_cores=os.cpu_count() or 1,
        physical_cores=psutil.cpu_count(logical=False),
        affinity_cores=affinity,
        flags=tuple(f for f in CPU_FLAGS_OF_INTEREST if f in flags),
    )


@dataclass
class Machine:
    """Everything the planner needs to decide what can run, and the results' machine block."""

    cpu: CPUInfo
    nvml: nvml.Discovery
    tf: dict = field(default_factory=dict)
    jax: dict = field(default_factory=dict)  # bench.jaxprobe's answer; empty where JAX was not asked for
    torch: dict = field(default_factory=dict)  # bench.torchprobe's (both torch backends); empty where not asked for

    @property
    def tf_gpu_count(self) -> int:
        """GPUs TensorFlow sees."""
        return self.gpu_count("tensorflow")

    def _view(self, backend: str) -> dict:
        return self.jax if backend == "jax" else self.torch if backend in TORCH_BACKENDS else self.tf

    def gpu_count(self, backend: str = "tensorflow") -> int:
        """GPUs ``backend`` sees."""
        return len(self._view(backend).get("gpus", []))

    def gpu_compute_capability(self, count: int, backend: str = "tensorflow") -> tuple[int, int] | None:
        """The lowest compute capability among the first ``count`` GPUs of ``backend``."""
        gpus = self._view(backend).get("gpus", [])
        ccs = [tuple(g["compute_capability"]) for g in gpus[:count] if g.get("compute_capability")]
        return min(ccs) if ccs and len(ccs) == min(count, len(gpus)) else None  # type: ignore[return-value]

    def jax_gpu_plan(self, kind: str, count: int, env: Mapping[str, str] | None = None) -> dict:
        """The GPUs a JAX worker uses: the first ``count`` the user's ``CUDA_VISIBLE_DEVICES`` allows.

        Without the variable that is PCI bus order (JAX's order under CUDA_DEVICE_ORDER=PCI_BUS_ID);
        with it, the GPUs it names (indices in bus order, UUIDs), in its order, as the JAX probe
        saw them. MIG-enabled GPUs are skipped (their instances are not whole GPUs). The worker
        names the GPUs to CUDA by NVML UUID, so no ordinal can be misread.
        """
        if kind != "gpu":
            return {"cuda_ordinals": [], "pci_bus_ids": [], "uuids": [], "memory_total_bytes": None}
        visible = nvml.visible_gpus(sorted(self.nvml.gpus, key=lambda g: g.pci_bus_id), env)
        used = [] if isinstance(visible, str) else [g for g in visible if not g.mig][:count]
        return {
            "cuda_ordinals": list(range(len(used))),
            "pci_bus_ids": [g.pci_bus_id for g in used],
            "uuids": [g.uuid for g in used],
            "memory_total_bytes": used[0].memory_total_bytes if used else None,
        }

    def gpu_plan(self, kind: str, count: int, virtual: bool) -> dict:
        """Which GPUs a device configuration uses, for the worker: CUDA ordinals, bus ids, memory.

        ``cuda_ordinals`` index ``list_physical_devices("GPU")`` (CUDA's order), so a GPU that
        TensorFlow ignores is never picked; ``memory_total_bytes`` is NVML's total of the
        first GPU (what a virtual split divides), matched by PCI bus id.
        """
        if kind != "gpu":
            return {"cuda_ordinals": [], "pci_bus_ids": [], "memory_total_bytes": None}
        used = self.tf.get("gpus", [])[: 1 if virtual else count]
        ordinals = [g.get("cuda_ordinal") for g in used]
        buses = [g.get("pci_bus_id") for g in used]
        by_bus = {g.pci_bus_id: g for g in self.nvml.gpus}
        first = by_bus.get(nvml.normalize_bus_id(buses[0])) if buses and buses[0] else None
        return {
            "cuda_ordinals": ordinals if None not in ordinals else list(range(len(used))),
            "pci_bus_ids": buses if None not in buses else [],
            "memory_total_bytes": first.memory_total_bytes if first else None,
        }

    def gpu_name(self, backend: str = "tensorflow") -> str:
        """Name of the first GPU ``backend`` sees."""
        g = self._view(backend).get("gpus", [])
        return g[0]["name"] if g else ""

    def no_gpu_reason(self, backend: str = "tensorflow") -> str:
        """One line: why ``backend`` has no GPU here."""
        seen = len(self.nvml.gpus)
        if backend in TORCH_BACKENDS:
            if self.gpu_count(backend):
                return ""
            why = self.torch.get("gpu_reason") or "torch not probed"
            if seen:
                return f"NVML sees {seen} GPU(s) but torch found none ({why}); install a CUDA build of torch"
            return f"no NVIDIA GPU visible to torch ({why})"
        if backend == "jax":
            if self.gpu_count("jax"):
                return ""
            why = self.jax.get("gpu_reason") or "no GPU platform"
            if seen:
                return f"NVML sees {seen} GPU(s) but JAX found none ({why}); pip install 'accelbench[jax-cuda]'"
            return f"no NVIDIA GPU visible to JAX ({why})"
        if self.tf_gpu_count:
            return ""
        if seen and not self.tf.get("built_with_cuda", False):
            return f"NVML sees {seen} GPU(s) but this TensorFlow build has no CUDA support (pip install 'accelbench[cuda]')"
        if seen:
            return (
                f"NVML sees {seen} GPU(s) but TensorFlow found none: CUDA libraries not loadable "
                "(see the TensorFlow log of 'accelbench devices'; without accelbench[cuda] installed: "
                "pip install 'accelbench[cuda]')"
            )
        if self.nvml.reason == "NVIDIA driver not loaded":
            return "no NVIDIA GPU visible to TensorFlow: the NVIDIA driver is not loaded"
        if Path("/dev/nvidia0").exists():
            return f"no NVIDIA GPU visible to TensorFlow: /dev/nvidia0 exists but NVML says {self.nvml.reason}"
        return "no NVIDIA GPU on this machine (no driver, NVML: " + (self.nvml.reason or "0 GPUs") + ")"

    def unused_gpu_notes(self, backends: tuple[str, ...] | list[str]) -> list[str]:
        """For each of ``backends`` that sees no GPU where NVML sees one: why (one line each)."""
        if not self.nvml.gpus:
            return []
        return [why for be in backends if (why := self.no_gpu_reason(be))]

    def probed_at(self) -> dict[str, str]:
        """Each framework whose view was read back from the probe cache: when it was probed (UTC)."""
        views = (("tensorflow", self.tf), ("jax", self.jax), ("torch", self.torch))
        return {
            be: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(v["probed_at"])))
            for be, v in views
            if v.get("probed_at")
        }

    @property
    def read_back(self) -> str:
        """One line where a framework's view came from the probe cache, else ``""``."""
        at = self.probed_at()
        if not at:
            return ""
        names = ", ".join(f"{be} (probed {t})" for be, t in at.items())
        return f"unchanged since the last probe, read back: {names}; ACCELBENCH_PROBE_CACHE=off asks afresh"

    def to_dict(self) -> dict:
        """The accelbench part of the results' machine_info."""
        return {
            "cpu": self.cpu.to_dict(),
            "gpus": [g.to_dict() for g in self.nvml.gpus],
            "nvml": {k: v for k, v in self.nvml.to_dict().items() if k != "gpus"},
            "driver_version": self.nvml.driver_version,
            "cuda_driver_version": self.nvml.cuda_driver_version,
            "tensorflow": self.tf.get("tensorflow"),
            "keras": self.tf.get("keras"),
            "tf_cpu_allocator": tf_cpu_allocator() if self.tf.get("tensorflow") else None,
            "cuda_build": self.tf.get("cuda_build"),
            "cudnn_build": self.tf.get("cudnn_build"),
            "tf_gpus": self.tf.get("gpus", []),
            "tf_ignored_gpus": self.tf.get("ignored_gpus", 0),
            "cuda_device_order": self.tf.get("cuda_device_order"),
            "no_gpu_reason": self.no_gpu_reason() if self.tf else None,
            "rapl": Rapl().reason or "available",
            "probes_read_back": self.probed_at(),
            **(
                {
                    "jax": self.jax.get("jax"),
                    "jaxlib": self.jax.get("jaxlib"),
                    "jax_keras": self.jax.get("keras"),
                    "jax_gpus": self.jax.get("gpus", []),
                    "jax_no_gpu_reason": self.no_gpu_reason("jax"),
                }
                if self.jax
                else {}
            ),
            **(
                {
                    "torch": self.torch.get("torch"),
                    "torch_cuda_build": self.torch.get("cuda_build"),
                    "torch_keras": self.torch.get("keras"),
                    "torch_gpus": self.torch.get("gpus", []),
                    "torch_no_gpu_reason": self.no_gpu_reason("torch"),
                }
                if self.torch
                else {}
            ),
        }


def _child_probe(module: str, what: str, args: list[str], timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "probe.json"
        cmd = [sys.executable, "-m", module, str(out), *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise UserError(f"{what} did not start within {timeout_s:.0f} s") from None
        if proc.returncode != 0 or not out.exists():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"{what} failed to start: {last}")
        return json.loads(out.read_text())


def _probe(module: str, what: str, args: list[str], timeout_s: float, nvml_view: dict | None) -> dict:
    """The child's answer; with ``nvml_view`` (NVML's view, part of the key) kept and read back (bench.probe_cache).

    An answer read back says when it was probed (``probed_at``, epoch seconds).
    """
    if nvml_view is None or not probe_cache.enabled():
        return _child_probe(module, what, args, timeout_s)
    answer, at = probe_cache.cached(module, args, nvml_view, lambda: _child_probe(module, what, args, timeout_s))
    return {**answer, "probed_at": at} if at is not None else answer


def tf_probe(check: bool = False, timeout_s: float = 300.0, nvml_view: dict | None = None) -> dict:
    """Ask a child Python process what TensorFlow sees (and with ``check`` where it computes; never kept)."""
    return _probe("bench.tfprobe", "TensorFlow", ["--check"] if check else [], timeout_s, None if check else nvml_view)


def jax_probe(timeout_s: float = 300.0, nvml_view: dict | None = None) -> dict:
    """Ask a child Python process what JAX sees (versions, GPUs)."""
    return _probe("bench.jaxprobe", "JAX", [], timeout_s, nvml_view)


def torch_probe(timeout_s: float = 300.0, nvml_view: dict | None = None) -> dict:
    """Ask a child Python process what torch sees (versions, CUDA build, GPUs)."""
    return _probe("bench.torchprobe", "torch", [], timeout_s, nvml_view)


def discover(check: bool = False, backends: tuple[str, ...] = ("tensorflow",), keep: bool = False) -> Machine:
    """CPU, NVML and each backend's view, without initialising a framework in this process.

    With ``keep`` (``run``, ``maxbatch``) a probe's answer is read back from the cache where nothing
    it depends on changed (:mod:`bench.probe_cache`); ``devices`` always asks afresh.
    """
    found = nvml.discover()
    view = found.to_dict() if keep else None
    return Machine(
        cpu=cpu_info(),
        nvml=found,
        tf=tf_probe(check, nvml_view=view) if "tensorflow" in backends else {},
        jax=jax_probe(nvml_view=view) if "jax" in backends else {},
        torch=torch_probe(nvml_view=view) if set(TORCH_BACKENDS) & set(backends) else {},
    )
