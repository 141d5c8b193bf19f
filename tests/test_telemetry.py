"""Telemetry against a fake NVML (hardware boundary only) and a fake sysfs tree."""

import threading
import time
from pathlib import Path

import pynvml
import pytest
from fake_nvml import FakeGPU

from bench.telemetry import HostMonitor, Window, derive, gpus, nvml, open_gpus
from bench.telemetry.host import Rapl
from bench.telemetry.idle import idle_power

A = FakeGPU(name="NVIDIA H100 80GB HBM3", uuid="GPU-aaaa1111", bus_id="00000000:3B:00.0", load_w=300.0)
B = FakeGPU(name="NVIDIA H100 80GB HBM3", uuid="GPU-bbbb2222", bus_id="00000000:1A:00.0", load_w=500.0)


class NullHost:
    def begin(self, t):
        pass

    def sample(self, t):
        pass

    def end(self, t):
        from bench.telemetry.base import HostReading

        return HostReading(t, None, None, None, None, None, "fake", "none")


def run_window(source, clock, seconds=10.0, step=0.1):
    w = Window(source, NullHost(), clock=clock, threaded=False)
    w.begin()
    for _ in range(int(round(seconds / step))):
        clock.advance(step)
        w.sample_now()
    return w.end()


def test_energy_from_counter_delta_is_exact(fake_nvml, clock):
    fake_nvml([FakeGPU(load_w=500.0)])
    src = open_gpus([0], env={})
    m = run_window(src, clock)
    (g,) = m.gpus
    assert g.energy_source == "counter"
    assert g.energy_j == pytest.approx(5000.0, abs=1e-3)
    assert m.power_mean_w == pytest.approx(500.0, abs=1e-4)
    assert g.power_max_w == pytest.approx(500.0)
    assert m.gpu_telemetry == "ok: 1 GPU(s) via NVML"


def test_mean_power_is_energy_over_time_not_mean_of_samples(fake_nvml, clock):
    # idle 70 W for 2 s, then 500 W for 8 s; only the two window-edge samples
    fake_nvml([FakeGPU(idle_w=70.0, load_w=500.0, load_at=clock() + 2.0)])
    src = open_gpus([0], env={})
    w = Window(src, NullHost(), clock=clock, threaded=False)
    w.begin()
    clock.advance(10.0)
    (g,) = w.end().gpus
    assert g.energy_j == pytest.approx(70 * 2 + 500 * 8, abs=1e-3)
    assert g.power_mean_w == pytest.approx(414.0, abs=1e-4)  # the mean of the two samples would be 285


def test_integrated_instant_power_when_no_energy_counter(fake_nvml, clock):
    fake_nvml([FakeGPU(load_w=250.0, unsupported={"energy"})])
    (g,) = run_window(open_gpus([0], env={}), clock).gpus
    assert g.energy_source == "integrated instant power"
    assert g.energy_j == pytest.approx(2500.0, rel=1e-9)
    assert "energy_counter" in g.reasons
    assert len(g.power_trace) == 101


def test_falls_back_to_one_second_average_power_without_instant_field(fake_nvml, clock):
    fake_nvml([FakeGPU(load_w=400.0, unsupported={"energy", "instant"})])
    (g,) = run_window(open_gpus([0], env={}), clock).gpus
    assert g.energy_source == "integrated power usage"
    assert g.energy_j == pytest.approx(4000.0, rel=1e-6)
    assert g.reasons["instant_power"] == "not supported by this GPU"


def test_instant_field_return_code_is_checked(fake_nvml, clock):
    fake_nvml([FakeGPU(unsupported={"instant"})])
    with pytest.raises(gpus.MetricUnsupported):
        nvml.instant_power_w(nvml.pynvml.gpus[0])


def test_multi_gpu_energy_sums_and_per_gpu_readings(fake_nvml, clock):
    fake_nvml([A, B])
    src = open_gpus([0, 1], env={})
    m = run_window(src, clock)
    # bus order: B (1a) is CUDA/TF GPU 0, A (3b) is GPU 1
    assert [g.uuid for g in m.gpus] == ["GPU-bbbb2222", "GPU-aaaa1111"]
    assert m.energy_j == pytest.approx(8000.0, abs=1e-3)
    assert m.power_mean_w == pytest.approx(800.0, abs=1e-4)
    assert m.power_max_w == pytest.approx(800.0)


