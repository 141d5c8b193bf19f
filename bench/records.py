"""Building case records (the pytest-benchmark entry shape) for measured and unmeasured cases."""

from __future__ import annotations

from bench import storage
from bench.cases import Case


def base_info(case: Case, run_id: str, flops_per_sample: int | None = None) -> dict:
    """The ``extra_info`` every record starts from: case fields, id, batch sizes."""
    return {
        "case_id": case.id,
        "run_id": run_id,
        **case.to_dict(),
        "global_batch": case.global_batch,
        "flops_per_sample": flops_per_sample,
        "status": None,
        "reason": "",
    }


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
