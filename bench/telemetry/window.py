"""A measurement window: begin/end around the timed rounds, a background sampler in between."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from bench.telemetry.base import GPUReading, HostReading, Measurement

DEFAULT_INTERVAL_S = 0.1
MIN_INTERVAL_S = 0.1  # <= 10 Hz: NVML's counters update every ~100 ms (zeus caps at 0.1 s too)
# Without GPUs only the host is sampled: RSS (whose peak VmHWM records anyway) and RAPL (sampled
# only to catch counter wrap-arounds, minutes apart). Once a second is enough, and each wake-up
# of the sampler steals a core from the benchmark on a small CPU (measured: docs/benchmarks.md).
HOST_ONLY_INTERVAL_S = 1.0


class GPUSource(Protocol):
    """What a window needs of a GPU set (NvidiaGPUs, EmptyGPUs)."""

    @property
    def status(self) -> str:
        """``ok ...`` or ``unavailable: why``."""

    def begin(self, t: float) -> None:
        """Open the window at time ``t`` (s)."""

    def sample(self, t: float) -> None:
        """One sample at time ``t`` (s)."""

    def end(self, t: float) -> list[GPUReading]:
        """Close the window at time ``t`` (s)."""


class HostSource(Protocol):
    """What a window needs of the host monitor."""

    def begin(self, t: float) -> None:
        """Open the window at time ``t`` (s)."""

    def sample(self, t: float) -> None:
        """One sample at time ``t`` (s)."""

    def end(self, t: float) -> HostReading:
        """Close the window at time ``t`` (s)."""


class Window:
    """``begin()``; timed work; ``end() -> Measurement``. The caller syncs devices at both ends.

    The sampler thread calls ``sample`` every ``interval_s`` (at least 0.1 s; at least
    ``HOST_ONLY_INTERVAL_S`` when the GPU source has no GPUs). An error inside it stops
    sampling, is kept in ``Measurement.sampler_error``, and never reaches the case. The CPU
    time the thread used is kept in ``Measurement.sampler_cpu_s``. With ``threaded=False``
    nothing samples in the background (tests call ``sample_now``).
    """

    def __init__(
        self,
        gpus: GPUSource,
        host: HostSource,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        threaded: bool = True,
    ):
        self.gpus, self.host, self.clock = gpus, host, clock
        self.interval_s = max(MIN_INTERVAL_S, interval_s)
        if getattr(gpus, "gpus", None) == []:  # EmptyGPUs: the host alone
            self.interval_s = max(self.interval_s, HOST_ONLY_INTERVAL_S)
        self.threaded = threaded
        self.cpu_s = 0.0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def begin(self) -> None:
        """Open the window and start sampling."""
        self._t0 = self.clock()
        self.gpus.begin(self._t0)
        self.host.begin(self._t0)
        if self.threaded:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="accelbench-sampler", daemon=True)
            self._thread.start()

    def sample_now(self) -> None:
        """Take one sample of every source (what the thread does each interval)."""
        t = self.clock()
        self.gpus.sample(t)
        self.host.sample(t)

    def _loop(self) -> None:
        start = time.thread_time()
        try:
            while not self._stop.wait(self.interval_s):
                self.sample_now()
        except Exception as e:  # a sensor failing must not take the case with it
            self.error = f"sampler stopped: {type(e).__name__}: {e}"
        finally:
            self.cpu_s = time.thread_time() - start

    def series(self) -> list[tuple[list[float], list[float]]]:
        """Per GPU, the SM clock (MHz) and temperature (C) samples so far (the stopping rule's trend guard)."""
        return getattr(self.gpus, "series", list)()

    def stop(self) -> None:
        """Stop the sampler thread (idempotent; also for Ctrl-C paths)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def end(self) -> Measurement:
        """Stop sampling and close the window."""
        self.stop()
        t = self.clock()
        gpus = self.gpus.end(t)
        host = self.host.end(t)
        return Measurement(
            duration_s=t - self._t0,
            gpu_telemetry=self.gpus.status,
            gpus=gpus,
            host=host,
            sampler_error=self.error,
            sampler_cpu_s=self.cpu_s if self.threaded else None,
        )

    def __enter__(self) -> Window:
        self.begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
