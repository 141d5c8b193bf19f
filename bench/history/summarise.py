"""A night's results files -> one summary line (the unit of history), and testbed fingerprints.

One value per case per night: the run's median throughput with its CI, the per-round throughput
samples rounded to 4 significant digits (so the site can bootstrap speed-ups with CIs), CV,
status and reason, energy per sample. Shards of one testbed-night (same commit, same fingerprint,
disjoint cases) merge into one line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone

from bench import columns, storage
from bench.errors import UserError
from bench.fingerprint import differences, machine_fingerprint

TESTBED_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FAILED = ("numerics", "oom", "timeout", "error")  # a case that ran and broke (unsupported is not a failure)
CASE_FIELDS = [c for c in columns.CASE_COLUMNS if c not in ("run_id", "case_id", "status", "reason")]


class HistoryError(UserError):
    """Bad input to the history: one line, exit 2, nothing written."""


# read from the results documents (bench.fingerprint), where merge reads them too
fingerprint = machine_fingerprint
commit_of = storage.commit_of


def same_testbed(a: dict, b: dict, backend: str | None = None) -> bool:
    """Two nights' fingerprints agree on what a case of ``backend`` (None: any case) depends on.

    A field only one of them recorded (nights added before it was part of the fingerprint, or a
    backend one night did not run) is no difference: adding a field starts no new baseline by itself.
    """
    return not differences(a, b, backend)


def new_segment(prev: dict | None, night: dict, backend: str | None = None) -> bool:
    """Whether ``night`` starts a new baseline after ``prev``: another profile, or fingerprints that differ.

    Fingerprints are compared field by field (:func:`same_testbed`); by hash where a night has none.
    """
    if prev is None:
        return False
    if prev.get("profile") and night.get("profile") and prev["profile"] != night["profile"]:
        return True  # the profile sizes the models: the same case id measures another model
    if isinstance(prev.get("fingerprint"), dict) and isinstance(night.get("fingerprint"), dict):
        return not same_testbed(prev["fingerprint"], night["fingerprint"], backend)
    return prev.get("fingerprint_hash") != night.get("fingerprint_hash")


def fingerprint_hash(fp: dict) -> str:
    """Short stable hash of a fingerprint (canonical JSON)."""
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:12]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "unknown"


def resolve_testbed(doc: dict, given: str | None = None) -> str:
    """``--testbed``, else the run's recorded testbed (ACCELBENCH_TESTBED), else derived from the machine."""
    name = given or doc.get("run", {}).get("testbed")
    if not name:
        fp = fingerprint(doc)
        name = f"{_slug(fp['gpus'][0])}x{fp['gpu_count']}" if fp["gpus"] else f"cpu-{_slug(str(fp['cpu']))}"
    if not TESTBED_RE.match(name):
        raise HistoryError(f"testbed name must be letters, digits, '.', '_' or '-' (at most 64); got {name!r}")
    return name


def _r4(x: float) -> float:
    return float(f"{x:.4g}")


def _noise_floor(e: Mapping) -> float | None:
    """The case's relative uncertainty: the run-level half-width where measured, else the achieved CI's."""
    v, lo, hi = e.get("samples_per_s"), e.get("run_ci_low"), e.get("run_ci_high")
    run = (hi - lo) / (2 * v) if v and lo and hi else None
    return max((x for x in (run, e.get("ci_achieved_rel")) if x is not None), default=None)


