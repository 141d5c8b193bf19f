"""The probe cache: a framework probe's answer read back only while nothing it depends on changed."""

import json
import os
import sys

import pytest

from bench import devices, probe_cache
from bench.errors import UserError

CHILD = """
import json, os, sys
counter = os.environ["PROBE_COUNTER"]
n = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
open(counter, "w").write(str(n))
if os.environ.get("PROBE_FAIL"):
    sys.exit("no framework here")
json.dump({"gpus": [], "framework": "1.0", "n": n}, open(sys.argv[1], "w"))
"""
NVML = {"gpus": [], "driver_version": None, "cuda_driver_version": None, "reason": "NVML Shared Library Not Found"}


@pytest.fixture
def child(tmp_path, monkeypatch):
    """A real child probe (``python -m fakeprobe OUT``) that counts its runs; the cache in tmp_path."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "fakeprobe.py").write_text(CHILD)
    monkeypatch.syspath_prepend(str(mods))  # the parent finds its source (part of the key)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(mods), *sys.path]))
    monkeypatch.setenv("PROBE_COUNTER", str(tmp_path / "runs"))
    monkeypatch.setenv("ACCELBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ACCELBENCH_PROBE_CACHE", raising=False)

    def probe(view=NVML):
        return devices._probe("fakeprobe", "Fake", [], 60, view)

    def runs():
        return int((tmp_path / "runs").read_text())

    return probe, runs, mods


def test_an_unchanged_machine_reads_the_answer_back_and_says_when_it_was_probed(child):
    probe, runs, _ = child
    first = probe()
    assert first == {"gpus": [], "framework": "1.0", "n": 1} and runs() == 1
    again = probe()
    assert runs() == 1 and again["n"] == 1 and isinstance(again["probed_at"], float)
    machine = devices.Machine(cpu=devices.cpu_info(), nvml=devices.nvml.discover(), jax=again)
    (at,) = machine.probed_at().values()
    assert machine.to_dict()["probes_read_back"] == {"jax": at}
    assert machine.read_back.startswith(f"unchanged since the last probe, read back: jax (probed {at})")
    assert "ACCELBENCH_PROBE_CACHE=off" in machine.read_back
    fresh = devices.Machine(cpu=devices.cpu_info(), nvml=devices.nvml.discover(), jax=first)
    assert fresh.read_back == "" and fresh.to_dict()["probes_read_back"] == {}


@pytest.mark.parametrize(
    "change",
    ["CUDA_VISIBLE_DEVICES=1", "XLA_FLAGS=--xla_gpu_autotune_level=0", "OMP_NUM_THREADS=1", "nvml", "installed"],
)
def test_what_the_answer_depends_on_changed_and_it_is_probed_again(child, monkeypatch, change):
    probe, runs, mods = child
    probe()
    if change == "nvml":  # a GPU appeared, a driver changed: NVML's view is part of the key
        assert probe({**NVML, "driver_version": "580.1", "reason": None})["n"] == 2
        return
    if change == "installed":  # pip wrote into a folder on the import path
        st = os.stat(mods)
        os.utime(mods, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    else:
        name, value = change.split("=", 1)
        monkeypatch.setenv(name, value)
    assert probe()["n"] == 2 and runs() == 2
    assert probe()["n"] == 2 and runs() == 2  # and the new answer is kept under the new key


def test_a_run_writing_into_the_working_folder_keeps_the_answer_a_module_there_does_not(child, monkeypatch, tmp_path):
    """``python -m bench`` has the working folder on its path; a run's own files there change nothing imported."""
    probe, runs, _ = child
    work = tmp_path / "checkout"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend("")  # as python -m puts it
    probe()
    (work / ".benchmarks").mkdir()  # what the first run of a checkout leaves (pytest-benchmark's storage)
    (work / "results").mkdir()
    assert "probed_at" in probe() and runs() == 1
    (work / "tensorflow.py").write_text("")  # a module that shadows a framework: probed again
    assert probe()["n"] == 2 and runs() == 2


def test_a_variable_no_framework_reads_keeps_the_answer(child, monkeypatch):
    probe, runs, _ = child
    probe()
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "elsewhere")
    monkeypatch.setenv("ACCELBENCH_TESTBED", "rehearsal")
    assert "probed_at" in probe() and runs() == 1


def test_a_failed_probe_is_never_kept_and_off_asks_every_time(child, monkeypatch):
    probe, runs, _ = child
    monkeypatch.setenv("PROBE_FAIL", "1")  # not part of the key: the same key as the good probe's below
    with pytest.raises(UserError, match="Fake failed to start: no framework here"):
        probe()
    monkeypatch.delenv("PROBE_FAIL")
    assert probe()["n"] == 2 and runs() == 2  # the failure left nothing to read back
    monkeypatch.setenv("ACCELBENCH_PROBE_CACHE", "off")
    assert probe()["n"] == 3 and probe()["n"] == 4
    assert "probed_at" not in probe(view=None)  # devices: no view, no cache


def test_an_old_or_damaged_answer_is_probed_again(child, tmp_path):
    probe, runs, _ = child
    calls = []

    def run():
        calls.append(1)
        return {"n": len(calls)}

    folder = tmp_path / "own"
    args = ("fakeprobe", [], NVML, run, folder)
    assert probe_cache.cached(*args, now=lambda: 1000.0) == ({"n": 1}, None)
    assert probe_cache.cached(*args, now=lambda: 1000.0 + probe_cache.MAX_AGE_S) == ({"n": 1}, 1000.0)
    assert probe_cache.cached(*args, now=lambda: 1001.0 + probe_cache.MAX_AGE_S) == ({"n": 2}, None)
    (kept,) = folder.glob("fakeprobe-*.json")
    kept.write_text('{"probed_at": 5')  # a cut-off write by some other tool
    assert probe_cache.cached(*args, now=lambda: 10.0) == ({"n": 3}, None)
    assert json.loads(kept.read_text()) == {"probed_at": 10.0, "answer": {"n": 3}}
    assert not list(folder.glob(".probe-*"))  # no temporary file left beside it
