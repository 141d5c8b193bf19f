"""Synthetic nights made from a real results file: the same cases, throughput scaled per night.

Only timing figures change (rounds, median, CI); everything else is the real run's. Used by the
history and site tests and by the nightly rehearsal.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import numpy as np

from bench import storage

START = datetime(2026, 10, 1, 2, 23, tzinfo=timezone.utc)


def night(
    doc: dict,
    day: int,
    factor: float = 1.0,
    noise: float = 0.01,
    seed: int = 0,
    commit: str | None = None,
    only: str = "",
    busy: bool = False,
) -> dict:
    """Night ``day`` after START: every measured case's throughput x factor x lognormal(noise).

    ``only``: a substring of the case ids the factor applies to (others get 1.0). ``busy``: whether
    the night ran on a busy machine (the source run's own witness is replaced: it may have run
    beside other tests).
    """
    rng = np.random.default_rng(seed * 10_000 + day)
    d = copy.deepcopy(doc)
    rid = f"night{day:04d}-{seed}"
    when = START + timedelta(days=day)
    d["run"].update(id=rid, start=when.isoformat(), end=(when + timedelta(hours=1)).isoformat(), status="complete")
    d["commit_info"] = {**d.get("commit_info", {}), "id": commit or f"c{day:04d}"}
    for rec in storage.records(d):
        e = rec["extra_info"]
        e["run_id"] = rid
        e.update(busy=busy, other_cpu_pct=33.0 if busy else 0.0)
        if e["status"] != "ok" or not rec.get("stats"):
            continue
        f = (factor if only in e["case_id"] else 1.0) * float(np.exp(rng.normal(0, noise)))
        data = [t / f for t in rec["stats"]["data"]]
        rec["stats"].update(data=data, median=float(np.median(data)), min=min(data), max=max(data))
        for k in ("samples_per_s", "samples_per_s_ci_low", "samples_per_s_ci_high"):
            if e.get(k) is not None:
                e[k] = e[k] * f
    return d
