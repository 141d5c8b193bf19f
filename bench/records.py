"""Building case records (the pytest-benchmark entry shape) for measured and unmeasured cases."""

from __future__ import annotations

from collections.abc import Sequence

from bench import storage
from bench.cases import Case
from bench.profiles import Timing
from workloads import WORKLOADS


def base_info(
    case: Case, run_id: str, flops_per_sample: int | None = None, model_flops_per_sample: int | None = None
) -> dict:
    """The ``extra_info`` every record starts from: case fields, id, batch sizes, FLOPs per sample.

    ``flops_per_sample``: as executed (training without the data input's gradient);
    ``model_flops_per_sample``: the 3 x forward convention of MFU papers (``workloads.base``).
    """
    return {
        "case_id": case.id,
        "run_id": run_id,
        **case.to_dict(),
        "global_batch": case.global_batch,
        "flops_per_sample": flops_per_sample,
        "model_flops_per_sample": model_flops_per_sample,
        "status": None,
        "reason": "",
    }


def case_info(case: Case, run_id: str, profile: str) -> dict:
    """``base_info`` with the workload's FLOP counts at the profile's size."""
    w = WORKLOADS[case.workload]
    size = w.size(profile, case.knobs)
    info = base_info(
        case, run_id, w.flops_per_sample(size, case.step_mode), w.model_flops_per_sample(size, case.step_mode)
    )
    info.update({f"size_{k}": v for k, v in w.knob_values(size).items()})  # a sweep's axes, as columns
    return info


def unmeasured(case: Case, info: dict) -> dict:
    """A record without timing statistics (unsupported or failed case)."""
    name, fullname = storage.suite_name(case.id)
    return {
        "group": None,
        "name": name,
        "fullname": fullname,
        "params": {"case_id": case.id},
        "param": case.id,
        "extra_info": info,
        "options": {},
    }


def measured(case: Case, benchmark_record: dict, info: dict, round_times_s: list[float]) -> dict:
    """A measured case's record: pytest-benchmark's entry with per-sample ``stats`` (schema 2)."""
    rec = dict(benchmark_record)
    rec["name"], rec["fullname"] = storage.suite_name(case.id)
    rec["stats"] = storage.per_sample_stats(list(round_times_s), case.global_batch * info["steps_per_round"])
    rec["extra_info"] = info
    return rec


def probes_of(done: Sequence[storage.CaseRecord], device_kind: str, timing: Timing) -> dict[str, dict]:
    """The matmul peaks this run already measured on ``device_kind``, by precision, and its copy probe under ``copy``.

    A peak is measured once per run, device kind and precision (time-to-answer.md: up to 12 s
    per fp32 GPU case otherwise) by the first case that needs it; ``case_id`` names that case.
    Only probes of the profile's size count, so a peak is always of the size the report shows.
    """
    out: dict[str, dict] = {}
    for r in done:
        e = r.info
        if r.case.device_kind != device_kind or r.case.tenants > 1:
            continue
        if e.get("mem_bw_gbps_per_device") and e.get("copy_probe_bytes"):  # the copy probe: one per device kind
            out.setdefault(
                "copy",
                {
                    "gbps": float(e["mem_bw_gbps_per_device"]),
                    "n_bytes": int(e["copy_probe_bytes"]),
                    "case_id": str(e.get("copy_probe_case") or r.id),
                },
            )
        if not e.get("peak_tflops_per_device"):
            continue
        if e.get("probe_n") != timing.probe_n[device_kind]:
            continue
        out.setdefault(
            r.case.precision,
            {
                "tflops": float(e["peak_tflops_per_device"]),
                "n": int(e["probe_n"]),
                "dtype": str(e.get("probe_dtype") or ""),
                "case_id": str(e.get("probe_case") or r.id),
            },
        )
    return out
