import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_nvml import Clock, FakeGPU, FakeNVML  # noqa: E402

DATA = Path(__file__).parent / "data"


@pytest.fixture
def clock():
    return Clock(100.0)


@pytest.fixture
def fake_nvml(monkeypatch, clock):
    """Install a fake NVML with the given GPUs: ``fake_nvml([FakeGPU(...), ...])``."""

    def install(gpus=None, init_error=None, binding=None):
        fake = FakeNVML(gpus if gpus is not None else [FakeGPU()], clock, init_error, binding)
        monkeypatch.setattr("bench.telemetry.nvml.pynvml", fake)
        return fake

    return install
