"""The noxfile's choice of what ``nox -s bench`` installs (the choice only; nothing is installed here)."""

import functools
import importlib.util
import os
import stat
from pathlib import Path

import pytest

pytest.importorskip("nox")
ROOT = Path(__file__).parents[1]


@functools.cache
def _load():
    """The noxfile, executed once (each execution registers its sessions with nox again)."""
    spec = importlib.util.spec_from_file_location("accelbench_noxfile", ROOT / "noxfile.py")
    mod = importlib.util.module_from_spec(spec)
    cwd = os.getcwd()
    os.chdir(ROOT)  # the noxfile reads pyproject.toml from where nox runs
    try:
        spec.loader.exec_module(mod)
    finally:
        os.chdir(cwd)
    return mod


@pytest.fixture
def noxfile(monkeypatch, tmp_path):
    mod = _load()
    monkeypatch.setattr(mod, "_nvml_gpus", lambda: None)  # the driver's library: absent, as on this machine
    monkeypatch.setenv("PATH", str(tmp_path))  # only the fake nvidia-smi below, where a test writes one
    return mod


def fake_smi(folder: Path, listing: str, rc: int = 0) -> None:
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{listing}'\nexit {rc}\n")  # a shell builtin: PATH holds only this
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)


def test_a_machine_whose_driver_sees_a_gpu_gets_the_cuda_builds(noxfile, tmp_path):
    fake_smi(tmp_path, "GPU 0: NVIDIA H200 (UUID: GPU-81377960-3d2d-8417-7aa0-f895c5772e44)")
    extras, why = noxfile.bench_extras({})
    assert extras == "cuda,jax-cuda" and "1 NVIDIA GPU" in why


def test_nvml_is_asked_before_nvidia_smi(noxfile, monkeypatch):
    monkeypatch.setattr(noxfile, "_nvml_gpus", lambda: 2)
    assert noxfile.bench_extras({}) == (
        "cuda,jax-cuda",
        "NVML sees 2 NVIDIA GPU(s): the CUDA builds of TensorFlow and JAX",
    )


def test_without_a_gpu_it_installs_what_it_always_did(noxfile, tmp_path):
    assert noxfile.bench_extras({})[0] == "jax"  # no nvidia-smi at all
    fake_smi(tmp_path, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", rc=9)
    extras, why = noxfile.bench_extras({})
    assert extras == "jax" and "ACCELBENCH_EXTRAS=cuda,jax-cuda" in why


def test_the_users_choice_wins(noxfile, tmp_path):
    fake_smi(tmp_path, "GPU 0: NVIDIA H200 (UUID: GPU-1)")
    assert noxfile.bench_extras({"ACCELBENCH_EXTRAS": "jax"}) == ("jax", "as ACCELBENCH_EXTRAS asks")


class RecordingSession:
    """What a session function asks of nox, recorded: installs with their environment; runs do nothing."""

    posargs: list[str] = []

    def __init__(self):
        self.installs = []
        self.virtualenv = object()  # a virtual environment, not nox's pass-through one

    def install(self, *args, env=None, **kwargs):
        self.installs.append((args, env))

    def run(self, *args, **kwargs):
        pass

    def log(self, *args, **kwargs):
        pass


@pytest.mark.parametrize("name", ["bench", "report", "tests", "lint", "clients", "nightly", "site"])
def test_every_session_installs_compiled_to_bytecode(noxfile, monkeypatch, tmp_path, name):
    # uv leaves what it installs uncompiled unless asked; where PYTHONDONTWRITEBYTECODE is set every worker
    # would compile TensorFlow from source again as it imports it
    monkeypatch.setenv("ACCELBENCH_NIGHTLY_OUT", str(tmp_path / "nightly"))
    session = RecordingSession()
    getattr(noxfile, name)(session)
    assert session.installs and all(env == {"UV_COMPILE_BYTECODE": "1"} for _, env in session.installs)
