"""Overhead benchmark: the harness and the telemetry sampler against a bare loop, same process.

Not part of the test suite (speed is never asserted); run it and read the figures:

    python -m pytest bench/overhead_check.py -p no:cacheprovider -s [--profile-name standard]

Each repetition times the same compiled training step of the MLP three ways, back to back:
a bare ``tf.function`` loop (one sync at the end), the harness (pytest-benchmark pedantic rounds
of K steps with one sync per round) with the sampler on, and the harness with the sampler off.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import pytest

RESULTS: dict[str, list[float]] = {"bare": [], "harness_sampler_on": [], "harness_sampler_off": []}
REPS = int(os.environ.get("ACCELBENCH_OVERHEAD_REPS", "3"))
PROFILE = os.environ.get("ACCELBENCH_OVERHEAD_PROFILE", "standard")


@pytest.fixture(scope="module")
def built():
    """The standard MLP training step on the CPU, compiled and warmed up, with its K and rounds."""
    from bench import measure
    from bench.cases import Case, DeviceConfig
    from bench.profiles import PROFILES
    from workloads import WORKLOADS

    names = measure.configure_devices(DeviceConfig("cpu"))
    strategy, _ = measure.make_strategy(DeviceConfig("cpu"), names)
    batch = WORKLOADS["mlp"].batch[PROFILE]
    case = Case("mlp", "train", "cpu", 1, False, "fp32", False, batch)
    measure.apply_precision("fp32", "cpu")
    b = measure.build_case(case, PROFILE, strategy, names)
    for _ in range(3):
        b.step()
    measure.sync()
    t0 = time.perf_counter()
    b.step()
    measure.sync()
    k, rounds = measure.plan_rounds(time.perf_counter() - t0, PROFILES[PROFILE])
    yield measure, b, case, k, rounds
    summary = {name: statistics.median(v) for name, v in RESULTS.items() if v}
    out = {"profile": PROFILE, "steps_per_round": k, "rounds": rounds, "samples_per_s": RESULTS, "median": summary}
    if summary.get("bare"):
        out["harness_cost_pct"] = 100 * (1 - summary["harness_sampler_off"] / summary["bare"])
        out["sampler_cost_pct"] = 100 * (1 - summary["harness_sampler_on"] / summary["harness_sampler_off"])
    print("\n" + json.dumps(out, indent=1))


def _bare(measure, b, case, k, rounds) -> float:
    measure.sync()
    t0 = time.perf_counter()
    for _ in range(k * rounds):
        b.step()
    measure.sync()
    return case.global_batch * k * rounds / (time.perf_counter() - t0)


@pytest.mark.parametrize("rep", range(REPS))
@pytest.mark.parametrize("sampler", ["on", "off"])
def test_overhead(benchmark, built, rep, sampler):
    """One repetition: bare loop (sampler-on reps only), then the harness."""
    from bench.telemetry import EmptyGPUs, HostMonitor, Window

    measure, b, case, k, rounds = built
    if sampler == "on":  # bare once per repetition, right before the harness runs
        RESULTS["bare"].append(_bare(measure, b, case, k, rounds))
    window = Window(EmptyGPUs("overhead check"), HostMonitor(), threaded=sampler == "on")
    window.begin()
    measure.timed_rounds(b.step, k, rounds, benchmark.pedantic)
    window.end()
    med = statistics.median(benchmark.stats.stats.data)
    RESULTS[f"harness_sampler_{sampler}"].append(case.global_batch * k / med)
