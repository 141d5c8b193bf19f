"""Host telemetry: this process's memory and CPU, the machine's CPU, and RAPL CPU energy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    import psutil
except ImportError:  # a GPU box with only nvidia-ml-py (docs/gpu_nvml_check.py): RAPL works, HostMonitor does not
    psutil = None  # type: ignore[assignment]

from bench.telemetry.base import HostReading


class Rapl:
    """CPU package energy from ``<root>/intel-rapl:N/energy_uj`` deltas, wrap-around handled.

    Sub-domains (``intel-rapl:N:M``, core/uncore/dram) are part of their package and are not
    added again. Unreadable counters leave the energy empty with ``reason`` saying why.
    """

    def __init__(self, root: str | Path = "/sys/class/powercap"):
        self.root = Path(root)
        self.domains: list[Path] = []
        self.max_uj: list[int] = []
        self.reason = ""
        self.total_uj = 0
        self._last: list[int] = []
        if not self.root.is_dir():
            self.reason = f"no {self.root} (RAPL not exposed on this machine)"
            return
        doms = sorted(p for p in self.root.glob("intel-rapl:*") if p.name.count(":") == 1)
        if not doms:
            self.reason = f"no RAPL package domains under {self.root}"
            return
        try:
            for d in doms:
                self.max_uj.append(int((d / "max_energy_range_uj").read_text()))
                int((d / "energy_uj").read_text())
            self.domains = doms
        except PermissionError:
            self.reason = f"permission denied reading {doms[0] / 'energy_uj'} (root-only since Linux 5.10)"
        except (OSError, ValueError) as e:
            self.reason = f"cannot read RAPL counters: {e}"

    @property
    def available(self) -> bool:
        """True when counters can be read."""
        return not self.reason

    def _read(self) -> list[int]:
        return [int((d / "energy_uj").read_text()) for d in self.domains]

    def begin(self) -> None:
        """Start accumulating."""
        self.total_uj = 0
        if self.available:
            self._last = self._read()

    def sample(self) -> None:
        """Add the deltas since the last read; a counter below its last value has wrapped."""
        if not self.available:
            return
        try:
            now = self._read()
        except (OSError, ValueError) as e:
            self.reason = f"RAPL counter became unreadable: {e}"
            return
        for i, (a, b) in enumerate(zip(self._last, now)):
            self.total_uj += b - a if b >= a else b + self.max_uj[i] - a
        self._last = now

    def energy_j(self) -> float | None:
        """Energy accumulated since begin (joules), None where unavailable."""
        return self.total_uj / 1e6 if self.available else None


def _all_time(c: Any) -> float:
    """All CPU time of ``psutil.cpu_times()``; guest time is already inside user/nice on Linux."""
    return sum(c) - getattr(c, "guest", 0.0) - getattr(c, "guest_nice", 0.0)


def _busy_time(c: Any) -> float:
    """Busy CPU time: all but idle and iowait (steal counts: the hypervisor took it from us)."""
    return _all_time(c) - c.idle - getattr(c, "iowait", 0.0)


def _read_hwm_bytes(proc: Path) -> int | None:
    try:
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


class HostMonitor:
    """Window source for the host: peak RSS (VmHWM reset at begin), CPU utilisation, RAPL."""

    def __init__(self, powercap_root: str | Path = "/sys/class/powercap", proc_self: str | Path = "/proc/self"):
        if psutil is None:
            raise ImportError("the host monitor needs psutil (pip install psutil)")
        self.proc = psutil.Process(os.getpid())
        self.proc_self = Path(proc_self)
        self.rapl = Rapl(powercap_root)
        self._rss_max = 0
        self._hwm_reset = False
        self._t0 = 0.0
        self._cpu0: tuple[float, float] = (0.0, 0.0)
        self._sys0: Any = None

    def reset_peak(self) -> None:
        """Start a new peak-RSS period (Linux: ``5`` into clear_refs resets VmHWM)."""
        try:
            (self.proc_self / "clear_refs").write_text("5")
            self._hwm_reset = True
        except OSError:
            self._hwm_reset = False
        self._rss_max = self.proc.memory_info().rss

    def begin(self, t: float) -> None:
        """Read CPU times and RAPL (the peak-RSS period starts at ``reset_peak``)."""
        self._t0 = t
        self._rss_max = max(self._rss_max, self.proc.memory_info().rss)
        self._cpu0 = self._cpu_s()
        self._sys0 = psutil.cpu_times()
        self.rapl.begin()

    def _cpu_s(self) -> tuple[float, float]:
        """User and system CPU seconds of this process and its live children: the case's own work.

        The children are a DDP group's other ranks and compiler workers, not another process's work.
        """
        ct = self.proc.cpu_times()
        user, system = ct.user, ct.system
        try:
            for child in self.proc.children(recursive=True):
                try:
                    c = child.cpu_times()
                    user, system = user + c.user, system + c.system
                except psutil.Error:  # gone since it was listed
                    pass
        except psutil.Error:
            pass
        return user, system

    def sample(self, t: float) -> None:
        """RSS and RAPL."""
        self._rss_max = max(self._rss_max, self.proc.memory_info().rss)
        self.rapl.sample()

    def end(self, t: float) -> HostReading:
        """Close the window."""
        self.sample(t)
        duration = t - self._t0
        ct = self._cpu_s()
        ncpu = psutil.cpu_count() or 1
        proc_pct = None
        if duration > 0:
            used = (ct[0] - self._cpu0[0]) + (ct[1] - self._cpu0[1])
            proc_pct = 100.0 * used / (duration * ncpu)
        sys1 = psutil.cpu_times()
        sys_pct = None
        if self._sys0 is not None:
            total = _all_time(sys1) - _all_time(self._sys0)
            if total > 0:
                sys_pct = 100.0 * (_busy_time(sys1) - _busy_time(self._sys0)) / total
        other = max(0.0, sys_pct - proc_pct) if sys_pct is not None and proc_pct is not None else None
        hwm = _read_hwm_bytes(self.proc_self)
        if hwm is not None and self._hwm_reset:
            peak, source = max(hwm, self._rss_max), "VmHWM since reset_peak"
        elif hwm is not None:
            peak, source = max(hwm, self._rss_max), "VmHWM of the process (could not reset)"
        else:
            peak, source = self._rss_max, "sampled RSS"
        return HostReading(
            duration_s=duration,
            host_peak_rss_bytes=peak,
            host_rss_samples_max_bytes=self._rss_max,
            host_cpu_util_pct=sys_pct,
            process_cpu_util_pct=proc_pct,
            cpu_energy_j=self.rapl.energy_j(),
            cpu_energy_reason=self.rapl.reason,
            peak_rss_source=source,
            other_cpu_pct=other,
        )
