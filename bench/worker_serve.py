"""A worker's serve phases: can the case be judged at its SLO, then the rate search (``bench.rate_search``).

A mix-in of :class:`bench.worker.WorkerSession`: it uses the session's plan, timing, telemetry
sources and heartbeat.
"""

from __future__ import annotations

from typing import Any

from bench.cases import Case
from bench.rate_search import Unjudgeable


class ServeSteps:
    """The serve case's phases after its build and timed rounds."""

    plan: Any
    timing: Any
    telemetry: Any
    gpus: Any
    host: Any
    _floor: float

    def heartbeat(self, case_id: str | None, phase: str) -> None:
        """Tell the parent what the worker does now (the session's)."""
        raise NotImplementedError

    def _idle_w(self) -> float | None:  # provided by the session
        raise NotImplementedError

    def _precheck(self, case: Case, built: Any) -> None:
        """A serve case no rate can be judged for (one request over the SLO, ...) ends here, with why."""
        from bench import rate_search, serve

        assert case.slo_ms is not None and built.serve is not None  # a serve case, built for serving
        self.heartbeat(case.id, "serve: can this device be judged at this SLO?")
        pre = rate_search.precheck(
            built.serve,
            case.per_replica_batch,
            case.slo_ms,
            self._floor,
            serve.RealClock(),
            self.timing.serve_max_trial_s,
        )
        if pre["serve_reason"]:
            raise Unjudgeable(pre)

    def _serve(self, case: Case, built: Any, rounds_rate: float | None) -> dict:
        """Requests at rising rates through the dynamic batcher: the highest rate whose p99 meets the SLO."""
        from bench import rate_search, serve

        clock = serve.RealClock()
        floor = self._floor

        def metered(run: Any) -> serve.Trial:  # each trial inside its own telemetry window
            window = self.telemetry.Window(
                self.gpus, self.host, interval_s=self.plan.sampler_interval_s, threaded=self.plan.sampler
            )
            window.begin()
            try:
                t = run()
            finally:
                window.stop()
            t.energy_per_request_j = self.telemetry.derive(window.end(), t.completed, self._idle_w())[
                "energy_j_per_sample"
            ]
            return t

        assert case.slo_ms is not None and built.serve is not None  # a serve case, built for serving
        return rate_search.run_case(
            built.serve,
            case.per_replica_batch,
            case.slo_ms,
            floor,
            clock,
            self.timing.serve_trial_s,
            self.timing.serve_max_trial_s,
            self.timing.serve_max_trials,
            lambda phase: self.heartbeat(case.id, phase),
            metered,
            rounds_rate=rounds_rate,
        )
