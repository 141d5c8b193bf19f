"""Writes the hand-made sample results used by the report tests (deterministic).

python tests/data/make_samples.py  ->  gpu8.json, gpu8_slow.json, hostile.json
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import records, storage  # noqa: E402
from bench.cases import Case  # noqa: E402

HERE = Path(__file__).parent
RNG = np.random.default_rng(7)

# samples/s of one H100 for (workload, mode, precision); 1 CPU fp32 baseline each
ONE_GPU = {
    ("cnn", "train"): {"fp32": 900, "tf32": 1400, "mixed_float16": 2600, "mixed_bfloat16": 2550},
    ("mlp", "train"): {"fp32": 40000, "tf32": 150000, "mixed_float16": 300000, "mixed_bfloat16": 290000},
}
CPU = {("cnn", "train"): 22.0, ("mlp", "train"): 2100.0}
EFF = {2: 0.97, 4: 0.95, 8: 0.91}


def stats_block(times: list[float]) -> dict:
    t = sorted(times)
    n = len(t)
    q1, q3 = float(np.percentile(t, 25)), float(np.percentile(t, 75))
    return {
        "min": t[0],
        "max": t[-1],
        "mean": float(np.mean(t)),
        "stddev": float(np.std(t, ddof=1)),
        "rounds": n,
        "median": float(np.median(t)),
        "iqr": q3 - q1,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "outliers": "0;0",
        "ld15iqr": t[0],
        "hd15iqr": t[-1],
        "ops": 1 / float(np.mean(t)),
        "total": float(sum(t)),
        "data": list(times),
        "iterations": 1,
    }


def measured(
    case: Case, thr: float, run_id: str, gpu_names: list[str], power_w: float | None, slow: float = 1.0
) -> dict:
    k = 20
    samples = case.global_batch * k
    times = list(samples / (thr * slow) * (1 + RNG.normal(0, 0.01, 10)))
    info = records.base_info(case, run_id, 12_000_000_000 if case.workload == "cnn" else 400_000_000)
    med = samples / float(np.median(times))
    info.update(
        status="ok",
        math_mode={"fp32": "fp32 (tf32 off)", "tf32": "tf32"}.get(case.precision, "mixed"),
        samples_per_s=med,
        samples_per_s_ci_low=med * 0.99,
        samples_per_s_ci_high=med * 1.01,
        step_time_median_s=float(np.median(times)) / k,
        step_time_p90_s=float(np.percentile(times, 90)) / k,
        step_time_cv=0.01,
        unstable=False,
        rounds=10,
        steps_per_round=k,
        compile_s=12.5,
        params=25_557_032,
        achieved_tflops=info["flops_per_sample"] * med / 1e12,
        peak_tflops_measured=None,
        device_peak_mem_bytes=int(9e9 * case.device_count),
        host_peak_rss_bytes=int(3.2e9),
    )
    if case.device_kind == "gpu":
        info["peak_tflops_measured"] = {"fp32": 50, "tf32": 380, "mixed_float16": 750, "mixed_bfloat16": 760}[
            case.precision
        ] * case.device_count
        info["mfu_measured"] = info["achieved_tflops"] / info["peak_tflops_measured"]
        window = float(sum(times))
        gpus = []
        for i in range(case.device_count):
            trace = [
                (round(t, 2), round(power_w * (0.9 + 0.1 * math.sin(t)) + RNG.normal(0, 3), 1))
                for t in np.linspace(0, window, 60)
            ]
            gpus.append(
                {
                    "uuid": f"GPU-{i:04d}",
                    "name": gpu_names[i],
                    "pci_bus_id": f"0000:{0x18 + i:02x}:00.0",
                    "energy_j": power_w * window,
                    "power_trace": trace,
                    "energy_source": "counter",
                    "reasons": {},
                }
            )
        e = power_w * window * case.device_count
        info.update(
            energy_j=e,
            energy_j_per_sample=e / (samples * 10),
            samples_per_joule=samples * 10 / e,
            power_mean_w=e / window,
            power_max_w=power_w * 1.1 * case.device_count,
            idle_power_w=70.0 * case.device_count,
            energy_above_idle_j=e - 70.0 * case.device_count * window,
            gpu_util_mean_pct=98.0,
            sm_clock_mhz_median=1980,
            temp_max_c=66,
            throttle_reasons="sw_power_cap",
            gpu_telemetry=f"ok: {case.device_count} GPU(s) via NVML",
            nvml_memory_used_bytes=int(7.5e10),
            energy_source="counter",
            telemetry={"gpus": gpus, "window_s": window},
        )
    else:
        info.update(
            gpu_telemetry="unavailable: CPU case, no GPU used (NVML: ok)", cpu_energy_reason="permission denied"
        )
    rec = records.unmeasured(case, info)
    rec["stats"] = stats_block(times)
    return rec


def gpu8(run_id: str, node: str, gpu_name: str, slow: float = 1.0) -> dict:
    names = [gpu_name] * 8
    doc = storage.new_document(
        {
            "id": run_id,
            "profile": "standard",
            "argv": ["run"],
            "start": "2026-12-01T02:00:00+00:00",
            "end": "2026-12-01T03:10:00+00:00",
            "status": "complete",
            "options": {},
            "planned": [],
            "idle_power_w": {f"GPU-{i:04d}": 70.0 for i in range(8)},
        },
        {
            "node": node,
            "python_version": "3.11.7",
            "accelbench": {
                "cpu": {
                    "model": "Intel(R) Xeon(R) Platinum 8480+",
                    "logical_cores": 224,
                    "flags": ["avx512_bf16", "amx_bf16"],
                },
                "gpus": [
                    {"name": n, "uuid": f"GPU-{i:04d}", "pci_bus_id": f"0000:{0x18 + i:02x}:00.0"}
                    for i, n in enumerate(names)
                ],
                "driver_version": "560.35.03",
                "cuda_driver_version": "12.6",
                "tensorflow": "2.21.0",
                "keras": "3.15.1",
                "cuda_build": "12.5.1",
                "cudnn_build": "9",
                "rapl": "permission denied",
            },
        },
        {"id": "abc123", "dirty": False},
        "2026-12-01T02:00:00+00:00",
        "0.1.0",
    )
    planned = []
    for (w, mode), per_prec in ONE_GPU.items():
        batch = 256 if w == "cnn" else 1024
        cpu = Case(w, mode, "cpu", 1, False, "fp32", False, batch)
        storage.add_record(doc, measured(cpu, CPU[(w, mode)], run_id, names, None, slow))
        planned.append(cpu.id)
        for prec, thr in per_prec.items():
            for n in (1, 2, 4, 8):
                c = Case(w, mode, "gpu", n, False, prec, False, batch)
                planned.append(c.id)
                if w == "cnn" and prec == "fp32" and n == 8:
                    info = records.base_info(c, run_id)
                    info.update(
                        status="oom",
                        reason="ResourceExhaustedError: OOM when allocating tensor with shape[256,64,112,112]",
                    )
                    storage.add_record(doc, records.unmeasured(c, info))
                    continue
                total = thr * (n * EFF[n] if n > 1 else 1)
                storage.add_record(doc, measured(c, total, run_id, names, 600.0 if "mixed" in prec else 450.0, slow))
    c = Case("mlp", "train", "gpu", 1, False, "mixed_float16", True, 1024)
    info = records.base_info(c, run_id)
    info.update(status="numerics", reason="loss is nan after the timed rounds")
    storage.add_record(doc, records.unmeasured(c, info))
    c2 = Case("mlp", "train", "cpu", 1, False, "tf32", False, 1024)
    info = records.base_info(c2, run_id)
    info.update(status="unsupported", reason="tf32 needs an NVIDIA GPU with compute capability >= 8.0")
    storage.add_record(doc, records.unmeasured(c2, info))
    doc["run"]["planned"] = planned + [c.id, c2.id]
    return doc


A100 = "NVIDIA A100-SXM4-40GB"


def one_gpu(shares: dict[Case, float], gpu_name: str = A100, profile: str = "standard") -> dict:
    """One GPU machine whose cases ran at the given share of their published figure (1000 samples/s
    where there is none); its GPU capped at 250 of 400 W on a gen3 slot (a machine to check)."""
    from bench.report.reference import match

    doc = gpu8("a100-run", "dgx-a100", gpu_name)
    doc["run"]["profile"] = profile
    doc["machine_info"]["accelbench"]["gpus"] = [
        {"name": gpu_name, "uuid": "GPU-0000", "pci_bus_id": "0000:18:00.0", "max_sm_clock_mhz": 1410,
         "power_limit_w": 250.0, "default_power_limit_w": 400.0, "pcie_max": "gen3 x16", "pcie_gpu_max_gen": 4}
    ]  # fmt: skip
    doc["benchmarks"] = []
    for case, share in shares.items():
        published = match(case, "standard", A100)
        thr = (published.value if published else 1000.0) * share
        rec = measured(case, thr, "a100-run", [gpu_name], 300.0)
        rec["extra_info"]["sm_clock_mhz_median"] = 1095  # held well below the part's 1410 MHz
        storage.add_record(doc, rec)
    doc["run"]["planned"] = [c.id for c in shares]
    return doc


def tenant_record(case: Case, alone: float, shares: list[float], gpu_name: str, run_id: str) -> dict:
    """A GPU tenant case through the real combine: each tenant at ``share`` of the ``alone`` rate, over 2 s."""
    from bench import tenants

    k, n_samples = 10, case.global_batch * 10

    def rec(rate: float, start: float) -> dict:
        t, rounds = start, []
        while t < start + 2.0:
            rounds.append([t, t + n_samples / rate])
            t = rounds[-1][1]
        info = {"global_batch": case.global_batch, "steps_per_round": k, "tenant_rounds": rounds, "run_id": run_id}
        info.update(flops_per_sample=400_000_000, power_mean_w=400.0, device_peak_mem_bytes=int(4e9), case_wall_s=30.0)
        return {"extra_info": info}

    observed = {"sharing_mode": "time-slicing", "sharing_note": "time-slicing: one context runs at a time"}
    observed.update(tenant_gpu_mem_bytes=[int(5e9)] * len(shares), tenant_gpu_mem_sum_bytes=int(5e9) * len(shares))
    parts = [rec(alone * s, 100.0 + 0.01 * i) for i, s in enumerate(shares)]
    out = tenants.combine(case, rec(alone, 0.0), parts, observed)
    out["extra_info"]["pci_bus_ids"] = ["0000:18:00.0"]
    return out


def gpu_shaped_grid():
    """A full grid batch x width on a GPU and the CPU, step times t0 + c x b (GPU: 2 ms fixed, CPU: 20 us a sample)."""
    doc = gpu8("grid-run", "gpu-box", "NVIDIA H100 80GB HBM3")
    doc["benchmarks"], doc["unmeasured"] = [], []
    doc["run"]["options"] = {
        **doc["run"].get("options", {}),
        "sweeps": ["batch=1,16,256,4096,max", "width=256,1024"],
        "grid": "full",
        "max_batches": [],
    }
    # each configuration's largest-batch search (accelbench run's --sweep batch=...,max): on both devices the
    # safe batch is 4096 (a swept point too), below the largest that fit where that one's peak passed 90%
    walls = {
        ("gpu", 256): (6144, 6656),
        ("gpu", 1024): (4096, 5120),
        ("cpu", 256): (4096, 8192),
        ("cpu", 1024): (4096, 8192),
    }
    for (kind, width), (max_ok, first_fail) in walls.items():
        less = Case("mlp", "train", kind, 1, False, "fp32", False, 4096, knobs=(("width", width),)).id_without("batch")
        why = f"largest that fits {max_ok}, first failure {first_fail}, safe 4096 (6 probes)"
        doc["run"]["options"]["max_batches"].append([less, 4096, max_ok, first_fail, why])
    for width in (256, 1024):
        for b in (1, 16, 256, 4096):
            for kind, (t0, c) in (("gpu", (2e-3, 0.5e-6)), ("cpu", (1e-4, 20e-6))):
                case = Case("mlp", "train", kind, 1, False, "fp32", False, b, knobs=(("width", width),))
                rec = measured(case, b / (t0 + c * b * width / 256), "grid-run", ["NVIDIA H100 80GB HBM3"], 300.0)
                e = rec["extra_info"]
                # a step's FLOPs and weights that keep the points under the roofs: 20 MFLOP and 1M parameters at width 256
                e.update(size_width=width, flops_per_sample=2e7 * width / 256, params=int(1e6 * width / 256))
                peak, bw = (50.0, 3000.0) if kind == "gpu" else (2.0, 100.0)  # the matmul and copy probes
                e.update(achieved_tflops=e["flops_per_sample"] * e["samples_per_s"] / 1e12, peak_tflops_per_device=peak)
                e.update(peak_tflops_measured=peak, mfu_measured=e["achieved_tflops"] / peak, mem_bw_gbps_per_device=bw)
                storage.add_record(doc, rec)
    return doc


def hostile() -> dict:
    evil = '<script>alert("gpu")</script><img src=x onerror=alert(1)>'
    doc = gpu8("hostile-run", f"host{evil}", f"NVIDIA {evil}")
    doc["machine_info"]["accelbench"]["cpu"]["model"] = f"CPU {evil}"
    for r in storage.records(doc):
        if r["extra_info"]["status"] != "ok":
            r["extra_info"]["reason"] = f"reason {evil}"
    doc["run"]["argv"] = ["run", evil]
    return doc


if __name__ == "__main__":
    storage.write_atomic(HERE / "gpu8.json", gpu8("gpu8-run", "dgx-h100", "NVIDIA H100 80GB HBM3"))
    RNG = np.random.default_rng(7)
    storage.write_atomic(HERE / "gpu8_slow.json", gpu8("gpu8-slow", "dgx-h100", "NVIDIA H100 80GB HBM3", slow=0.8))
    storage.write_atomic(HERE / "hostile.json", hostile())
