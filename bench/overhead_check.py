"""Overhead benchmark: the harness and the telemetry sampler against a bare loop, same process.

Not part of the test suite (speed is never asserted); run it and read the figures:

    python -m pytest bench/overhead_check.py -p no:cacheprovider -s

Each repetition times the same compiled training step of the standard MLP on the CPU three
ways, back to back, in an order that alternates between repetitions (so drift does not favour
one): a bare ``tf.function`` loop (one sync at the end), the harness (pytest-benchmark pedantic
rounds of K steps, one sync per round) with the sampler thread on, and with it off. Costs are
medians over repetitions of the paired ratios. The sampler's own CPU time (thread time) is
printed too: it is a floor of its cost that run-to-run noise cannot hide.

Because a shared machine drifts by several percent between 20 s measurements, the sampler is
also measured round against round: single rounds alternate sampler on and off in ABBA order
(which cancels a linear drift), at the CPU-case rate (1 Hz) and at the GPU rate (10 Hz, what CPU
cases used before), and the cost is the median of the per-pair ratios.
``ACCELBENCH_OVERHEAD_REPS`` (default 3), ``ACCELBENCH_OVERHEAD_PAIRS`` (default 12) and
``ACCELBENCH_OVERHEAD_PROFILE`` (default standard).
"""

from __future__ import annotations

import json
import os
import statistics
import time

import pytest

REPS = int(os.environ.get("ACCELBENCH_OVERHEAD_REPS", "3"))
PAIRS = int(os.environ.get("ACCELBENCH_OVERHEAD_PAIRS", "12"))
PROFILE = os.environ.get("ACCELBENCH_OVERHEAD_PROFILE", "standard")
ORDERS = (("bare", "on", "off"), ("off", "on", "bare"), ("on", "bare", "off"))
RESULTS: dict[int, dict] = {}
PAIRED: dict[str, dict] = {}


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
    measure.apply_precision(case.precision_spec, "cpu")
    b = measure.build_case(case, PROFILE, strategy, names)
    for _ in range(3):
        b.step()
    measure.sync()
    t0 = time.perf_counter()
    b.step()
    measure.sync()
    k, schedule = measure.plan_rounds(time.perf_counter() - t0, PROFILES[PROFILE])
    rounds = schedule.cap
    yield measure, b, case, k, rounds
    done = [r for r in RESULTS.values() if {"bare", "on", "off"} <= set(r)]
    if done:
        print("\n" + json.dumps(summary(done, k, rounds), indent=1))
    if PAIRED:
        print("\n" + json.dumps({"sampler_cost_pct_round_against_round": PAIRED}, indent=1))


def summary(results: list[dict], k: int, rounds: int) -> dict:
    """Medians per way, and the harness and sampler costs as medians of paired ratios (%)."""
    med = {w: statistics.median(r[w] for r in results) for w in ("bare", "on", "off")}
    return {
        "profile": PROFILE,
        "steps_per_round": k,
        "rounds": rounds,
        "repetitions": results,
        "median_samples_per_s": med,
        "harness_cost_pct": statistics.median(100 * (1 - r["off"] / r["bare"]) for r in results),
        "sampler_cost_pct": statistics.median(100 * (1 - r["on"] / r["off"]) for r in results),
        "sampler_cpu_pct_of_window": statistics.median(100 * r["sampler_cpu_s"] / r["window_s"] for r in results),
    }


@pytest.mark.parametrize("rep, way", [(r, w) for r in range(REPS) for w in ORDERS[r % len(ORDERS)]])
def test_overhead(benchmark, built, rep, way):
    """One way of one repetition: the bare loop, or the harness with the sampler on or off."""
    from bench import loop
    from bench.telemetry import EmptyGPUs, HostMonitor, Window

    measure, b, case, k, rounds = built
    out = RESULTS.setdefault(rep, {})
    if way == "bare":
        measure.sync()
        t0 = time.perf_counter()
        for _ in range(k * rounds):
            b.step()
        measure.sync()
        out["bare"] = case.global_batch * k * rounds / (time.perf_counter() - t0)
        return
    if benchmark.disabled:
        pytest.skip("pytest-benchmark is disabled (--benchmark-disable): the harness would time nothing")
    window = Window(EmptyGPUs("overhead check"), HostMonitor(), threaded=way == "on")
    window.begin()
    loop.timed_rounds(b.step, measure.sync, k, rounds, benchmark.pedantic)
    m = window.end()
    out[way] = case.global_batch * k / statistics.median(benchmark.stats.stats.data)
    if way == "on":
        out["sampler_cpu_s"], out["window_s"] = m.sampler_cpu_s, m.duration_s


@pytest.mark.parametrize("rate_hz", [1, 10])
def test_sampler_round_against_round(built, rate_hz):
    """Rounds alternating sampler on/off (ABBA); the cost is the median of the pair ratios."""
    from bench.telemetry import EmptyGPUs, HostMonitor, Window

    measure, b, case, k, _ = built
    times: dict[bool, list[float]] = {True: [], False: []}
    cpu = 0.0
    for i in range(2 * PAIRS):
        sampled = (i % 4) in (0, 3)  # on, off, off, on, ...
        window = Window(EmptyGPUs("overhead check"), HostMonitor(), threaded=sampled)
        window.interval_s = 1.0 / rate_hz
        window.begin()
        measure.sync()
        t0 = time.perf_counter()
        for _ in range(k):
            b.step()
        measure.sync()
        times[sampled].append(time.perf_counter() - t0)
        cpu += window.end().sampler_cpu_s or 0.0
    ratios = [off / on for on, off in zip(times[True], times[False])]  # throughput on / off
    PAIRED[f"{rate_hz} Hz"] = {
        "pairs": PAIRS,
        "round_s_median": statistics.median(times[True] + times[False]),
        "cost_pct_median": 100 * (1 - statistics.median(ratios)),
        "cost_pct_iqr": [100 * (1 - q) for q in reversed(statistics.quantiles(ratios, n=4)[::2])],
        "sampler_cpu_pct": 100 * cpu / sum(times[True]),
    }
