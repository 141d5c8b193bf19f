"""``accelbench merge``: the shards of one night (``run --shard i/n`` on several runners) -> one results file.

Shards must come from the same testbed (machine fingerprint) and commit and hold disjoint cases;
the merged run is complete only if every shard is, and records which runs it was made from.
"""

from __future__ import annotations

import copy

from bench import storage
from bench.errors import UserError


def merge(docs: list[tuple[str, dict]], run_id: str | None = None) -> dict:
    """One document from shard documents; ResultsError (a UserError) naming the file that does not fit."""
    if not docs:
        raise UserError("nothing to merge")
    storage.check_shards(docs)
    first = docs[0][1]
    out = copy.deepcopy(first)
    out["benchmarks"], out["unmeasured"] = [], []
    planned: list[str] = []
    for _, doc in docs:
        for rec in storage.records(doc):
            storage.add_record(out, copy.deepcopy(rec))
        planned += [c for c in doc["run"].get("planned", []) if c not in planned]
    runs = [d["run"] for _, d in docs]
    out["run"].update(
        id=run_id or f"{first['run']['id']}-merged",
        start=min(str(r.get("start")) for r in runs),
        end=max(str(r.get("end")) for r in runs) if all(r.get("end") for r in runs) else None,
        status="complete" if all(r.get("status") == "complete" for r in runs) else "incomplete",
        planned=planned,
        merged_from=[{"id": r["id"], "shard": r.get("shard"), "runner_name": r.get("runner_name")} for r in runs],
        shard=None,
    )
    for rec in storage.records(out):
        rec["extra_info"]["run_id"] = out["run"]["id"]
    return out