def _case_line(rec: storage.CaseRecord) -> dict:
    e = rec.info
    out: dict = {k: e.get(k) for k in CASE_FIELDS}
    out.update({k: v for k, v in storage.COLUMN_DEFAULTS.items() if out.get(k) is None})  # older results
    out["status"] = rec.status
    if rec.samples_per_s is None:
        out["reason"] = rec.reason[:300]
        return out
    samples = rec.throughput_samples
    out.update(
        metric="samples_per_s",
        unit="samples/s",
        direction="higher",
        value=e.get("samples_per_s"),
        ci_low=e.get("samples_per_s_ci_low"),
        ci_high=e.get("samples_per_s_ci_high"),
        n=len(samples),
        cv=e.get("step_time_cv"),
        samples=[_r4(s) for s in samples],
        energy_j_per_sample=e.get("energy_j_per_sample"),
        samples_per_joule=e.get("samples_per_joule"),
        compile_s=e.get("compile_s"),
        # the judge's band is at least the case's own uncertainty: its achieved CI half-width, or
        # where the run measured it, how far a rerun may land (bench.spread)
        noise_floor=_noise_floor(e),
        device_peak_mem_bytes=e.get("device_peak_mem_bytes"),
        throttle=e.get("throttle_reasons") or None,
        temp_max_c=e.get("temp_max_c"),
        sm_clock_mhz=e.get("sm_clock_mhz_median"),
        other_cpu_pct=e.get("other_cpu_pct"),
        other_gpu_processes=e.get("other_gpu_processes"),
        busy=bool(e.get("busy")),
    )
    if rec.case.tenants > 1:  # tracked: the aggregate; the sharing figures for the site's card
        out.update({k: e.get(k) for k in ("sharing_mode", "stp", "worst_slowdown", "fairness", "sharing_verdict")})
    if rec.case.mode == "serve":  # tracked: the rate at the SLO; its search's bracket is its noise floor
        lo, hi = e.get("rate_bracket_low"), e.get("rate_bracket_high")
        out.update(
            metric="max_rate_at_slo",
            unit="req/s",
            value=e.get("max_rate_at_slo"),
            ci_low=lo,
            ci_high=hi,
            n=1,
            cv=None,
            samples=[],
            noise_floor=hi / lo - 1 if lo and hi else None,
            reason=(e.get("serve_reason") or "")[:300],
        )
    return out


def _night_date(doc: dict, path: str) -> str:
    start = doc.get("run", {}).get("start") or doc.get("datetime")
    try:
        dt = datetime.fromisoformat(str(start))
    except ValueError:
        raise HistoryError(f"{path}: run start {start!r} is not an ISO date") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).isoformat(timespec="seconds")


def summarise(docs: list[tuple[str, dict]], testbed: str, report: str | None = None) -> dict:
    """One night of one testbed from its results files (shards merge); HistoryError if they disagree."""
    if not docs:
        raise HistoryError("no results files for this night")
    first = docs[0][1]
    fp, commit = check_shards(docs), commit_of(first)
    cases: dict[str, dict] = {}
    runners: list[str] = []
    statuses = []
    for path, doc in docs:
        rid = str(doc.get("run", {}).get("id"))
        if not storage.RUN_ID_RE.match(rid):  # it names files in the store
            raise HistoryError(f"{path}: run id {rid!r} is not a plain name (letters, digits, '.', '_', '-')")
        for rec in storage.case_records(doc):
            cases[rec.id] = _case_line(rec)
        run = doc.get("run", {})
        if run.get("runner_name") and run["runner_name"] not in runners:
            runners.append(str(run["runner_name"]))
        statuses.append(run.get("status"))
    dates = sorted(_night_date(d, p) for p, d in docs)
    run_ids = sorted(str(d["run"]["id"]) for _, d in docs)
    ok = [c for c in cases.values() if c["status"] == "ok"]
    temps = [c["temp_max_c"] for c in ok if c.get("temp_max_c") is not None]
    clocks = sorted(c["sm_clock_mhz"] for c in ok if c.get("sm_clock_mhz") is not None)
    ci = first.get("run", {}).get("ci") or {}
    return {
        "night_id": run_ids[0],
        "run_ids": run_ids,
        "date_utc": dates[0],
        "testbed": testbed,
        "commit": commit,
        "branch": (first.get("commit_info") or {}).get("branch"),
        "workflow_run_url": ci.get("run_url"),
        "runner_names": runners,
        "profile": first.get("run", {}).get("profile"),
        "status": "complete" if all(s == "complete" for s in statuses) else "incomplete",
        "fingerprint": fp,
        "fingerprint_hash": fingerprint_hash(fp),
        "health": {
            "throttle_seen": any(c.get("throttle") for c in ok),
            "max_temp_c": max(temps) if temps else None,
            "sm_clock_mhz_median": clocks[len(clocks) // 2] if clocks else None,
            "failed_cases": sum(1 for c in cases.values() if c["status"] in FAILED),
            "unsupported_cases": sum(1 for c in cases.values() if c["status"] == "unsupported"),
            "measured_cases": len(ok),
            "busy_cases": sum(1 for c in ok if c.get("busy")),
        },
        "report": report,
        "cases": cases,
    }


def check_shards(docs: list[tuple[str, dict]]) -> dict:
    """Shards of one night: :func:`bench.storage.check_shards` (their fingerprint), failing as a HistoryError."""
    try:
        return storage.check_shards(docs)
    except storage.ResultsError as e:
        raise HistoryError(str(e)) from None