@pytest.mark.parametrize(
    "cvd, expected",
    [
        (None, ["GPU-bbbb2222", "GPU-aaaa1111"]),
        ("1", ["GPU-aaaa1111"]),
        ("1,0", ["GPU-aaaa1111", "GPU-bbbb2222"]),
        ("GPU-aaaa", ["GPU-aaaa1111"]),
        ("GPU-bbbb2222,GPU-aaaa1111", ["GPU-bbbb2222", "GPU-aaaa1111"]),
        ("0,7,1", ["GPU-bbbb2222"]),  # CUDA stops at the first invalid index
        ("", []),
    ],
)
def test_tensorflow_gpus_map_to_nvml_by_bus_order_or_uuid(fake_nvml, cvd, expected):
    fake_nvml([A, B])  # NVML index order: A, B; PCI bus order: B, A
    found = gpus.discover()
    env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    assert [g.uuid for g in gpus.visible_gpus(found.gpus, env)] == expected


def test_mig_and_ambiguous_uuid_are_reasons_not_guesses(fake_nvml):
    fake_nvml([A, B])
    found = gpus.discover()
    assert "MIG" in gpus.visible_gpus(found.gpus, {"CUDA_VISIBLE_DEVICES": "MIG-1234"})
    assert "matches 2 GPUs" in gpus.visible_gpus(found.gpus, {"CUDA_VISIBLE_DEVICES": "GPU-"})
    src = open_gpus([0], env={"CUDA_VISIBLE_DEVICES": "MIG-1234"})
    assert src.status.startswith("unavailable: CUDA_VISIBLE_DEVICES names MIG")


def test_bus_ids_are_normalised():
    assert gpus.normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert gpus.normalize_bus_id("0000:3b:00.0") == "0000:3b:00.0"


def test_throttle_reasons_decoded_and_fallback_to_deprecated_call(fake_nvml, clock):
    fake = fake_nvml([FakeGPU(reasons=0x4 | 0x40 | 0x10000, unsupported={"clock_events"})])
    (g,) = run_window(open_gpus([0], env={}), clock, seconds=1.0).gpus
    assert g.throttle_reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert g.clock_events_info == ("0x10000",)
    assert "ThrottleReasons" in fake.calls
    assert nvml.decode_reasons(0) == ((), ())


def test_benign_clock_events_are_not_called_throttling(fake_nvml, clock):
    # gpu_idle, applications clocks, sync boost, display clock: informational, not a limit
    fake_nvml([FakeGPU(reasons=0x1 | 0x2 | 0x10 | 0x100)])
    m = run_window(open_gpus([0], env={}), clock, seconds=1.0)
    (g,) = m.gpus
    assert g.throttle_reasons == ()
    assert g.clock_events_info == ("gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting")
    d = derive(m, samples=10, idle_power_w=None)
    assert d["throttle_reasons"] == "" and "sync_boost" in d["clock_events_info"]


def test_memory_v2_with_v1_fallback(fake_nvml, clock):
    fake_nvml([FakeGPU(memory_used=2 * 2**30)])
    (g,) = run_window(open_gpus([0], env={}), clock, seconds=0.5).gpus
    assert (g.nvml_memory_used_bytes, g.nvml_memory_version) == (2 * 2**30, "v2")
    fake_nvml([FakeGPU(memory_used=2 * 2**30, unsupported={"memory_v2", "temperature_v"})])
    (g,) = run_window(open_gpus([0], env={}), clock, seconds=0.5).gpus
    assert (g.nvml_memory_used_bytes, g.nvml_memory_version) == (2 * 2**30 + 512 * 2**20, "v1")
    assert g.temp_max_c == 61.0  # deprecated temperature call as fallback


def test_clocks_temperature_limit_and_utilisation(fake_nvml, clock):
    fake_nvml([FakeGPU()])
    (g,) = run_window(open_gpus([0], env={}), clock, seconds=1.0).gpus
    assert (g.sm_clock_mhz_median, g.mem_clock_mhz_median, g.temp_max_c) == (1980, 2619, 61)
    assert g.power_limit_w == 700.0
    assert g.util_mean_pct == 97


