"""The persistent compile cache of JAX workers: where it lives, what keys its folder, how a worker uses it.

JAX keeps compiled executables (and, on GPUs, XLA's per-fusion autotuning results beside them)
in ``jax_compilation_cache_dir``; its own key covers the program, jaxlib, the platform and the
compile options (``shared/design/time-to-answer.md`` section 2.1). The folder under the user's
cache is keyed again here by what must never be mixed: jax, jaxlib and Keras versions, the
device (GPU name, driver and CUDA version; or the CPU model and its instruction-set flags, since
XLA compiles for the host's features) and ``XLA_FLAGS``. Workers cache every program
(``min_compile_time 0``: Keras' many small jitted programs stay under JAX's 1 s default
otherwise). Tenant cases never write to it: an autotune run under contention would pin a slow
kernel for every later run.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import UserError

OFF = "off"
AUTO = "auto"


def default_root(env: Mapping[str, str] | None = None) -> Path:
    """``$ACCELBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/accelbench``, else ``~/.cache/accelbench``; ``/compile`` below it."""
    env = os.environ if env is None else env
    if env.get("ACCELBENCH_CACHE_DIR"):
        return Path(env["ACCELBENCH_CACHE_DIR"]) / "compile"
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "accelbench" / "compile"


def root_of(option: str) -> Path | None:
    """``--compile-cache``: ``auto`` (the user's cache folder), ``off`` (None), or a folder; UserError if unusable."""
    if option == OFF:
        return None
    root = default_root() if option == AUTO else Path(option).expanduser()
    if root.exists() and not root.is_dir():
        raise UserError(f"--compile-cache {option}: {root} exists and is not a folder")
    return root


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


@dataclass(frozen=True)
class Key:
    """What one cache folder is for: never shared between stacks or devices."""

    backend: str
    versions: tuple[tuple[str, str], ...]
    device: str  # GPU name, driver and CUDA; or the CPU model
    detail: str  # what else goes into the hash only: CPU flags, XLA_FLAGS

    def folder(self) -> str:
        """``jax-0.10.2-jaxlib-0.10.2-keras-3.15.1-NVIDIA-H200-<hash>``: readable, and unique by the hash."""
        text = "-".join(f"{n}-{v}" for n, v in self.versions) + f"-{self.device}"
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:120]
        digest = hashlib.sha256(repr(self).encode()).hexdigest()[:12]
        return f"{slug}-{digest}"


def key_for(
    device_kind: str,
    gpu_name: str = "",
    driver: str | None = None,
    cuda: str | None = None,
    cpu_model: str = "",
    cpu_flags: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> Key:
    """The JAX worker's key on this machine (versions read from the installed packages, never imported)."""
    env = os.environ if env is None else env
    versions = (("jax", _version("jax")), ("jaxlib", _version("jaxlib")), ("keras", _version("keras")))
    if device_kind == "gpu":
        device = f"{gpu_name or 'gpu'} driver {driver or '?'} cuda {cuda or '?'}"
        detail = ""
    else:
        device = f"cpu {cpu_model or '?'}"
        detail = " ".join(sorted(cpu_flags))
    return Key("jax", versions, device, f"{detail} XLA_FLAGS={env.get('XLA_FLAGS', '')}")


def folder_for(option: str, device_kind: str, machine: Any) -> Path | None:
    """The cache folder of a JAX worker on ``device_kind`` of ``machine`` (a ``bench.devices.Machine``); None when off."""
    root = root_of(option)
    if root is None:
        return None
    key = key_for(
        device_kind,
        gpu_name=machine.gpu_name("jax"),
        driver=machine.nvml.driver_version,
        cuda=machine.nvml.cuda_driver_version,
        cpu_model=machine.cpu.model,
        cpu_flags=tuple(machine.cpu.flags),
    )
    return root / key.folder()


def jax_env(folder: Path | None) -> dict[str, str]:
    """A JAX worker's variables: the cache folder and every program cached; ``{"JAX_ENABLE_COMPILATION_CACHE": "false"}`` when off."""
    if folder is None:
        return {"JAX_ENABLE_COMPILATION_CACHE": "false"}
    return {
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


class Events:
    """Counts JAX's compilation-cache events (``jax.monitoring``) since the last :meth:`reset`.

    A hit reports the compile time it saved (the entry's stored compile time, whole seconds,
    less the load) and the load time; a miss is counted when the new executable is written.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start counting afresh (at the start of a case's build)."""
        self.hits = self.misses = 0
        self.saved_s = self.load_s = 0.0

    def event(self, name: str, **_: object) -> None:
        """A ``jax.monitoring`` event listener."""
        if name == "/jax/compilation_cache/cache_hits":
            self.hits += 1
        elif name == "/jax/compilation_cache/cache_misses":
            self.misses += 1

    def duration(self, name: str, secs: float, **_: object) -> None:
        """A ``jax.monitoring`` duration listener."""
        if name == "/jax/compilation_cache/compile_time_saved_sec":
            self.saved_s += secs
        elif name == "/jax/compilation_cache/cache_retrieval_time_sec":
            self.load_s += secs

    def figures(self, enabled: bool, compile_s: float | None) -> dict:
        """``compile_cache`` (off, miss, hit, partial), ``cold_compile_s`` and the hit's load time.

        ``cold_compile_s``: the compile as it was without the cache: the measured compile where
        it compiled; on a hit the measured (trace, lower, load) less the load plus the compile
        time the entry stored (JAX truncates it to whole seconds, so None where it is under 1 s).
        """
        if not enabled:
            return {"compile_cache": OFF, "cold_compile_s": compile_s}
        if self.hits and self.misses:
            state = "partial"
        elif self.hits:
            state = "hit"
        elif self.misses:
            state = "miss"
        else:
            state = "not used"
        cold = compile_s
        if self.hits:  # the entry's stored compile time, truncated to whole seconds: none under 1 s
            stored = self.saved_s + self.load_s
            cold = compile_s - self.load_s + stored if compile_s is not None and stored >= 1.0 else None
        return {
            "compile_cache": state,
            "compile_cache_hits": self.hits,
            "compile_cache_misses": self.misses,
            "compile_cache_load_s": self.load_s if self.hits else None,
            "cold_compile_s": cold,
        }
