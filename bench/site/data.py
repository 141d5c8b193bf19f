"""The site's data files: ``history.csv`` (one row per night and case, for pandas) and ``index.json``."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

from bench.history.detect import TestbedVerdict

CSV_FIELDS = ["testbed", "night_id", "date_utc", "commit", "fingerprint_hash", "case_id", "workload", "mode"]
CSV_FIELDS += ["device_kind", "device_count", "nodes", "virtual", "precision", "xla", "per_replica_batch"]
CSV_FIELDS += ["backend", "parallelism", "status", "state", "value", "ci_low", "ci_high", "cv"]
CSV_FIELDS += ["energy_j_per_sample", "samples_per_joule", "other_cpu_pct", "busy", "reason"]


def history_csv(verdicts: list[TestbedVerdict]) -> str:
    """Every night's cases with the judge's state of each; columns ``CSV_FIELDS``."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for v in verdicts:
        states = {cid: {p.night_id: p.state for p in j.points} for cid, j in v.cases.items()}
        for n in v.nights:
            base = {k: n.get(k) for k in ("night_id", "date_utc", "commit", "fingerprint_hash")}
            for cid, c in n["cases"].items():
                row = {**c, **base, "testbed": v.testbed, "case_id": cid, "state": states[cid].get(n["night_id"])}
                row.update({k: bool(c.get(k)) for k in ("virtual", "xla", "busy")})  # True/False on every row
                w.writerow(row)
    return buf.getvalue()


def summary_json(verdicts: list[TestbedVerdict], built: str) -> str:
    """Testbeds, their nights and open alerts."""
    summary = {
        "built": built,
        "testbeds": [
            {"testbed": v.testbed, "nights": len(v.nights), "alerts": [asdict(a) for a in v.alerts]} for v in verdicts
        ],
    }
    return json.dumps(summary, indent=1, default=str)