@pytest.mark.parametrize(
    "code, reason",
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
    ],
)
def test_no_library_or_driver_degrades_to_empty_with_reason(fake_nvml, clock, code, reason):
    fake_nvml([FakeGPU()], init_error=code)
    src = open_gpus([0], env={})
    assert src.status == f"unavailable: {reason}"
    m = run_window(src, clock, seconds=0.5)
    assert m.gpus == [] and m.energy_j is None and m.power_mean_w is None
    d = derive(m, samples=100, idle_power_w=None)
    assert d["energy_j"] is None and d["energy_j_per_sample"] is None and d["gpu_telemetry"] == f"unavailable: {reason}"


def test_gpu_lost_mid_window_leaves_fields_empty_with_reason(fake_nvml, clock):
    fake_nvml([FakeGPU(lost_at=clock() + 3.0)])
    m = run_window(open_gpus([0], env={}), clock, seconds=6.0)
    (g,) = m.gpus
    assert g.energy_j is None and g.power_mean_w is None and g.util_mean_pct is None
    assert g.reasons["gpu"] == "GPU lost during the window"
    d = derive(m, samples=10, idle_power_w=70.0)
    assert d["energy_j"] is None and d["gpu_telemetry"].startswith("partial:")


def test_derived_energy_figures(fake_nvml, clock):
    fake_nvml([FakeGPU(load_w=500.0)])
    m = run_window(open_gpus([0], env={}), clock)
    d = derive(m, samples=20000, idle_power_w=70.0)
    assert d["energy_j"] == pytest.approx(5000.0, abs=1e-3)
    assert d["energy_j_per_sample"] == pytest.approx(0.25, abs=1e-7)
    assert d["samples_per_joule"] == pytest.approx(4.0, abs=1e-6)
    assert d["energy_above_idle_j"] == pytest.approx(5000.0 - 700.0, abs=1e-3)
    assert d["throttle_reasons"] == "sw_power_cap"
    assert d["telemetry"]["gpus"][0]["power_trace"][0] == [0.0, 500.0]


def test_idle_power_measured_with_fake_clock(fake_nvml, clock):
    fake_nvml([FakeGPU(idle_w=65.0, load_at=1e9)])
    found = gpus.discover()
    idle = idle_power(found.gpus, seconds=5.0, clock=clock, sleep=clock.advance)
    (i,) = idle.values()
    assert list(idle) == ["GPU-00000000-0000-0000-0000-000000000000"]
    assert i.power_w == pytest.approx(65.0, abs=1e-6) and i.counter_w == pytest.approx(65.0, abs=1e-6)
    assert i.instant_w == pytest.approx(65.0) and i.seconds == pytest.approx(5.0)
    assert (i.pstate_before, i.pstate_after) == ("P8", "P8")


@pytest.mark.parametrize("quantum_ms", [10.0, 100.0])
def test_idle_power_over_5_s_bounds_the_counter_step_error(fake_nvml, clock, quantum_ms):
    # a counter that moves in steps: over a window of T seconds the error can reach one step
    # (q / T: 10% at 100 ms over 1 s); the idle method measures >= 5 s, so it stays within 2%
    fake_nvml([FakeGPU(idle_w=65.0, load_at=1e9, quantum_ms=quantum_ms)])
    clock.advance(0.0537)  # start between two counter steps

    def oversleep(dt):  # real sleeps overrun a little, so windows are not whole steps
        clock.advance(dt * 1.013)

    (g,) = gpus.discover().gpus
    i = idle_power([g], seconds=1.0, clock=clock, sleep=oversleep)[g.uuid]
    assert i.seconds == pytest.approx(5.065)
    error = abs(i.counter_w / 65.0 - 1)
    assert 0 < error <= quantum_ms / 1000.0 / 5.0  # the step shows, within one step over 5 s
    assert i.instant_w == pytest.approx(65.0)


