"""Building case records (the pytest-benchmark entry shape) for measured and unmeasured cases."""

from __future__ import annotations

from bench.cases import Case

SUITE_NODE = "bench/suite.py::test_case"


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
    return {
        "group": None,
        "name": f"test_case[{case.id}]",
        "fullname": f"{SUITE_NODE}[{case.id}]",
        "params": {"case_id": case.id},
        "param": case.id,
        "extra_info": info,
        "options": {},
    }
