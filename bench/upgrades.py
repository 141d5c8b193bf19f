"""Steps that lift one case record (its ``extra_info``) to a newer results schema; ``bench.storage`` chains them.

Each re-derives a figure from what the record itself holds, by the rule new records are measured with.
"""

from __future__ import annotations

import re
import statistics

from bench.rate_search import capacity_at_slo
from bench.telemetry.derive import power_limit_w
from bench.telemetry.energy_check import SHORT_WINDOW_SOURCE, window_energy
from workloads import WORKLOADS


def gpu_cost_analysis(e: dict) -> None:
    """XLA's cost analysis of a GPU step misses the cuBLAS/cuDNN calls: kept under a name that says so."""
    if e.get("device_kind") == "gpu" and "xla_flops_per_device_step" in e:
        e["xla_cost_flops_without_library_calls"] = e.pop("xla_flops_per_device_step")


def short_window_energy(e: dict) -> None:
    """A record's energy from its GPUs' instant-power traces where the counter's window was too short.

    By the rule new records are measured with (``bench.telemetry.energy_check.window_energy``); else unchanged.
    """
    window, old = e.get("telemetry_window_s"), e.get("energy_j")
    gpus = (e.get("telemetry") or {}).get("gpus") or []
    if gpus and "power_limit_w" not in e:
        e["power_limit_w"] = power_limit_w(g.get("power_limit_w") for g in gpus)
    if e.get("energy_source") != "counter" or not window or not old or not gpus:
        return
    found = [window_energy(g.get("energy_j"), g.get("power_trace") or [], float(window)) for g in gpus]
    if any(f[1] == "counter" for f in found):
        return
    joules = [f[0] for f in found]
    if None in joules:
        e["energy_j"] = e["energy_j_per_sample"] = e["samples_per_joule"] = e["power_mean_w"] = None
        e["energy_above_idle_j"] = None
        e["energy_source"] = None
        e["energy_reason"] = next(f[2] for f in found if f[0] is None)
        return
    new = float(sum(joules))  # type: ignore[arg-type]
    scale = new / old
    e["energy_j"], e["energy_source"], e["power_mean_w"] = new, SHORT_WINDOW_SOURCE, new / window
    if e.get("energy_j_per_sample") is not None:
        e["energy_j_per_sample"] *= scale
    if e.get("samples_per_joule") is not None:
        e["samples_per_joule"] /= scale
    if e.get("idle_power_w") is not None:
        e["energy_above_idle_j"] = new - float(e["idle_power_w"]) * window


def executed_flops(e: dict, profile: str | None) -> None:
    """Training FLOPs as executed (``Workload.flops_per_sample``); the old 3 x forward kept as model FLOPs.

    Where the workload's size at the run's profile gives the old figure back, the executed count and
    the figures made from it (achieved TFLOP/s, share of the measured peak) are recomputed; otherwise
    the old figure is kept as model FLOPs only and the executed count is left unknown.
    """
    old = e.get("flops_per_sample")
    if "model_flops_per_sample" in e or not old or e.get("mode") != "train":
        e.setdefault("model_flops_per_sample", old)
        return
    w = WORKLOADS.get(str(e.get("workload")))
    size = w.sizes.get(profile) if w and profile else None
    e["model_flops_per_sample"] = old
    if w is None or size is None or w.model_flops_per_sample(size, "train") != old:
        e["flops_per_sample"] = e["achieved_tflops"] = e["mfu_measured"] = None
        return
    new = w.flops_per_sample(size, "train")
    e["flops_per_sample"] = new
    for k in ("achieved_tflops", "mfu_measured"):
        if isinstance(e.get(k), (int, float)):
            e[k] = e[k] * new / old


def serve_outcome(e: dict) -> None:
    """One outcome for every serve case, and its capacity from the service times recorded.

    Measured with no rate meeting the SLO is ``slo_missed`` (it was ``unsupported`` or ``ok`` by the
    path taken); no trial run is "not tested"; capacity over the batches whose service time fits the
    SLO less the batcher's wait.
    """
    if e.get("mode") != "serve" or not e.get("service_ms") or e.get("status") not in ("ok", "unsupported"):
        return
    slo_ms = float(e.get("slo_ms") or 0)
    service = {int(b): float(ms) / 1e3 for b, ms in e["service_ms"].items()}
    if slo_ms:
        e["capacity_rate"], e["capacity_batch"] = capacity_at_slo(service, slo_ms / 1e3)
    if e.get("max_rate_at_slo") is not None:
        return
    reason = str(e.get("serve_reason") or "")
    untried = "is under the lowest rate" in reason or "not resolvable" in reason  # no trial ran
    if untried and not reason.startswith("not tested"):
        e["status"] = "unsupported"
        old = re.search(r"a ([\d.]+) s trial can certify \(([\d.]+) req/s: (\d+) requests\)", reason)
        cap = e.get("capacity_rate")
        if old and cap:  # the old text quoted a capacity with its estimate's margin: one figure, the row's
            e["reason"] = e["serve_reason"] = (
                f"not tested: no trial ran; the capacity within the SLO is {cap:.3g} req/s, and this run's rule "
                f"asked {old[2]} req/s of a {old[1]} s trial ({old[3]} requests, one late allowed); the current "
                "rule (459 requests, none late) starts lower"
            )
        else:
            e["reason"] = e["serve_reason"] = f"not tested: {reason}"
    elif e["status"] == "ok" or reason.startswith("one request alone"):
        e["status"], e["reason"] = "slo_missed", reason or "no rate passed"
    elif reason and not reason.startswith("not tested"):
        e["reason"] = e["serve_reason"] = f"not tested: {reason}"


def mix_rate(record: dict) -> None:
    """The mix's latency tenant: its rate as the median over its requests (was 1 / mean latency)."""
    e = record.get("extra_info") or {}
    data = (record.get("stats") or {}).get("data") or []
    if not e.get("neighbour") or not data or e.get("status") != "ok":
        return
    median = statistics.median(float(t) for t in data)
    e["samples_per_s"] = 1.0 / median if median > 0 else e.get("samples_per_s")