def test_idle_power_waits_for_an_idle_pstate(fake_nvml, clock):
    # the GPU still runs at P0 for 3 s after the probe: the settle wait lets it drop to P8 first
    fake_nvml([FakeGPU(idle_w=400.0, load_w=60.0, load_at=clock() + 3.0, pstate_idle=0, pstate_load=8)])
    (g,) = gpus.discover().gpus
    i = idle_power([g], seconds=5.0, clock=clock, sleep=clock.advance)[g.uuid]
    assert 3.0 <= i.settle_s < 4.0 and i.pstate_before == "P8"
    assert i.power_w == pytest.approx(60.0, abs=1e-6)


def test_capabilities_are_asked_of_the_device(fake_nvml):
    fake_nvml([FakeGPU(unsupported={"energy", "memory_v2"})])
    (g,) = gpus.discover().gpus
    assert g.capabilities["energy_counter"] == "no: not supported by this GPU"
    assert g.capabilities["memory_v2"].startswith("no: not in this driver")
    assert g.capabilities["instant_power"] == "yes"


def test_long_power_trace_is_downsampled(fake_nvml, clock):
    fake_nvml([FakeGPU()])
    (g,) = run_window(open_gpus([0], env={}), clock, seconds=120.0).gpus
    assert len(g.power_trace) == gpus.MAX_TRACE_POINTS
    assert g.samples == 1201


class Exploding:
    status = "ok: fake"

    def __init__(self):
        self.n = 0

    def begin(self, t):
        pass

    def sample(self, t):
        self.n += 1
        if self.n >= 2:
            raise RuntimeError("sensor fell off")

    def end(self, t):
        return []


def test_sampler_thread_runs_stops_and_survives_a_failing_sensor():
    src = Exploding()
    w = Window(src, NullHost(), interval_s=0.1)
    w.begin()
    time.sleep(0.45)
    m = w.end()
    assert src.n == 2
    assert m.sampler_error == "sampler stopped: RuntimeError: sensor fell off"
    assert not any(t.name == "accelbench-sampler" for t in threading.enumerate())


def test_sampler_rate_is_capped_at_10_hz():
    assert Window(Exploding(), NullHost(), interval_s=0.01).interval_s == 0.1


def test_sampler_stops_on_exceptions_in_the_timed_block():
    w = Window(Exploding(), NullHost(), interval_s=0.1)
    with pytest.raises(KeyboardInterrupt), w:
        raise KeyboardInterrupt
    assert w._thread is None


def _rapl_tree(root: Path, values: dict[str, tuple[int, int]]):
    for name, (energy, max_range) in values.items():
        d = root / name
        d.mkdir(parents=True)
        (d / "energy_uj").write_text(str(energy))
        (d / "max_energy_range_uj").write_text(str(max_range))


def test_rapl_sums_packages_and_handles_wrap(tmp_path):
    _rapl_tree(
        tmp_path, {"intel-rapl:0": (990_000, 1_000_000), "intel-rapl:1": (5_000, 1_000_000), "intel-rapl:0:0": (1, 10)}
    )
    r = Rapl(tmp_path)
    assert r.available and len(r.domains) == 2
    r.begin()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("10000")  # wrapped: +20 000 uJ
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("7000")  # +2 000 uJ
    r.sample()
    assert r.energy_j() == pytest.approx(0.022)


@pytest.mark.parametrize(
    "setup, reason", [("missing", "no "), ("empty", "no RAPL package domains"), ("denied", "permission denied")]
)
def test_rapl_unavailable_reasons(tmp_path, monkeypatch, setup, reason):
    root = tmp_path / "powercap"
    if setup != "missing":
        root.mkdir()
    if setup == "denied":
        _rapl_tree(root, {"intel-rapl:0": (1, 10)})
        real = Path.read_text

        def deny(self, *a, **k):
            if self.name == "energy_uj":
                raise PermissionError(13, "Permission denied")
            return real(self, *a, **k)

        monkeypatch.setattr(Path, "read_text", deny)
    r = Rapl(root)
    assert not r.available and r.reason.startswith(reason)
    r.begin()
    r.sample()
    assert r.energy_j() is None


def test_host_monitor_measures_rss_and_cpu(tmp_path):
    h = HostMonitor(powercap_root=tmp_path / "none")
    h.reset_peak()
    h.begin(time.monotonic())
    blob = bytearray(64 * 2**20)  # touch 64 MiB
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    t0 = time.process_time()
    while time.process_time() - t0 < 0.2:
        pass
    r = h.end(time.monotonic())
    assert r.host_peak_rss_bytes >= 64 * 2**20
    assert r.process_cpu_util_pct > 0 and r.host_cpu_util_pct > 0
    assert r.cpu_energy_j is None and r.cpu_energy_reason.startswith("no ")
    del blob


@pytest.mark.parametrize("binding", ["12.535", "12.560", "pynvml-11.5"])
def test_an_older_binding_degrades_to_reasons_never_attribute_errors(fake_nvml, clock, binding):
    # names absent from a real older binding are absent here too (AttributeError on access)
    fake = fake_nvml([FakeGPU(load_w=300.0)], binding=binding)
    with pytest.raises(AttributeError):
        fake.nvmlDeviceGetTemperatureV  # noqa: B018
    found = gpus.discover()
    assert found.reason is None and len(found.gpus) == 1
    (note,) = found.notes
    assert "pip install -U 'nvidia-ml-py>=12.570'" in note
    idle = idle_power(found.gpus, seconds=5.0, clock=clock, sleep=clock.advance)
    assert idle[found.gpus[0].uuid].power_w is not None
    (g,) = run_window(open_gpus([0], env={}), clock, seconds=2.0).gpus
    assert g.energy_source == "counter" and g.energy_j is not None
    assert g.temp_max_c == 61.0  # through the deprecated call
    if binding == "pynvml-11.5":
        assert (
            g.reasons["instant_power"]
            == "NVML_FI_DEV_POWER_INSTANT not in this nvidia-ml-py (nvidia-ml-py>=12.570 has it)"
        )
        assert g.throttle_reasons == ("sw_power_cap",)  # the deprecated ThrottleReasons call
        assert "shadows nvidia-ml-py" in note and "pip uninstall -y pynvml" in note
        assert found.gpus[0].capabilities["instant_power"].startswith("no: NVML_FI_DEV_POWER_INSTANT not in")
    else:
        assert "lacks nvmlDeviceGetTemperatureV" in note


def test_mig_mode_turns_gpu_telemetry_off_with_the_reason(fake_nvml, clock):
    fake_nvml([FakeGPU(mig=True)])
    (g,) = gpus.discover().gpus
    assert g.mig is True
    src = open_gpus([0], env={})
    assert src.status.startswith("unavailable: MIG mode is on for 0000:3b:00.0")
    assert run_window(src, clock, seconds=0.5).gpus == []


def test_no_permission_on_one_gpu_costs_only_that_gpu(fake_nvml, clock):
    fake_nvml([A, FakeGPU(uuid="GPU-cccc", bus_id="00000000:5E:00.0", no_permission=True), B])
    found = gpus.discover()
    assert [g.uuid for g in found.gpus] == ["GPU-bbbb2222", "GPU-aaaa1111"]
    assert found.notes == ["NVML GPU 1 skipped: permission denied"]
    # positions would be shifted by the missing GPU: refused, with the reason
    assert open_gpus([0], env={}).status.startswith("unavailable: cannot map GPUs by position")
    # bus ids (what TensorFlow reports) still map exactly
    src = gpus.open_gpus_by_bus_id(["0000:3b:00.0"])
    (g,) = run_window(src, clock, seconds=1.0).gpus
    assert g.uuid == "GPU-aaaa1111"


def test_gpus_map_by_the_bus_ids_tensorflow_reports(fake_nvml, clock):
    # a small display GPU at a lower bus id that TensorFlow ignores: CUDA's GPU 0, not TF's
    display = FakeGPU(name="NVIDIA T400", uuid="GPU-dddd", bus_id="00000000:01:00.0", cc=(7, 5))
    fake_nvml([display, A])
    assert open_gpus([0], env={}).gpus[0].uuid == "GPU-dddd"  # the old positional answer: wrong card
    src = gpus.open_gpus_by_bus_id(["0000:3B:00.0"])
    assert [g.uuid for g in src.gpus] == ["GPU-aaaa1111"]
    assert gpus.open_gpus_by_bus_id(["0000:99:00.0"]).status.startswith("unavailable: no NVML GPU at PCI bus id")


def test_window_records_the_pstate(fake_nvml, clock):
    fake_nvml([FakeGPU(load_w=500.0, idle_w=60.0, load_at=0.0)])
    (g,) = run_window(open_gpus([0], env={}), clock, seconds=1.0).gpus
    assert g.pstate == "P0"


def test_without_gpus_the_sampler_wakes_once_a_second_and_reports_its_cpu_time():
    from bench.telemetry import EmptyGPUs

    w = Window(EmptyGPUs("CPU case"), NullHost(), interval_s=0.1)
    assert w.interval_s == 1.0  # the host alone: RSS peak is VmHWM anyway, RAPL only needs wrap checks
    assert Window(Exploding(), NullHost(), interval_s=0.1).interval_s == 0.1  # GPUs: 10 Hz
    w.begin()
    time.sleep(0.05)
    m = w.end()
    assert m.sampler_cpu_s is not None and 0 <= m.sampler_cpu_s < 0.05


def _busy_loop(seconds: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        pass


def _spin_apart(seconds: float) -> int:
    """A busy loop in a process that is not this one's descendant (its shell parent exits at once, so
    it is re-parented): another user's work, as the host monitor must see it. Returns its PID."""
    import subprocess
    import sys

    code = f"import time\nt0 = time.monotonic()\nwhile time.monotonic() - t0 < {seconds}: pass"
    out = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "$0" >/dev/null 2>&1 & echo $!', code],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(out.stdout.strip())


def test_other_processes_cpu_is_the_busy_witness(tmp_path):
    """A busy loop in another process while this one sleeps: the host is busy, this process is not."""
    import psutil

    h = HostMonitor(powercap_root=tmp_path / "none")
    pid = _spin_apart(3.0)
    try:
        assert pid not in {c.pid for c in psutil.Process().children(recursive=True)}  # a stranger's work
        time.sleep(0.5)  # it is up and spinning
        h.begin(time.monotonic())
        time.sleep(1.5)
        r = h.end(time.monotonic())
    finally:
        try:
            psutil.Process(pid).wait(10)
        except psutil.Error:
            pass
    one_core = 100.0 / (psutil.cpu_count() or 1)
    assert r.process_cpu_util_pct < 0.25 * one_core
    assert r.other_cpu_pct >= 0.6 * one_core, r  # one core of the machine spun for someone else
    assert r.other_cpu_pct == pytest.approx(max(0.0, r.host_cpu_util_pct - r.process_cpu_util_pct))


def test_a_childs_cpu_is_the_workers_own(tmp_path):
    """A DDP rank or a compiler process the worker started is its own work, never "other processes"."""
    import multiprocessing

    import psutil

    h = HostMonitor(powercap_root=tmp_path / "none")
    child = multiprocessing.get_context("spawn").Process(target=_busy_loop, args=(3.0,))
    child.start()
    try:
        time.sleep(0.5)  # the child is up and spinning
        h.begin(time.monotonic())
        time.sleep(1.5)
        r = h.end(time.monotonic())
    finally:
        child.join(10)
    one_core = 100.0 / (psutil.cpu_count() or 1)
    assert r.process_cpu_util_pct >= 0.6 * one_core, r  # the child's core counts as this process's
    # what else ran (the other test worker, say) is the host's busy time less the worker's and its child's
    assert r.other_cpu_pct == pytest.approx(max(0.0, r.host_cpu_util_pct - r.process_cpu_util_pct))


def _derived(fake_nvml, clock, gpus_, own_pid, host_other=0.0):
    from bench.telemetry.base import HostReading

    fake_nvml(gpus_)
    w = Window(open_gpus(list(range(len(gpus_))), env={}), NullHost(), clock=clock, threaded=False)
    w.begin()
    for _ in range(30):
        clock.advance(0.1)
        w.sample_now()
    m = w.end()
    host = HostReading(3.0, None, None, 90.0, 60.0, None, "fake", "none", other_cpu_pct=host_other)
    return derive(
        type(m)(m.duration_s, m.gpu_telemetry, m.gpus, host), samples=1000, idle_power_w=None, own_pid=own_pid
    )


def test_other_processes_on_the_case_gpus_are_counted_and_flag_the_case(fake_nvml, clock):
    d = _derived(fake_nvml, clock, [FakeGPU(compute_pids=[4242, 777])], own_pid=4242)
    assert d["other_gpu_processes"] == 1 and d["busy"] is True
    assert d["busy_note"] == "busy: 1 other process computed on the GPU"
    assert d["telemetry"]["gpus"][0]["compute_pids"] == [777, 4242]
    # the worker alone: quiet
    d = _derived(fake_nvml, clock, [FakeGPU(compute_pids=[4242])], own_pid=4242)
    assert d["other_gpu_processes"] == 0 and d["busy"] is False and d["busy_note"] is None
    # two GPUs of one case: the worker on both, one stranger on the second
    a = FakeGPU(uuid="GPU-a", bus_id="00000000:1A:00.0", compute_pids=[4242])
    b = FakeGPU(uuid="GPU-b", bus_id="00000000:3B:00.0", compute_pids=[4242, 9])
    assert _derived(fake_nvml, clock, [a, b], own_pid=4242)["other_gpu_processes"] == 1


def test_gpu_processes_seen_from_another_pid_namespace_or_not_offered(fake_nvml, clock):
    # in a container NVML lists host PIDs: the worker's own is not among them; one is taken as the worker
    d = _derived(fake_nvml, clock, [FakeGPU(compute_pids=[31337])], own_pid=12)
    assert d["other_gpu_processes"] == 0 and not d["busy"]
    d = _derived(fake_nvml, clock, [FakeGPU(compute_pids=[31337, 31338])], own_pid=12)
    assert d["other_gpu_processes"] == 1 and d["busy"] and "PID namespace" in d["other_gpu_processes_note"]
    # NVML does not say: unknown, never 0
    d = _derived(fake_nvml, clock, [FakeGPU(compute_pids=[777], unsupported={"processes"})], own_pid=12)
    assert d["other_gpu_processes"] is None and not d["busy"]


@pytest.mark.parametrize("other, busy", [(9.9, False), (10.1, True), (None, False)])
def test_busy_cpu_threshold_is_ten_percent_of_the_machine(fake_nvml, clock, other, busy):
    d = _derived(fake_nvml, clock, [FakeGPU(compute_pids=[1])], own_pid=1, host_other=other)
    assert d["other_cpu_pct"] == other and d["busy"] is busy
    if busy:
        assert d["busy_note"] == f"busy: other processes used {other:.0f}% of the CPU"


def test_the_next_worker_waits_until_nvml_no_longer_lists_the_killed_one(fake_nvml, clock):
    from bench import watchdog

    a = FakeGPU(uuid="GPU-a", bus_id="00000000:1A:00.0", compute_pids=[4242, 9])
    b = FakeGPU(uuid="GPU-b", bus_id="00000000:3B:00.0", compute_pids=[4242])
    fake_nvml([a, b])
    sleeps: list[float] = []

    def sleep(dt):  # the driver frees the killed worker's contexts after 2 s
        sleeps.append(dt)
        clock.advance(dt)
        if clock() >= 102.0:
            a.compute_pids, b.compute_pids = [9], []

    assert watchdog.wait_released(["0000:1a:00.0", "00000000:3B:00.0"], 4242, 30, clock, sleep) is None
    assert sum(sleeps) == pytest.approx(2.0)  # released: the other process on GPU a does not matter
    a.compute_pids = [4242]
    held = watchdog.wait_released(["00000000:1A:00.0"], 4242, 5, clock, lambda dt: clock.advance(dt))
    assert held == "the killed worker (pid 4242) still held 0000:1a:00.0 after 5 s"  # the normalised bus id
    a.lost_at = clock()
    lost = watchdog.wait_released(["00000000:1A:00.0"], 4242, 5, clock, clock.advance)
    assert lost.startswith("NVML cannot open 0000:1a:00.0 (NVML GPU 0 skipped:") and "reset" in lost


def test_the_compute_mode_is_recorded_and_an_exclusive_one_is_explained(fake_nvml):
    from test_capability import machine

    from bench.report.devices_text import describe

    fake_nvml([FakeGPU(uuid="GPU-a", compute_mode=3), FakeGPU(uuid="GPU-b", bus_id="00000000:3C:00.0")])
    a, b = gpus.discover().gpus
    assert (a.compute_mode, b.compute_mode) == ("exclusive_process", "default")
    assert a.to_dict()["compute_mode"] == "exclusive_process"
    m = machine()
    m.nvml.gpus[:] = [a, b]
    text = describe(m)
    assert text.count("compute mode") == 1 and "compute mode exclusive_process: one process per GPU" in text
    fake_nvml([FakeGPU(unsupported={"compute_mode"})])
    assert gpus.discover().gpus[0].compute_mode is None  # not reported: nothing said, nothing guessed


def test_a_gpu_that_idles_in_p0_settles_on_a_steady_power_not_the_time_limit(fake_nvml, clock):
    """gpu-review-2 finding 10: data-centre parts (V100: P0 only) never report P8 when idle."""
    fake_nvml([FakeGPU(idle_w=62.0, load_at=1e9, pstate_idle=0)])
    (g,) = gpus.discover().gpus
    i = idle_power([g], seconds=5.0, settle_max_s=10.0, clock=clock, sleep=clock.advance)[g.uuid]
    assert i.settle_s == pytest.approx(3.0) and i.settled_by.startswith("steady power")  # was the 10 s limit
    assert i.pstate_before == "P0" and i.power_w == pytest.approx(62.0, abs=1e-6)


def test_a_power_still_falling_in_p0_is_not_steady(fake_nvml, clock):
    # 300 W until 1.5 s after the start, then 70 W, all in P0. Power readings are trailing 1 s means
    # (Ampere and newer), so the drop shows in the windows [1,2] and [2,3]; [3,4] is the first at
    # 70 W and [4,5] repeats it: the idle window starts at 5 s and reads 70 W, none of the 300 W
    fake_nvml([FakeGPU(idle_w=300.0, load_w=70.0, load_at=clock() + 1.5, pstate_idle=0, pstate_load=0)])
    (g,) = gpus.discover().gpus
    i = idle_power([g], seconds=5.0, clock=clock, sleep=clock.advance)[g.uuid]
    assert i.settle_s == pytest.approx(5.0) and i.settled_by.startswith("steady power")
    assert i.power_w == pytest.approx(70.0, abs=1e-6)


def test_a_power_that_never_settles_waits_the_limit_and_says_so(fake_nvml, clock, monkeypatch):
    fake_nvml([FakeGPU(idle_w=100.0, load_at=1e9, pstate_idle=0)])
    (g,) = gpus.discover().gpus
    drift = iter(range(1000))  # each power reading 5% above the last: never steady
    from bench.telemetry import nvml as nv

    monkeypatch.setattr(
        nv,
        "optional",
        lambda name, *a: 100_000 * (1.05 ** next(drift)) if name == "nvmlDeviceGetPowerUsage" else nv.call(name, *a),
    )
    i = idle_power([g], seconds=5.0, settle_max_s=10.0, clock=clock, sleep=clock.advance)[g.uuid]
    assert i.settle_s == pytest.approx(10.0) and i.settled_by.startswith("time limit")


def test_a_window_too_short_for_the_energy_counter_takes_the_instant_power():
    """NVML's counter moves every ~100 ms: under ten steps it is not printed; the instant samples are."""
    from bench.telemetry.energy_check import SHORT_WINDOW_SOURCE, window_energy

    trace = [(0.0, 100.0), (0.2, 140.0), (0.4, 140.0)]
    assert window_energy(75.0, trace, 0.4) == (pytest.approx(52.0), SHORT_WINDOW_SOURCE, None)
    assert window_energy(1500.0, trace, 10.0) == (1500.0, "counter", None)
    joules, source, why = window_energy(75.0, [(0.0, 100.0)], 0.4)
    assert joules is None and source is None and "too short for the counter" in why
